"""GRPO and Expert Iteration loops on a tiny model with a stub backend and a stub grader (logic only; the real engine,
grader and evaluation have their own tests)."""

import copy
import time
from dataclasses import replace

import pytest
import torch

import a5core.rl.ei as ei_mod
import a5core.rl.grpo as grpo_mod
import a5core.rl.grpo_config as grpo_config
from a5core.base.records import GradedSample
from a5core.config.prompts import build_prompt
from a5core.config.sections import ConfigError, from_dict
from a5core.model.compute import Compute
from a5core.model.logprobs import get_response_log_probs
from a5core.model.tokenization import tokenize_prompt_and_output
from a5core.rl import losses
from a5core.rl.ei import EIConfig, NoCorrectSamples, ei_round, history_row, select_kept
from a5core.rl.grpo import GRPOConfig
from a5core.rl.sft import SFTConfig
from a5core.run.evaluation import RunResult
from tests.support.loops import (
    INITIAL,
    METRICS,
    ROWS,
    DyingHistory,
    StubBackend,
    StubPool,
    StubValidator,
    grpo_cfg,
    run_grpo,
    run_sft,
    stub_evaluation,
)
from tests.support.resume import checkpointer, straight_killed_resumed


def _margin(model, tok):
    prompt = build_prompt(ROWS[0]["problem"])
    b = tokenize_prompt_and_output([prompt, prompt], [" good", " bad"], tok)
    with torch.no_grad():
        lp = get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"]
    s = (lp * b["response_mask"]).sum(-1)
    return float(s[0] - s[1])


def test_grpo_moves_policy_toward_rewarded_output(tiny, tmp_path):
    model, tok = tiny
    policy = copy.deepcopy(model)
    before = _margin(policy, tok)
    run_grpo(policy, tok, tmp_path, grpo_cfg(n_grpo_steps=3))
    assert _margin(policy, tok) > before + 0.1


def test_off_policy_old_log_probs_once_no_grad_and_zero_first_pass_clip(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    calls = []
    real = grpo_mod.old_log_probs_for

    def counting(*args, **kw):
        out = real(*args, **kw)
        calls.append(out)
        return out

    monkeypatch.setattr(grpo_mod, "old_log_probs_for", counting)
    cfg = grpo_cfg(
        n_grpo_steps=1,
        loss_type="grpo_clip",
        epochs_per_rollout_batch=3,
        train_batch_size=4,
        gradient_accumulation_steps=2,
    )
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path, cfg)
    assert len(calls) == 1 and not any(t.requires_grad for t in calls[0])
    train = history.rows["train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]  # x = optimizer step: 3 epochs x 2 steps of 4 rollouts
    assert {r["count/grpo_step"] for r in train} == {1}
    assert train[0]["train/clip_fraction"] == 0.0  # the first optimizer step is exactly on-policy
    assert [r["step"] for r in history.rows["eval"]] == [0, 6]  # the start, and the end at optimizer step 6


def test_grpo_logs_its_starts_first_completions_at_step_0(tiny, tmp_path):
    """The start's record carries its first responses (a model folder's validation.json): GRPO logs them as step 0,
    where the summary finds the responses before GRPO; a record without them logs none."""
    model, tok = tiny
    shown = [{"shown": "first", "unique_id": "q0", "prompt": "p", "response": " r", "reward": 0.0}]
    cfg = grpo_cfg(n_grpo_steps=1)
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path / "a", cfg, initial={**INITIAL, "completions": shown})
    assert [c for c in history.completions if c["step"] == 0] == [{"step": 0, **shown[0]}]
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path / "b", cfg)
    assert not [c for c in history.completions if c["step"] == 0]


def test_config_errors_before_any_generation(tiny, tmp_path):
    model, tok = tiny
    backend = StubBackend(tok, [" good"])
    with pytest.raises(ConfigError, match="off-policy"):
        run_grpo(model, tok, tmp_path, grpo_cfg(epochs_per_rollout_batch=2), backend=backend)
    assert backend.calls == 0


