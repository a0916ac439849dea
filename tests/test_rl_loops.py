"""GRPO and Expert Iteration loops on a tiny model with a stub backend and a stub grader."""
import copy

import pytest
import torch

import a5core.ei as ei_mod
import a5core.grpo as grpo_mod
from a5core.checkpoint import Checkpointer
from a5core.config import ConfigError, EvalConfig
from a5core.ei import EIConfig, NoCorrectSamples, ei_round, expert_iteration
from a5core.generation.base import Completion
from a5core.grpo import GRPOConfig, train_grpo
from a5core.logprobs import get_response_log_probs
from a5core.prompts import build_prompt
from a5core.sft import SFTConfig
from a5core.tokenization import tokenize_prompt_and_output

ROWS = [{"unique_id": f"q{i}", "problem": f"Compute {i} + {i}.", "answer": str(2 * i), "subject": "s", "level": "Level 1"} for i in range(6)]


class StubBackend:
    """Each prompt gets n completions cycling through `texts`."""

    def __init__(self, tok, texts):
        self.tok, self.texts, self.calls = tok, texts, 0

    def generate(self, prompts, sampling, progress=True):
        self.calls += 1
        mk = lambda t: Completion(t, tuple(self.tok(t, add_special_tokens=False)["input_ids"]), "stop")  # noqa: E731
        return [[mk(self.texts[j % len(self.texts)]) for j in range(sampling.n)] for _ in prompts]

    def sync_weights(self, policy):
        pass


class StubPool:
    """Reward 1 for responses containing 'good'."""

    path = "tests:stub"

    def map(self, responses, gts, progress=False):
        out = []
        for r in responses:
            ok = float("good" in r)
            out.append({"format_reward": 1.0, "answer_reward": ok, "reward": ok, "status": "correct" if ok else "wrong",
                        "extracted": r, "normalized_pred": r, "normalized_gt": "", "detail": ""})
        return out


def eval_stub(policy, n):
    return {"accuracy": 0.0, "format_rate": 0.0, "mean_response_length": 0.0, "mean_token_entropy": 0.0}


def _cfg(**kw):
    base = dict(n_grpo_steps=2, learning_rate=3e-3, rollout_batch_size=8, group_size=4, train_batch_size=8,
                gradient_accumulation_steps=2, max_tokens=8, eval_every=0, eval_examples=2, checkpoint_every=1)
    return GRPOConfig(**{**base, **kw})


def _margin(model, tok):
    prompt = build_prompt(ROWS[0]["problem"])
    b = tokenize_prompt_and_output([prompt, prompt], [" good", " bad"], tok)
    with torch.no_grad():
        lp = get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"]
    s = (lp * b["response_mask"]).sum(-1)
    return float(s[0] - s[1])


def test_grpo_moves_policy_toward_rewarded_output(tiny):
    model, tok = tiny
    policy = copy.deepcopy(model)
    before = _margin(policy, tok)
    train_grpo(policy, tok, StubBackend(tok, [" good", " bad"]), ROWS, _cfg(n_grpo_steps=3), EvalConfig(), StubPool(), eval_stub)
    assert _margin(policy, tok) > before + 0.1


def test_off_policy_old_log_probs_once_no_grad_and_zero_first_pass_clip(tiny, monkeypatch):
    model, tok = tiny
    calls = []
    real = grpo_mod.old_log_probs_for

    def counting(*args, **kw):
        out = real(*args, **kw)
        calls.append(out)
        return out

    monkeypatch.setattr(grpo_mod, "old_log_probs_for", counting)
    rows = []
    cfg = _cfg(n_grpo_steps=1, loss_type="grpo_clip", epochs_per_rollout_batch=3, train_batch_size=4, gradient_accumulation_steps=2)
    train_grpo(copy.deepcopy(model), tok, StubBackend(tok, [" good", " bad"]), ROWS, cfg, EvalConfig(), StubPool(), eval_stub,
               log=lambda kind, row: rows.append((kind, row)))
    assert len(calls) == 1 and not any(t.requires_grad for t in calls[0].values())
    train = [r for k, r in rows if k == "train"]
    assert len(train) == 3 * 2  # 3 epochs x 2 optimizer steps of 4 rollouts
    assert train[0]["clip_fraction"] == 0.0  # the first optimizer step is exactly on-policy


