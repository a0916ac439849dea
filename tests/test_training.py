import copy
from dataclasses import replace

import pytest
import torch

from a5core.checkpoint import Checkpointer
from a5core.config import ConfigError, from_dict
from a5core.ei import select_kept
from a5core.grpo import GRPOConfig
from a5core.sft import SFTConfig, encode_examples, sft_step, train_sft
from a5core.tokenization import pad_token_id

ROWS = [{"unique_id": str(i), "prompt": f"Compute {i} + 1.", "response": f" {i} + 1 = {i + 1}. </think> <answer>{i + 1}</answer>"} for i in range(8)]


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_grad_accumulation_equals_one_big_batch(tiny):
    model, tok = tiny
    ex = encode_examples(tok, ROWS[:4])
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    sft_step(a, ex, SFTConfig(micro_batch_size=1), pad_token_id(tok), torch.device("cpu"))
    sft_step(b, ex, SFTConfig(micro_batch_size=4), pad_token_id(tok), torch.device("cpu"))
    assert torch.allclose(_grads(a), _grads(b), atol=1e-5, rtol=1e-4)


def test_empty_response_rejected(tiny):
    _, tok = tiny
    with pytest.raises(ValueError, match="empty response"):
        encode_examples(tok, [{"unique_id": "z", "prompt": "p", "response": ""}])


def test_killed_run_resumes_to_same_weights(tiny, tmp_path):
    model, tok = tiny
    cfg = SFTConfig(batch_size=2, micro_batch_size=2, eval_every=0, checkpoint_every=1, learning_rate=1e-3)
    ev = lambda p, n: {"accuracy": 0.0}  # noqa: E731
    full = copy.deepcopy(model)
    train_sft(full, tok, ROWS, cfg, ev)
    # "kill" after step 2: run a copy whose loop raises, leaving its last checkpoint behind
    part = copy.deepcopy(model)
    ck = Checkpointer(tmp_path, "fp", 1)
    calls = {"n": 0}

    def dying_log(kind, row):
        calls["n"] += 1
        if kind == "train" and row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_sft(part, tok, ROWS, cfg, ev, ck, dying_log)
    resumed = copy.deepcopy(model)  # a fresh process starts from the initial weights again
    train_sft(resumed, tok, ROWS, cfg, ev, Checkpointer(tmp_path, "fp", 1))
    for p, q in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert Checkpointer(tmp_path, "other-fingerprint", 1).load() is None  # changed inputs start fresh


def test_grpo_config_errors_before_work():
    with pytest.raises(ConfigError, match="divisible by gradient_accumulation_steps"):
        from_dict(GRPOConfig, {"train_batch_size": 10, "gradient_accumulation_steps": 3}, "grpo")
    with pytest.raises(ConfigError, match="rollout_batch_size must be divisible by group_size"):
        from_dict(GRPOConfig, {"rollout_batch_size": 10, "group_size": 4, "train_batch_size": 10, "gradient_accumulation_steps": 2}, "grpo")
    with pytest.raises(ConfigError, match="off-policy"):
        from_dict(GRPOConfig, {"epochs_per_rollout_batch": 2}, "grpo")
    with pytest.raises(ConfigError, match="not one of"):
        from_dict(GRPOConfig, {"loss_type": "ppo"}, "grpo")


def test_ei_selection_cap_and_dedup():
    recs = [{"unique_id": "a", "response": "x", "reward": 1.0}, {"unique_id": "a", "response": "x ", "reward": 1.0},
            {"unique_id": "a", "response": "y", "reward": 1.0}, {"unique_id": "a", "response": "z", "reward": 1.0},
            {"unique_id": "b", "response": "x", "reward": 0.0}]
    kept, counts = select_kept(recs, 2, dedup=True)
    assert [r["response"] for r in kept] == ["x", "y"] and counts == {"duplicates_removed": 1, "removed_by_cap": 1}
    kept, _ = select_kept(recs, 0, dedup=False)
    assert len(kept) == 4