def test_grpo_killed_run_resumes(tiny, tmp_path):
    model, tok = tiny
    cfg = grpo_cfg(n_grpo_steps=3)

    def run(name, kill_at):
        policy = copy.deepcopy(model)
        return policy, *run_grpo(policy, tok, tmp_path / name, cfg, ckpt=checkpointer(tmp_path, name), die_at=kill_at)

    out = straight_killed_resumed(run, 2)
    (full, _, _), (resumed, summary, history) = out.straight, out.resumed
    assert summary["steps_done"] == 3 and [r["step"] for r in history.rows["train"]] == [1, 2, 3]
    for p, q in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_time_budget_stops_validates_and_reports_best(tiny, tmp_path):
    model, tok = tiny
    summary, history = run_grpo(copy.deepcopy(model), tok, tmp_path, grpo_cfg(n_grpo_steps=50, time_budget_s=1e-9))
    # the budget is spent before the first step: no training, the start and a final validation, reported as stopped
    assert summary["stopped_by_time_budget"] and summary["steps_done"] == 0
    assert not history.rows["train"] and len(history.rows["eval"]) == 2 and summary["best_step"] == 0


def test_a_fifth_loss_touches_only_losses_py(tiny, tmp_path, monkeypatch):
    """Registering a loss in losses.py makes it a valid grpo.loss_type that a GRPO step trains with."""
    model, tok = tiny
    used = []

    def sign_only(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
        used.append(lp.shape)
        return -torch.sign(advantages) * lp, {}

    monkeypatch.setattr(losses, "PG_LOSSES", dict(losses.PG_LOSSES))
    monkeypatch.setattr(losses, "OFF_POLICY_LOSSES", set(losses.OFF_POLICY_LOSSES))
    monkeypatch.setattr(grpo_config, "PG_LOSSES", losses.PG_LOSSES)
    monkeypatch.setattr(grpo_config, "OFF_POLICY_LOSSES", losses.OFF_POLICY_LOSSES)
    with pytest.raises(ConfigError, match="sign_only"):
        from_dict(GRPOConfig, {"loss_type": "sign_only"}, "grpo")
    losses.register_pg_loss("sign_only", sign_only, off_policy=False)
    cfg = from_dict(
        GRPOConfig, {**grpo_cfg().__dict__, "betas": [0.9, 0.95], "loss_type": "sign_only", "n_grpo_steps": 1}, "grpo"
    )
    policy = copy.deepcopy(model)
    before = _margin(policy, tok)
    run_grpo(policy, tok, tmp_path, cfg)
    assert used and _margin(policy, tok) > before


def test_grpo_config_rules():
    with pytest.raises(ConfigError, match="divisible by gradient_accumulation_steps"):
        from_dict(GRPOConfig, {"train_batch_size": 10, "gradient_accumulation_steps": 3}, "grpo")
    with pytest.raises(ConfigError, match="rollout_batch_size must be divisible by group_size"):
        from_dict(
            GRPOConfig,
            {"rollout_batch_size": 10, "group_size": 4, "train_batch_size": 10, "gradient_accumulation_steps": 2},
            "grpo",
        )
    with pytest.raises(ConfigError, match="off-policy"):
        from_dict(GRPOConfig, {"epochs_per_rollout_batch": 2}, "grpo")
    with pytest.raises(ConfigError, match="not one of"):
        from_dict(GRPOConfig, {"loss_type": "ppo"}, "grpo")
    cfg = GRPOConfig(
        rollout_batch_size=16,
        group_size=4,
        train_batch_size=8,
        gradient_accumulation_steps=4,
        epochs_per_rollout_batch=2,
        loss_type="grpo_clip",
    )
    assert (cfg.micro_batch_size, cfg.questions_per_step, cfg.optimizer_steps_per_step) == (2, 4, 4)


def _sample(uid, response, reward):
    return GradedSample(uid, 0, "p", response, "1", None, "x", 1.0, reward, reward, 1, "stop", "", "")


def test_ei_selection_cap_and_dedup():
    recs = [
        _sample("a", "x", 1.0),
        _sample("a", "x ", 1.0),
        _sample("a", "y", 1.0),
        _sample("a", "z", 1.0),
        _sample("b", "x", 0.0),
    ]
    kept, counts = select_kept(recs, 2, dedup=True)
    assert [r.response for r in kept] == ["x", "y"] and counts == {
        "count/duplicates_removed": 1,
        "count/removed_by_cap": 1,
    }
    kept, _ = select_kept(recs, 0, dedup=False)
    assert len(kept) == 4


EI_SFT = SFTConfig(batch_size=2, micro_batch_size=1, lr=1e-3, eval_every=0, checkpoint_every=1)
EI_CFG = EIConfig(n_questions=2, rollouts_per_question=3, lr=1e-3, max_tokens=8)


def _round(
    policy, tok, k, folder, scratch=None, backend=None, die_at=None, cfg=EI_CFG, validator=None, sft=EI_SFT, **kw
):
    backend = backend or StubBackend(tok, [" good one", " bad", " good two"])
    with DyingHistory(folder, die_at) as history:
        result = ei_round(
            policy,
            tok,
            backend,
            train_rows=ROWS,
            round_idx=k,
            cfg=cfg,
            sft_cfg=sft,
            pool=StubPool(),
            validate=validator or StubValidator(backend),
            history=history,
            scratch=scratch,
            fp="fp",
            **{"compute": Compute(), **kw},  # the reference path unless the test passes its own
        )
    return result, history


def test_an_ei_round_trains_with_the_stage_compute_settings(tiny, tmp_path):
    """The round's SFT steps use the stage's `Compute` record: a micro-batch budget below every kept sequence stops
    the round at its first step (dropped on the way, the round would train on the handout's split)."""
    from a5core.model.microbatch import BudgetError, Cut

    with pytest.raises(BudgetError, match="micro_batch_tokens=4"):
        _round(copy.deepcopy(tiny[0]), tiny[1], 1, tmp_path, compute=Compute(cut=Cut(micro_batch_tokens=4)))


def test_ei_rounds_chain_and_build_the_history_from_round_zero(tiny, tmp_path):
    model, tok = tiny
    policy = copy.deepcopy(model)
    margins = [_margin(policy, tok)]
    rounds = [history_row(0, METRICS)]
    for k in (1, 2, 3):  # what ei_round_1..3 do, each from the previous round's policy
        result, history = _round(policy, tok, k, tmp_path / str(k))
        rounds.append(history_row(k, result.final.metrics, result.details))
        margins.append(_margin(policy, tok))
        assert {r.round for r in result.rollouts} == {k} and len(result.rollouts) == 2 * 3
        assert all(r.kept == ("good" in r.response) for r in result.rollouts)  # two distinct correct answers, cap 2
        assert history.rows["train"]  # the round's SFT steps
    assert (
        [r["round"] for r in rounds] == [0, 1, 2, 3] and rounds[1]["count/kept"] == 4 and rounds[1]["trained"] is True
    )
    assert margins[0] < margins[1] < margins[2] < margins[3]  # SFT on the kept " good ..." rollouts, round after round


def test_ei_round_keeps_exactly_the_correct_capped_deduped(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    handed = []
    monkeypatch.setattr(
        ei_mod, "train_sft", lambda policy, tok, *, rows, **kw: handed.append(rows) or RunResult(stub_evaluation())
    )
    cfg = EIConfig(n_questions=3, rollouts_per_question=4, max_kept_per_question=2, max_tokens=8)
    backend = StubBackend(tok, [" good one", " bad", " good one", " good two"])
    result, _ = _round(model, tok, 1, tmp_path, backend=backend, cfg=cfg)
    report = result.details
    assert len(result.rollouts) == 12 and report["count/correct"] == 9 and report["count/duplicates_removed"] == 3
    assert report["count/kept"] == 6 and report["count/removed_by_cap"] == 0 and report["trained"]
    assert sorted(r["response"] for r in handed[0]) == sorted([" good one", " good two"] * 3)


def test_ei_round_without_correct_samples(tiny, tmp_path):
    model, tok = tiny
    bad = StubBackend(tok, [" bad"])
    with pytest.raises(NoCorrectSamples, match="0 of 6 rollouts were correct"):
        _round(copy.deepcopy(model), tok, 1, tmp_path / "a", backend=bad)
    skip = EIConfig(n_questions=2, rollouts_per_question=3, if_no_correct="skip", max_tokens=8)
    result, history = _round(copy.deepcopy(model), tok, 1, tmp_path / "b", backend=bad, cfg=skip)
    assert result.details["trained"] is False and not history.rows["train"]


def test_ei_round_resumes_after_a_kill_without_generating_again(tiny, tmp_path):
    model, tok = tiny

    def run(name, kill_at):
        policy, backend = copy.deepcopy(model), StubBackend(tok, [" good one", " bad", " good two"])
        scratch = str(tmp_path / f"scratch_{name}")  # the round's checkpoints, the straight round's too
        return policy, backend, *_round(policy, tok, 1, tmp_path / name, scratch, backend=backend, die_at=kill_at)

    out = straight_killed_resumed(run, 2)
    (straight, _, _, history_straight), (resumed, backend, result, history) = out.straight, out.resumed
    assert backend.calls == 0  # the graded rollouts came from scratch
    assert result.details["count/kept"] == 4 and len(result.rollouts) == 6
    assert [r["step"] for r in history.rows["train"]] == [r["step"] for r in history_straight.rows["train"]]
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_ei_config_rejects_empty_rounds():
    with pytest.raises(ConfigError, match="n_questions"):
        from_dict(EIConfig, {"n_questions": 0}, "ei")
    with pytest.raises(ConfigError, match="unknown"):  # the number of rounds is the number of ei_round_<k> stages
        from_dict(EIConfig, {"n_rounds": 3}, "ei")


def test_ei_round_samples_from_its_start_policy_and_validates_the_trained_one(tiny, tmp_path):
    """On the vLLM path the engine must sample from the policy the round starts from (round k-1's model) and
    validate the policy after the round's SFT: the round syncs the engine before each."""
    model, tok = tiny
    backend = StubBackend(tok, [" good one", " bad"])
    policy = copy.deepcopy(model)
    _round(policy, tok, 1, tmp_path, backend=backend)
    assert len(backend.synced) == 2
    assert torch.equal(backend.synced[0], next(model.parameters()))  # rollouts from the start policy
    assert torch.equal(backend.synced[1], next(policy.parameters())) and not torch.equal(*backend.synced)


def test_ei_rounds_do_not_rewarm_unless_asked(tiny, tmp_path):
    model, tok = tiny
    _, history = _round(copy.deepcopy(model), tok, 1, tmp_path / "a")
    assert history.rows["train"][0]["train/lr"] == pytest.approx(EI_CFG.lr)  # starts at the peak
    rewarm = EIConfig(n_questions=2, rollouts_per_question=3, lr=1e-3, max_tokens=8, rewarm=True)
    _, history = _round(copy.deepcopy(model), tok, 1, tmp_path / "b", cfg=rewarm, sft=replace(EI_SFT, warmup_ratio=1.0))
    assert history.rows["train"][0]["train/lr"] == pytest.approx(1e-3 / 2)  # 2 steps, both warming up


def test_kl_in_the_reward_is_taken_under_the_rollout_policy(tiny, tmp_path):
    """Issue 59 item 4: the loop gives `with_kl_in_reward` the rollout policy's log-probs. At step 1 the policy is the
    reference (KL 0); after an update it is not, so step 2's penalty is > 0 (the reference's own log-probs in their
    place would make it 0 at every step: the option silently off)."""
    model, tok = tiny
    cfg = grpo_cfg(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True, use_std_normalization=False)
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path, cfg)
    kl = [r["rollout/kl"] for r in history.rows["train"]]
    assert kl[0] == pytest.approx(0.0, abs=1e-6) and kl[1] > 1e-4


def test_each_steps_grading_time_is_its_own(tiny, tmp_path):
    """perf/grade_s is the grading seconds of the step's own rollouts (the stand-in pool's clock: 1 s per map), not the
    pool's total since the run began."""
    model, tok = tiny
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path, grpo_cfg(n_grpo_steps=3))
    assert [r["perf/grade_s"] for r in history.rows["train"]] == [1.0, 1.0, 1.0]