def test_config_errors_before_any_generation(tiny):
    model, tok = tiny
    backend = StubBackend(tok, [" good"])
    with pytest.raises(ConfigError, match="off-policy"):
        train_grpo(model, tok, backend, ROWS, _cfg(epochs_per_rollout_batch=2), EvalConfig(), StubPool(), eval_stub)
    assert backend.calls == 0


def test_grpo_killed_run_resumes(tiny, tmp_path):
    model, tok = tiny
    cfg = _cfg(n_grpo_steps=3)
    full = copy.deepcopy(model)
    train_grpo(full, tok, StubBackend(tok, [" good", " bad"]), ROWS, cfg, EvalConfig(), StubPool(), eval_stub)

    def dying(kind, row):
        if kind == "train" and row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_grpo(copy.deepcopy(model), tok, StubBackend(tok, [" good", " bad"]), ROWS, cfg, EvalConfig(), StubPool(), eval_stub,
                   Checkpointer(tmp_path, "fp", 1), dying)
    resumed = copy.deepcopy(model)
    summary = train_grpo(resumed, tok, StubBackend(tok, [" good", " bad"]), ROWS, cfg, EvalConfig(), StubPool(), eval_stub,
                         Checkpointer(tmp_path, "fp", 1))
    assert summary["steps_done"] == 3
    for p, q in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def _ei(tiny, texts, monkeypatch, **kw):
    model, tok = tiny
    handed = []
    monkeypatch.setattr(ei_mod, "train_sft", lambda policy, tok, rows, cfg, ev, ck, log: handed.append(rows) or eval_stub(policy, 0))
    cfg = EIConfig(n_questions=3, rollouts_per_question=4, max_kept_per_question=2, **kw)
    out = ei_round(model, tok, StubBackend(tok, texts), ROWS, 1, cfg, SFTConfig(), EvalConfig(), StubPool(), eval_stub)
    return out, handed


def test_ei_round_keeps_exactly_the_correct_capped_deduped(tiny, monkeypatch):
    (rollouts, report, _), handed = _ei(tiny, [" good one", " bad", " good one", " good two"], monkeypatch)
    assert len(rollouts) == 12 and report["correct"] == 9 and report["duplicates_removed"] == 3
    assert report["kept"] == 6 and report["removed_by_cap"] == 0 and report["trained"]
    assert sorted(r["response"] for r in handed[0]) == sorted([" good one", " good two"] * 3)
    assert sum(r["kept"] for r in rollouts) == 6


def test_ei_round_without_correct_samples(tiny, monkeypatch):
    with pytest.raises(NoCorrectSamples, match="0 of 12 rollouts were correct"):
        _ei(tiny, [" bad"], monkeypatch)
    (_, report, _), handed = _ei(tiny, [" bad"], monkeypatch, if_no_correct="skip")
    assert report["trained"] is False and not handed


def test_time_budget_stops_evaluates_and_reports_best(tiny):
    model, tok = tiny
    rows = []
    summary = train_grpo(copy.deepcopy(model), tok, StubBackend(tok, [" good", " bad"]), ROWS, _cfg(n_grpo_steps=50, time_budget_s=1e-9),
                         EvalConfig(), StubPool(), eval_stub, log=lambda kind, row: rows.append((kind, row)))
    # the budget is spent before the first step: no training, one final evaluation, reported as stopped
    assert summary["stopped_by_time_budget"] and summary["steps_done"] == 0
    assert [k for k, _ in rows] == ["eval"] and summary["best_step"] == 0


def _run_ei(model, tok, scratch, cfg, log=None):
    rows = []
    out = expert_iteration(model, tok, StubBackend(tok, [" good one", " bad", " good two"]), ROWS, cfg,
                           SFTConfig(batch_size=4, micro_batch_size=2, learning_rate=1e-3, eval_every=0, checkpoint_every=1),
                           EvalConfig(), StubPool(), eval_stub, scratch, "fp", log or (lambda kind, row: rows.append((kind, row))))
    return out, rows


