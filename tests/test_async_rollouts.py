"""grpo.max_staleness 1 (asynchronous rollouts, a5core/rl/grpo.py) through the real loop and the real hf backend on
the tiny model: which weights made each step's rollouts (the engine's own sampled-token log-probs, matched against
every version's), the log-probs the ratio and TIS use, determinism, a resume that trains on the checkpointed batch in
flight, the params' rules. 2 ranks and the vLLM CPU engine: tests/test_distributed_dag.py, tests/test_vllm_engine.py.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

import a5core.rl.grpo as grpo_mod
from a5core.checks.inputs import staleness_problems
from a5core.config.sections import ConfigError
from a5core.generation.hf import HFBackend
from tests.support.loops import Recorder, grpo_cfg, max_gap, run_grpo, sampled_log_probs, stub_evaluation
from tests.support.resume import checkpointer, straight_killed_resumed

STEPS = 4


def _cfg(**kw):
    """Four steps of 8 rollouts, an entropy bonus so every step moves the weights, one step off-policy."""
    base = dict(n_grpo_steps=STEPS, max_tokens=6, entropy_coef=0.05, lr=1e-2, max_staleness=1, tis_cap=2.0)
    return grpo_cfg(**{**base, **kw})


class GatedBackend(HFBackend):
    """The hf backend whose generations in the rollout thread start only once `gate` is released (by `Recorder`'s
    hooks: when the update they overlap starts, or once it finished, the worst interleaving for a backend that shared
    the learner's weights)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = threading.Semaphore(0)

    def generate(self, prompts, sampling, progress=True):
        if threading.current_thread() is not threading.main_thread():
            assert self.gate.acquire(timeout=120), "the learner never reached its update"
        return super().generate(prompts, sampling, progress)


def _run(model, tok, folder, monkeypatch, cfg=None, gate=None, **kw):
    """A run on the hf backend; `gate` "before" or "after": its thread generates once the overlapped update started
    or finished."""
    policy = copy.deepcopy(model)
    backend = (GatedBackend if gate else HFBackend)(policy, tok, batch_size=8)
    hooks = {f"{gate}_update": lambda run: run.backend.gate.release()} if gate else {}
    rec = Recorder(monkeypatch, policy, **hooks)
    details, history = run_grpo(policy, tok, folder, cfg or _cfg(), backend=backend, **kw)
    return policy, rec, details, history


def test_each_step_trains_on_the_rollouts_of_the_version_the_rule_names(tiny, tmp_path, monkeypatch):
    """Step 0 on version 0, step k >= 1 on version k-1: the engine's own log-prob of every sampled token equals the
    tokens' log-probs under that version's weights (float noise) and not under the next version's, also when each
    generation runs after the update it overlaps (the backend generates from its own copy of the weights)."""
    model, tok = tiny
    _, rec, details, history = _run(model, tok, tmp_path, monkeypatch, gate="after")
    assert details["steps_done"] == STEPS and len(rec.samples) == STEPS
    assert [s["rollout/staleness"] for s in rec.stats] == [0, 1, 1, 1]
    assert [r["rollout/staleness"] for r in history.rows["train"]] == [0, 1, 1, 1]
    for step, samples in enumerate(rec.samples):
        engine = [torch.tensor(s.token_logprobs) for s in samples]
        made_by = max(step - 1, 0)
        assert max_gap(engine, sampled_log_probs(model, rec.versions[made_by], tok, samples)) < 1e-4, step
        if step:
            assert max_gap(engine, sampled_log_probs(model, rec.versions[step], tok, samples)) > 1e-3, step


def test_the_ratio_uses_the_current_weights_and_tis_the_engines(tiny, tmp_path, monkeypatch):
    """grpo_clip's old log-probs are the weights the step updates (version k); the TIS denominator is the engine's
    (version k-1). Swapping them fails here."""
    model, tok = tiny
    _, rec, _, history = _run(model, tok, tmp_path, monkeypatch, _cfg(loss_type="grpo_clip"))
    for step in range(1, STEPS):
        batch, samples = rec.batches[step], rec.samples[step]
        spans = [(len(p) - 1, len(p) - 1 + len(s.token_ids)) for p, s in zip(batch.prompt_ids, samples)]
        old = [row[a:b] for row, (a, b) in zip(batch.old_log_probs, spans)]  # label t predicts id t + 1
        behaviour = batch.rollout_log_probs  # (O_i,) each
        assert max_gap(old, sampled_log_probs(model, rec.versions[step], tok, samples)) < 1e-4
        assert max_gap(behaviour, sampled_log_probs(model, rec.versions[step - 1], tok, samples)) < 1e-4
    gaps = [r["train/tis_logprob_gap"] for r in history.rows["train"]]
    assert gaps[0] < 1e-4 and min(gaps[1:]) > 1e-3  # on-policy at step 0, one version apart after it


def test_a_run_with_staleness_one_repeats_itself_and_differs_from_staleness_zero(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    one, _, _, _ = _run(model, tok, tmp_path / "a", monkeypatch)
    again, _, _, _ = _run(model, tok, tmp_path / "b", monkeypatch)
    sync, _, _, history = _run(model, tok, tmp_path / "c", monkeypatch, _cfg(max_staleness=0))
    assert all(torch.equal(p, q) for p, q in zip(one.state_dict().values(), again.state_dict().values()))
    assert not all(torch.equal(p, q) for p, q in zip(one.state_dict().values(), sync.state_dict().values()))
    assert "rollout/staleness" not in history.rows["train"][0]  # staleness 0 logs what it logged before


def test_a_killed_run_resumes_on_the_checkpointed_rollouts_in_flight(tiny, tmp_path, monkeypatch):
    """Killed after step 2's checkpoint (which holds step 3's rollouts, made by version 1): the resumed run trains
    on them (staleness 1 at its first step, where rollouts made afresh would be version 2's) to the same weights."""
    model, tok = tiny
    recs = []

    def run(name, kill_at):
        policy = copy.deepcopy(model)
        recs.append(Recorder(monkeypatch, policy))
        backend = HFBackend(policy, tok, batch_size=8)
        ckpt = checkpointer(tmp_path, name)
        return policy, *run_grpo(policy, tok, tmp_path / name, _cfg(), backend=backend, ckpt=ckpt, die_at=kill_at)

    out = straight_killed_resumed(run, 3)
    (full, _, _), (resumed, summary, history) = out.straight, out.resumed
    assert summary["steps_done"] == STEPS and [r["step"] for r in history.rows["train"]] == [1, 2, 3, 4]
    assert [s["rollout/staleness"] for s in recs[-1].stats] == [1, 1]  # steps 3 and 4 of the resume
    assert recs[-1].samples[0] == recs[0].samples[2]  # step 3's rollouts: the checkpoint's, not made again
    assert all(torch.equal(p, q) for p, q in zip(full.state_dict().values(), resumed.state_dict().values()))


def test_the_rules_refuse_staleness_without_its_correction_or_overlap(tiny, tmp_path):
    model, tok = tiny
    refused = (
        (dict(tis_cap=0.0), "set tis_cap"),
        (dict(dynamic_sampling=True), "refill rounds"),
        (dict(kl_coef=0.04, kl_in_reward=True), "kl_in_reward"),
    )
    for bad, match in refused:
        with pytest.raises(ConfigError, match=match):
            run_grpo(copy.deepcopy(model), tok, tmp_path, _cfg(**bad))
    colocated = {"generation": {"backend": "vllm", "layout": "one_gpu"}, "grpo": {}, "grpo_runs": {"x": None}}
    assert staleness_problems(colocated) == []
    colocated["grpo_runs"] = {"x": {"max_staleness": 1}}
    assert staleness_problems(colocated) == [
        "grpo_runs.x.max_staleness 1 with generation.layout one_gpu: the colocated engine sleeps while the policy "
        "trains, so nothing overlaps and the rollouts are only staler; use layout two_gpu or max_staleness 0"
    ]
    assert staleness_problems({**colocated, "generation": {"backend": "vllm", "layout": "two_gpu"}}) == []


def test_the_time_split_says_how_much_generation_overlapped_training(tiny, tmp_path, monkeypatch):
    """Each generation in the thread waits for the update it overlaps to start, so it ends after that start."""
    model, tok = tiny
    _, _, _, history = _run(model, tok, tmp_path, monkeypatch, gate="before")
    rows = history.rows["train"]
    assert rows[0]["perf/overlap_s"] == 0.0  # step 0 generated before any training
    for r in rows[1:]:
        assert 0.0 < r["perf/overlap_s"] <= r["perf/generate_s"]


def test_the_time_budget_stops_between_steps_and_drops_the_batch_in_flight(tiny, tmp_path, monkeypatch):
    """The budget runs out after step 2 (the clock is the wall clock, overlap included): step 3's rollouts, in flight
    by then, are waited for and dropped; the run validates and reports as stopped by the budget."""
    model, tok = tiny
    monkeypatch.setattr(grpo_mod.Run, "over_budget", lambda run: run.history.optimizer_steps >= 2)
    policy = copy.deepcopy(model)
    backend = HFBackend(policy, tok, batch_size=8)
    rec = Recorder(monkeypatch, policy)
    details, history = run_grpo(policy, tok, tmp_path, _cfg(), backend=backend)
    assert details["steps_done"] == 2 and details["stopped_by_time_budget"]
    assert len(rec.samples) == 2 and len(history.rows["eval"]) == 2  # the start and the final validation
    assert not [t for t in threading.enumerate() if t.name.startswith("a5-rollouts")]  # the thread is gone


class Watched(GatedBackend):
    """A gated backend whose rollout-thread generations say while they run (and take a while)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generating = threading.Event()

    def generate(self, prompts, sampling, progress=True):
        if threading.current_thread() is threading.main_thread():
            return super().generate(prompts, sampling, progress)
        assert self.gate.acquire(timeout=120), "the learner never reached its update"
        self.generating.set()
        try:
            time.sleep(0.5)  # longer than the tiny model's update: a validation that does not wait meets it
            return HFBackend.generate(self, prompts, sampling, progress)
        finally:
            self.generating.clear()


def test_a_mid_run_validation_waits_for_the_rollouts_in_flight(tiny, tmp_path, monkeypatch):
    """Issue 59 item 4: validation shares the engine, so with eval_every 1 each mid-run validation starts only once
    the next step's rollouts (generating in the thread since the update began) are done."""
    model, tok = tiny
    policy = copy.deepcopy(model)
    backend = Watched(policy, tok, batch_size=8)
    Recorder(monkeypatch, policy, before_update=lambda run: run.backend.gate.release())
    met = []

    def validate(p, *, full):
        met.append(backend.generating.is_set())
        return stub_evaluation()

    run_grpo(policy, tok, tmp_path, _cfg(eval_every=1), backend=backend, validate=validate)
    assert len(met) >= STEPS and not any(met)