def test_the_run_reports_its_optimizer_steps_as_the_console_counts_them(tiny, tmp_path):
    """Issue 64: an off-policy run takes two optimizer steps per GRPO step here; its details say both, and the summary
    line of the plots stage says them as the console did (step 4/4), not 2 steps alone."""
    from a5core.report.plots import _grpo_detail

    model, tok = tiny
    cfg = grpo_cfg(loss_type="grpo_clip", train_batch_size=4, gradient_accumulation_steps=1)
    details, history = run_grpo(copy.deepcopy(model), tok, tmp_path, cfg)
    assert (details["steps_done"], details["optimizer_steps"]) == (2, 4) == (2, len(history.rows["train"]))
    assert _grpo_detail(details, {}) == "2 GRPO steps, 4 optimizer steps"
    assert _grpo_detail({"steps_done": 3, "optimizer_steps": 3}, {}) == "3 steps"


class SlowValidation(StubValidator):
    """A stub validation that takes 1000 s on the clock of a5core.base.progress (its `time`, patched to this)."""

    def __init__(self, backend=None):
        super().__init__(backend)
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def skip(self, seconds: float) -> None:
        self.ahead += seconds

    def __call__(self, policy, *, full):
        self.skip(1000.0)
        return super().__call__(policy, full=full)