def test_expert_iteration_runs_n_rounds_from_round_zero(tiny, tmp_path):
    model, tok = tiny
    policy = copy.deepcopy(model)
    before = _margin(policy, tok)
    (rollouts, reports), rows = _run_ei(policy, tok, str(tmp_path), EIConfig(n_rounds=3, n_questions=2, rollouts_per_question=3, learning_rate=1e-3))
    assert [r["round"] for r in reports] == [0, 1, 2, 3]
    assert [r["round"] for k, r in rows if k == "rounds"] == [0, 1, 2, 3]
    assert sorted({r["round"] for r in rollouts}) == [1, 2, 3] and len(rollouts) == 3 * 2 * 3
    assert all(r["kept"] == ("good" in r["response"]) for r in rollouts)  # two distinct correct answers, cap 2
    assert {r["round"] for k, r in rows if k == "train"} == {1, 2, 3}  # each round's SFT steps, tagged with the round
    assert _margin(policy, tok) > before  # SFT on the kept " good ..." rollouts


def test_expert_iteration_resumes_after_a_kill(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    cfg = EIConfig(n_rounds=3, n_questions=2, rollouts_per_question=3, learning_rate=1e-3)
    straight = copy.deepcopy(model)
    (_, reports_straight), rows_straight = _run_ei(straight, tok, str(tmp_path / "a"), cfg)
    real_round, calls = ei_mod.ei_round, []

    def dies_in_round_3(*a, **kw):
        calls.append(a[4])
        if a[4] == 3 and len(calls) == 3:
            raise KeyboardInterrupt("killed")
        return real_round(*a, **kw)

    monkeypatch.setattr(ei_mod, "ei_round", dies_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        _run_ei(copy.deepcopy(model), tok, str(tmp_path / "b"), cfg)
    resumed = copy.deepcopy(model)
    (rollouts, reports), rows = _run_ei(resumed, tok, str(tmp_path / "b"), cfg)
    assert calls == [1, 2, 3, 3]  # rounds 1 and 2 were not redone
    assert [r["round"] for r in reports] == [0, 1, 2, 3] and len(rollouts) == 18
    assert [(k, r["round"]) for k, r in rows] == [(k, r["round"]) for k, r in rows_straight]  # logs replayed, none lost
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_ei_config_rejects_zero_rounds():
    from a5core.config import from_dict

    with pytest.raises(ConfigError, match="n_rounds"):
        from_dict(EIConfig, {"n_rounds": 0}, "ei")


def test_evaluation_averages_over_samples_per_example(tiny):
    from a5core.evaluation import evaluate_policy

    model, tok = tiny
    backend = StubBackend(tok, [" good", " bad", " bad"])  # sample j of every prompt is texts[j % 3]
    records, metrics = evaluate_policy(model, tok, backend, ROWS[:4], EvalConfig(samples_per_example=3), StubPool(), progress=False)
    assert len(records) == 12 and [r["sample_index"] for r in records[:3]] == [0, 1, 2]
    assert metrics["n"] == 12 and metrics["accuracy"] == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="samples_per_example"):
        from a5core.config import from_dict

        from_dict(EvalConfig, {"samples_per_example": 0}, "validation")


def test_expert_iteration_syncs_the_trained_weights_before_each_round(tiny, tmp_path):
    """On the vLLM path the engine must sample round k from round k-1's policy: each round syncs first."""
    model, tok = tiny
    synced = []

    class RecordingBackend(StubBackend):
        def sync_weights(self, policy):
            synced.append(next(policy.parameters()).detach().clone())

    policy = copy.deepcopy(model)
    expert_iteration(policy, tok, RecordingBackend(tok, [" good one", " bad"]), ROWS, EIConfig(n_rounds=3, n_questions=2, learning_rate=1e-3),
                     SFTConfig(batch_size=4, micro_batch_size=2, learning_rate=1e-3, eval_every=0, checkpoint_every=0),
                     EvalConfig(), StubPool(), eval_stub, None, "fp")
    assert len(synced) == 3
    assert torch.equal(synced[0], next(model.parameters()))  # round 1 samples from the initial policy
    assert not torch.equal(synced[0], synced[1]) and not torch.equal(synced[1], synced[2])  # later rounds from the trained one
