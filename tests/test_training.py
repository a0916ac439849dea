"""The SFT loop on a tiny model: gradient accumulation, warm-up as a fraction, resume after a kill, and its logs."""

import copy
import json

import pytest
import torch

from a5core.model.compute import Compute
from a5core.model.tokenization import pad_token_id
from a5core.rl.sft import SFTConfig, encode_examples, sft_step, train_sft
from a5core.run.checkpoint import Checkpointer
from a5core.run.history import read_log
from tests.support.loops import SFT_ROWS, DyingHistory, StubValidator, flat_grads, run_sft
from tests.support.resume import checkpointer, straight_killed_resumed


def test_grad_accumulation_equals_one_big_batch(tiny):
    model, tok = tiny
    ex = encode_examples(tok, SFT_ROWS[:4])
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    sft_step(a, ex, SFTConfig(micro_batch_size=1), pad_token_id(tok), torch.device("cpu"), compute=Compute())
    sft_step(b, ex, SFTConfig(micro_batch_size=4), pad_token_id(tok), torch.device("cpu"), compute=Compute())
    assert torch.allclose(flat_grads(a), flat_grads(b), atol=1e-5, rtol=1e-4)


def test_empty_response_rejected(tiny):
    _, tok = tiny
    with pytest.raises(ValueError, match="empty response"):
        encode_examples(tok, [{"unique_id": "z", "prompt": "p", "response": ""}])


def _train(model, tok, folder, cfg, ckpt=None, die_at=None):
    return run_sft(model, tok, folder, cfg, ckpt=ckpt, die_at=die_at)


def test_killed_run_resumes_to_same_weights_and_logs(tiny, tmp_path):
    model, tok = tiny
    cfg = SFTConfig(batch_size=2, micro_batch_size=2, eval_every=2, eval_examples=2, checkpoint_every=1, lr=1e-3)

    def run(name, kill_at):
        policy = copy.deepcopy(model)  # each attempt is a fresh process: it starts from the initial weights
        return policy, _train(policy, tok, tmp_path / name, cfg, checkpointer(tmp_path, name), die_at=kill_at)[1]

    out = straight_killed_resumed(run, 3)  # "killed" while logging step 3; its last checkpoint is step 2
    (full, straight), (resumed, history) = out.straight, out.resumed
    for p, q in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert [r["step"] for r in history.rows["train"]] == [1, 2, 3, 4]
    drop = ("perf/tokens_per_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in history.rows["train"]] == [
        {k: v for k, v in r.items() if k not in drop} for r in straight.rows["train"]
    ]
    assert [r["step"] for r in read_log(tmp_path / "resumed" / "logs" / "eval.csv")] == [0, 2, 4]  # step 0 = the start
    assert (tmp_path / "resumed" / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text().count("\n") == 5
    assert Checkpointer(tmp_path / "ck", "other-fingerprint", 1).load() is None  # changed inputs start fresh


def test_warmup_is_a_fraction_of_the_run_and_validation_is_full_at_the_end(tiny, tmp_path):
    model, tok = tiny
    validator = StubValidator()
    cfg = SFTConfig(batch_size=1, micro_batch_size=1, warmup_ratio=0.5, eval_every=3, eval_examples=2, lr=1e-3)
    with DyingHistory(tmp_path) as history:
        train_sft(
            copy.deepcopy(model), tok, rows=SFT_ROWS, cfg=cfg, validate=validator, history=history, compute=Compute()
        )
    lrs = [r["train/lr"] for r in history.rows["train"]]
    assert lrs[:4] == pytest.approx([1e-3 * k / 4 for k in (1, 2, 3, 4)])  # 8 steps, 4 of warm-up
    assert validator.calls == [False, False, True]  # the fixed subset mid-run (steps 3, 6), the whole set at the end
    completions = [json.loads(line) for line in (tmp_path / "logs" / "completions.jsonl").read_text().splitlines()]
    assert completions == []  # the stub evaluation has no samples; the table exists


def test_console_prints_a_line_per_step_with_numbers(tiny, tmp_path, capsys):
    model, tok = tiny
    cfg = SFTConfig(batch_size=4, micro_batch_size=2, eval_every=0, lr=1e-3)
    with DyingHistory(tmp_path) as history:
        train_sft(
            copy.deepcopy(model),
            tok,
            rows=SFT_ROWS,
            cfg=cfg,
            validate=StubValidator(),
            history=history,
            compute=Compute(),
        )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[test] step")]
    assert len(lines) == 2 and "loss " in lines[0] and "tok/s" in lines[0]
    # the first step of a process starts the clock; the rate and ETA come from the steps after it
    assert "ETA" not in lines[0] and "s/step, ETA 0:00:00" in lines[1]


def test_console_rate_counts_the_steps_after_the_first(tmp_path, monkeypatch, capsys):
    import a5core.run.history

    now = [0.0]
    monkeypatch.setattr(a5core.run.history.time, "monotonic", lambda: now[0])
    with a5core.run.history.RunHistory(tmp_path / "live", tmp_path / "logs", name="t", total_steps=5) as history:
        for step, end in ((1, 100.0), (2, 110.0), (3, 130.0)):  # steps 2 and 3 take 10 s and 20 s
            now[0] = end
            history.log("train", {"step": step, "train/loss": 0.5})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[t] step")]
    assert "s/step" not in lines[0]
    assert lines[1].endswith("10.0 s/step, ETA 0:00:30") and lines[2].endswith("15.0 s/step, ETA 0:00:30")