@pytest.mark.parametrize("method", ["grpo", "sft", "ei"])
def test_validation_is_left_out_of_every_runs_clock(tiny, tmp_path, monkeypatch, method):
    """Each validation (a stub that takes 1000 s; an EI round has one, the others several) stops the run's clock:
    every `perf/wall_s` a validation logs stays below 1000 s. Counted, the last would be 1000 s or more. An EI
    round's clock starts before its rollouts (10 s here): they count."""
    from a5core.base import progress

    model, tok = tiny
    slow = SlowValidation(StubBackend(tok, [" good one", " bad", " good two"]) if method == "ei" else None)
    monkeypatch.setattr(progress, "time", slow)
    if method == "grpo":
        history = run_grpo(copy.deepcopy(model), tok, tmp_path, grpo_cfg(eval_every=1), validate=slow)[1]
    elif method == "sft":
        cfg = SFTConfig(batch_size=2, micro_batch_size=2, lr=1e-3, eval_every=1, checkpoint_every=0)
        history = run_sft(copy.deepcopy(model), tok, tmp_path, cfg, validate=slow)[1]
    else:  # the round's rollouts take 10 s on the clock, and count
        generate = slow.backend.generate
        monkeypatch.setattr(slow.backend, "generate", lambda *a, **k: (slow.skip(10.0), generate(*a, **k))[1])
        history = _round(copy.deepcopy(model), tok, 1, tmp_path, backend=slow.backend, validator=slow)[1]
    walls = [r["perf/wall_s"] for r in history.rows["eval"] if r["step"] > 0]
    assert len(slow.calls) >= (1 if method == "ei" else 2) and len(walls) == len(slow.calls)
    assert walls == sorted(walls) and (10 if method == "ei" else 0) < walls[-1] < 1000
