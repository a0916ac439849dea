"""GRPO and Expert Iteration loops on a tiny model with a stub backend and a stub grader."""
import copy

import pytest
import torch

import a5core.ei as ei_mod
import a5core.grpo as grpo_mod
from a5core.checkpoint import Checkpointer
from a5core.config import ConfigError, EvalConfig
from a5core.ei import EIConfig, NoCorrectSamples, ei_round, history_row, round_metrics
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


EI_SFT = SFTConfig(batch_size=2, micro_batch_size=1, learning_rate=1e-3, eval_every=0, checkpoint_every=1)
EI_CFG = EIConfig(n_questions=2, rollouts_per_question=3, learning_rate=1e-3)


def _round(policy, tok, k, scratch=None, backend=None, log=lambda kind, row: None, evaluate_fn=eval_stub):
    backend = backend or StubBackend(tok, [" good one", " bad", " good two"])
    return ei_round(policy, tok, backend, ROWS, k, EI_CFG, EI_SFT, EvalConfig(), StubPool(), evaluate_fn, scratch, "fp", log)


def test_ei_rounds_chain_and_build_the_history_from_round_zero(tiny):
    model, tok = tiny
    policy, rows = copy.deepcopy(model), []
    margins = [_margin(policy, tok)]
    history = [history_row(0, eval_stub(policy, 0))]
    for k in (1, 2, 3):  # what ei_round_1..3 do, each from the previous round's policy
        rollouts, report, final = _round(policy, tok, k, log=lambda kind, row: rows.append((kind, row)))
        history.append(history_row(k, final, report))
        margins.append(_margin(policy, tok))
        assert {r["round"] for r in rollouts} == {k} and len(rollouts) == 2 * 3
        assert all(r["kept"] == ("good" in r["response"]) for r in rollouts)  # two distinct correct answers, cap 2
    assert [r["round"] for r in history] == [0, 1, 2, 3] and history[1]["kept"] == 4 and history[1]["trained"] is True
    assert {r["round"] for kind, r in rows if kind == "train"} == {1, 2, 3}  # each round's SFT steps, tagged with the round
    assert margins[0] < margins[1] < margins[2] < margins[3]  # SFT on the kept " good ..." rollouts, round after round
    m = round_metrics([{**h, "accuracy": a} for h, a in zip(history, (0.1, 0.4, 0.3, 0.2))])
    assert (m["round"], m["initial_accuracy"], m["best_accuracy"], m["best_round"], m["accuracy"]) == (3, 0.1, 0.4, 1, 0.2)


def test_ei_round_resumes_after_a_kill_without_generating_again(tiny, tmp_path):
    model, tok = tiny
    straight, rows_straight = copy.deepcopy(model), []
    _round(straight, tok, 1, str(tmp_path / "a"), log=lambda kind, row: rows_straight.append((kind, row)))

    def dies_in_sft_step_2(kind, row):
        if kind == "train" and row["step"] == 2:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        _round(copy.deepcopy(model), tok, 1, str(tmp_path / "b"), log=dies_in_sft_step_2)
    resumed, rows, backend = copy.deepcopy(model), [], StubBackend(tok, [" good one", " bad", " good two"])
    rollouts, report, _ = _round(resumed, tok, 1, str(tmp_path / "b"), backend, log=lambda kind, row: rows.append((kind, row)))
    assert backend.calls == 0  # the graded rollouts came from scratch
    assert report["kept"] == 4 and len(rollouts) == 6
    assert [(k, r["step"]) for k, r in rows] == [(k, r["step"]) for k, r in rows_straight]  # SFT logs replayed, none lost
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_ei_config_rejects_empty_rounds():
    from a5core.config import from_dict

    with pytest.raises(ConfigError, match="n_questions"):
        from_dict(EIConfig, {"n_questions": 0}, "ei")
    with pytest.raises(ConfigError, match="unknown"):  # the number of rounds is the number of ei_round_<k> stages
        from_dict(EIConfig, {"n_rounds": 3}, "ei")


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


def test_ei_round_samples_from_its_start_policy_and_validates_the_trained_one(tiny):
    """On the vLLM path the engine must sample from the policy the round starts from (round k-1's model) and
    validate the policy after the round's SFT: the round syncs the engine before each."""
    model, tok = tiny
    synced = []

    class RecordingBackend(StubBackend):
        def sync_weights(self, policy):
            synced.append(next(policy.parameters()).detach().clone())

    backend = RecordingBackend(tok, [" good one", " bad"])

    def evaluate_fn(policy, n):  # as pipeline.make_eval_fn does
        backend.sync_weights(policy)
        return eval_stub(policy, n)

    policy = copy.deepcopy(model)
    _round(policy, tok, 1, backend=backend, evaluate_fn=evaluate_fn)
    assert len(synced) == 2
    assert torch.equal(synced[0], next(model.parameters()))  # rollouts from the start policy
    assert torch.equal(synced[1], next(policy.parameters())) and not torch.equal(synced[0], synced[1])  # validation after SFT
