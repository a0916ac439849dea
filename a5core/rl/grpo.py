"""GRPO with verified rewards (Algorithm 3 of the handout; Shao et al., 2024): the loop and its typed state.

- A step reads as two calls, `rollout(run, step)` then `update_policy(run, rollouts, step)`; `Run` holds what is
  fixed for the run (config: a5core/rl/grpo_config.py; policy, tokenizer, backend, grader pool, questions, the
  stage's `Compute` settings) and what it carries (optimizer, history, wall clock); a step's rollouts travel to the
  update as a `Rollouts` record (a5core.rl.grpo_update: the math).
- Around the steps, `train_grpo`: start validation, validation on a fixed seeded subset every `eval_every` steps
  and on the whole set at the end (each outside the run's clock and budget), a checkpoint every `checkpoint_every`
  steps.
- `max_staleness` 1 (asynchronous rollouts, one step off-policy as verl's one_step_off_policy recipe): step 0 is
  generated as today; from then on, step k's rollout syncs the engine to version k (the weights after k updates) and
  starts generating step k+1's batch in a thread (`Run.inflight`) while the learner trains step k, so step k >= 1 trains
  on rollouts of version k-1 (`rollout/staleness` 1). The thread generates and grades this rank's block only; the
  gather and every other collective stay on the main thread. Old log-probs are the current weights' (the proximal
  policy of decoupled PPO; Hilton et al., 2022, as AReaL does); `tis_cap` weights each token by their ratio to the
  engine's sampled-token log-probs (the behaviour policy's; required). A checkpoint waits for the batch in flight
  and holds it, so a resume trains on the same rollouts. Validation waits for it too (it shares the engine), and so
  do the end of the loop (the time budget: the batch is then dropped) and an error or Ctrl-C in the main thread.
- Departures from the handout, all off by default: the options of a5core.rl.rl_options (clip-higher, overlong
  handling, entropy bonus, KL to the start policy, truncated importance sampling, dynamic sampling); `reward_fn`,
  the training reward (default: the prompt's); validation uses the run's own prompt and that prompt's reward.
- Training uses exactly the sampled token ids (never a re-tokenization of the text).
"""

from __future__ import annotations

import dataclasses
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch

from a5core.base.progress import Clock
from a5core.base.records import GradedSample, RolloutBatch
from a5core.base.seeds import derive_seed
from a5core.base.stats import mean
from a5core.grader.audit import audit_metrics
from a5core.model import distributed
from a5core.model.compute import Compute, peak_gb, reset_peak
from a5core.model.optim import make_optimizer
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.grpo_update import old_log_probs_for, optimizer_step, rollout_batch, with_kl_in_reward
from a5core.rl.rl_options import dynamic_sample, reference_policy, refill_sampling, truncation_rate
from a5core.run.checkpoint import Checkpointer
from a5core.run.evaluation import RunResult, first_completions, generate_and_grade, validate_and_log
from a5core.run.history import RunHistory


def rollout_stats(samples: list[GradedSample], meta: dict) -> dict:
    """The step's rollouts: rewards in reward units, lengths in response tokens, rates in [0, 1]."""
    correct = [s.output_tokens for s in samples if s.answer_reward == 1]
    return {
        "rollout/reward": mean([s.reward for s in samples]),
        "rollout/format_reward": mean([s.format_reward for s in samples]),
        "rollout/answer_reward": mean([s.answer_reward for s in samples]),
        "rollout/response_tokens": mean([s.output_tokens for s in samples]),
        "rollout/response_tokens_correct": mean(correct),
        "rollout/response_tokens_incorrect": mean([s.output_tokens for s in samples if s.answer_reward != 1]),
        "rollout/groups_all_equal": meta["frac_groups_all_equal"],  # groups with no learning signal
        "rollout/truncation_rate": truncation_rate([s.finish_reason for s in samples]),  # cut at max_tokens (DAPO)
        **audit_metrics(samples, "rollout"),  # the grader audit (a5core.grader.audit)
    }


@dataclass
class Run:
    """One GRPO run: the values fixed for it, and the state it carries from step to step."""

    cfg: GRPOConfig
    policy: object
    tokenizer: object
    backend: object  # generation (a5core.generation)
    pool: object  # grader of the training reward
    train_rows: list[dict]
    opt: torch.optim.Optimizer
    history: RunHistory
    device: torch.device
    compute: Compute  # the stage's micro-batches, autocast and weight update (a5core/model/compute.py)
    clock: Clock  # the run's training wall-clock, validation left out (a resumed run continues it)
    ref: object = None  # the frozen start policy of the KL term (grpo.kl_coef), else None
    rollout_thread: ThreadPoolExecutor | None = None  # max_staleness 1: where the next step's rollouts generate
    inflight: Future | None = None  # max_staleness 1: the next step's `Generated`, being made there
    updated: tuple[float, float] = (0.0, 0.0)  # monotonic start and end of the last `update_policy`

    def settle(self) -> None:
        """Wait for the rollouts in flight (before anything else uses the engine: validation, a checkpoint)."""
        if self.inflight is not None:
            self.inflight.result()

    def wall(self) -> float:
        return self.clock.seconds()

    def over_budget(self) -> bool:
        """Past the wall-clock budget: on N ranks, on any of them (every rank must stop at the same step)."""
        return bool(self.cfg.time_budget_s) and distributed.any_rank(self.wall() >= self.cfg.time_budget_s)


@dataclass
class Rollouts:
    """One step's graded rollouts, ready for the update (GRPO-Zero's episodes)."""

    batch: RolloutBatch  # tokens, advantages, old/reference log-probs
    stats: dict  # `rollout/...` metrics of the step's samples
    timing: dict  # `perf/..._s`: where the step's time went before the update


@dataclass
class Generated:
    """One step's graded samples and the weights' version that made them (max_staleness 1)."""

    step: int
    version: int  # updates the generating weights had taken: the loop's step when the engine was synced
    samples: list[GradedSample]  # every rank's in order; this rank's block alone while `local`
    local: bool
    seconds: tuple[float, float]  # monotonic start and end of the generation (this process's clock)

    def state(self) -> dict:
        """Plain data for a checkpoint (gathered first)."""
        rows = [dataclasses.asdict(s) for s in self.samples]
        return {"step": self.step, "version": self.version, "samples": rows}

    @classmethod
    def restored(cls, state: dict) -> Generated:
        return cls(state["step"], state["version"], [GradedSample(**r) for r in state["samples"]], False, (0.0, 0.0))


def done(made: Generated) -> Future:
    """`made` as a finished `Run.inflight`."""
    future: Future = Future()
    future.set_result(made)
    return future


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Seconds two (start, end) intervals share."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def in_flight_state(run: Run) -> dict:
    """The rollouts in flight for a checkpoint ({} when none): waited for and gathered (a collective)."""
    if run.inflight is None:
        return {}
    made = run.inflight.result()
    if made.local:
        made = dataclasses.replace(made, samples=distributed.gather(made.samples), local=False)
        run.inflight = done(made)
    return {"in_flight": made.state()}


def questions(run: Run, step: int) -> list[dict]:
    """Step `step`'s questions: a seeded draw from the training rows."""
    draw = random.Random(derive_seed(run.cfg.seed, "grpo_questions", step))
    return draw.sample(run.train_rows, run.cfg.questions_per_step)


def generate_step(run: Run, step: int, version: int, local: bool) -> Generated:
    """Step `step`'s questions, generated and graded by the engine as it is (synced at `version`); `local`: this
    rank's block alone, with no collective (in the rollout thread)."""
    cfg, t0 = run.cfg, time.monotonic()
    rows, sampling = questions(run, step), cfg.sampling(step)
    samples = generate_and_grade(run.backend, rows, cfg.prompt, sampling, run.pool, progress=False, gather=not local)
    return Generated(step, version, samples, local, (t0, time.monotonic()))


def rollout(run: Run, step: int) -> Rollouts:
    """Step `step` (0-based): sync weights -> sample questions -> generate and grade (refilled when dynamic sampling)
    -> group-normalized advantages -> old and reference log-probs. With max_staleness 1 the samples are those
    generated during the previous step (`generate_step`, in the rollout thread), and the next step's start here."""
    if run.cfg.max_staleness:
        return _rollout_async(run, step)
    cfg, t0, graded = run.cfg, time.monotonic(), run.pool.seconds()
    reset_peak(run.device)  # the rollout phase's memory reading starts here
    rows = questions(run, step)
    run.backend.sync_weights(run.policy)
    t1 = time.monotonic()

    def generate(questions: list[dict], refill_round: int) -> list[GradedSample]:
        sampling = refill_sampling(cfg.sampling(step), refill_round)
        return generate_and_grade(run.backend, questions, cfg.prompt, sampling, run.pool, progress=False)

    if cfg.dynamic_sampling:
        samples, ds_stats = dynamic_sample(cfg, generate, rows, run.train_rows, step)
    else:
        samples, ds_stats = generate(rows, 0), {}
    timing = {
        "perf/sync_s": t1 - t0,
        "perf/rollout_s": time.monotonic() - t1,
        "perf/grade_s": run.pool.seconds() - graded,
    }
    return prepared(run, samples, ds_stats, timing)


def _rollout_async(run: Run, step: int) -> Rollouts:
    """max_staleness 1: take step `step`'s `Generated` (made now from version `step` when none is in flight: the
    first step, a resume without one), sync version `step` and start step+1's."""
    t0 = time.monotonic()
    reset_peak(run.device)  # this phase's memory reading (the thread's generation also shows in the update's)
    pending, run.inflight = run.inflight, None
    if pending is None:
        run.backend.sync_weights(run.policy)
        made = generate_step(run, step, step, local=False)
    else:
        made = pending.result()
        assert made.step == step, (made.step, step)
    t1 = time.monotonic()
    if step + 1 < run.cfg.n_grpo_steps:
        if pending is not None:  # the engine still holds the version that made this step's rollouts
            run.backend.sync_weights(run.policy)
        run.inflight = run.rollout_thread.submit(generate_step, run, step + 1, step, True)
    t2 = time.monotonic()
    samples = distributed.gather(made.samples) if made.local else made.samples
    timing = {
        "perf/sync_s": t2 - t1,
        "perf/rollout_s": t1 - t0,  # the wait for the rollouts (all of their generation when none was in flight)
        "perf/generate_s": made.seconds[1] - made.seconds[0],
        "perf/overlap_s": overlap(made.seconds, run.updated),  # generating while the learner trained
    }
    return prepared(run, samples, {"rollout/staleness": step - made.version}, timing)


def prepared(run: Run, samples: list[GradedSample], ds_stats: dict, timing: dict) -> Rollouts:
    """The step's graded samples -> group-normalized advantages -> old and reference log-probs (`timing`'s
    `perf/rollout_s` grows by the batch's making, as it always counted it)."""
    cfg, t1 = run.cfg, time.monotonic()
    batch, meta = rollout_batch(run.tokenizer, samples, cfg)
    t2 = time.monotonic()
    timing = {**timing, "perf/rollout_s": timing["perf/rollout_s"] + t2 - t1}
    if cfg.needs_old_log_probs:
        batch.old_log_probs = old_log_probs_for(run.policy, batch, cfg.micro_batch_size, run.device, run.compute)
    if run.ref is not None:  # the reference's log-probs: once per rollout batch, no graph, like the old ones
        batch.ref_log_probs = old_log_probs_for(run.ref, batch, cfg.micro_batch_size, run.device, run.compute)
    if cfg.kl_in_reward:  # the rollout policy's log-probs: the old ones, or computed for this alone (on-policy)
        behaviour = batch.old_log_probs or old_log_probs_for(
            run.policy, batch, cfg.micro_batch_size, run.device, run.compute
        )
        batch, kl_stats = with_kl_in_reward(batch, behaviour, cfg)
        ds_stats = {**ds_stats, **kl_stats}
    timing = {**timing, "perf/old_log_probs_s": time.monotonic() - t2, **peak_gb(run.device, "perf/peak_rollout_gb")}
    return Rollouts(batch, {**rollout_stats(samples, meta), **ds_stats}, timing)


def update_policy(run: Run, rollouts: Rollouts, step: int) -> None:
    """`epochs_per_rollout_batch` passes over the rollouts in shuffled optimizer steps of `train_batch_size`, each
    logged as one train row (with the step's rollout stats and timings)."""
    cfg, n, start = run.cfg, len(rollouts.batch), time.monotonic()
    run.policy.train()
    for epoch in range(cfg.epochs_per_rollout_batch):
        perm = random.Random(derive_seed(cfg.seed, "grpo_order", step, epoch)).sample(range(n), n)
        for s in range(0, n, cfg.train_batch_size):
            t3 = time.monotonic()
            idx = perm[s : s + cfg.train_batch_size]
            reset_peak(run.device)  # this optimizer step's memory reading starts here
            row = optimizer_step(run.policy, run.opt, cfg, idx, rollouts.batch, run.device, run.compute)
            run.history.log(
                "train",
                {
                    "step": run.history.optimizer_steps + 1,
                    "count/grpo_step": step + 1,
                    "count/epoch": epoch,
                    **row,
                    **rollouts.stats,
                    **rollouts.timing,
                    "perf/optimizer_s": time.monotonic() - t3,
                    **peak_gb(run.device, "perf/peak_update_gb"),
                    "perf/wall_s": run.wall(),
                },
            )
    run.updated = (start, time.monotonic())


def grpo_step(run: Run, step: int) -> None:
    """One GRPO step: rollouts, then the policy update on them."""
    update_policy(run, rollout(run, step), step)


def _validation(run: Run, validate: Callable, step: int, full: bool, n_completions: int):
    """A validation after GRPO step `step`, off the run's clock, logged at its optimizer step."""
    extra = {"count/grpo_step": step}
    clock, history = run.clock, run.history
    return validate_and_log(
        history,
        history.optimizer_steps,
        validate,
        run.policy,
        full=full,
        clock=clock,
        n_completions=n_completions,
        extra=extra,
    )


def train_grpo(
    policy,
    tokenizer,
    backend,
    *,
    train_rows: list[dict],
    cfg: GRPOConfig,
    pool,
    validate: Callable,
    history: RunHistory,
    ckpt: Checkpointer | None = None,
    initial: dict | None = None,
    n_completions: int = 8,
    snapshot: Callable | None = None,
    compute: Compute,
) -> RunResult:
    """Run GRPO in place on `policy` with the stage's `compute` settings (micro-batches, autocast, weight update;
    a5core/model/compute.py). Returns the final full validation, and when the best validation was.

    Validation: `initial` (the starting policy's saved full validation under the same protocol) or a measurement is
    the step-0 point, the fixed subset every `eval_every` steps, the whole set at the end; none of them is on the
    run's clock (`perf/wall_s`, the budget). `snapshot(policy, step)`, when given, runs after every GRPO step.
    """
    cfg.validate()
    device = next(policy.parameters()).device
    opt = make_optimizer(policy, cfg.lr, cfg.weight_decay, cfg.betas, compute.weight_update)
    ref = reference_policy(policy, cfg)  # before the restore: the reference is the run's start policy
    state = ckpt.restore_training(policy, opt) if ckpt else {}
    history.restore(state.get("history"))
    history.total_steps = cfg.n_grpo_steps * cfg.optimizer_steps_per_step
    if not state:  # where the curve starts; outside the wall-clock budget
        start = None if initial else validate(policy, full=True)
        metrics = initial["metrics"] if initial else start.metrics
        history.log("eval", {"step": 0, "count/grpo_step": 0, **metrics, "perf/wall_s": 0.0})
        shown = initial.get("completions") if initial else first_completions(start, n_completions)
        if shown:  # the start's first responses (a record saved before they were kept has none): the summary's
            history.log_completions(0, shown[:n_completions])  # rollouts before GRPO
    clock = Clock.resumed(state.get("wall_s", 0.0))
    if cfg.max_staleness:
        backend.keep_own_weights()  # the learner updates the policy while the engine generates
    with ThreadPoolExecutor(1, thread_name_prefix="a5-rollouts") as thread:
        run = Run(cfg, policy, tokenizer, backend, pool, train_rows, opt, history, device, compute, clock, ref)
        run.rollout_thread = thread
        if "in_flight" in state:
            run.inflight = done(Generated.restored(state["in_flight"]))
        step = train_steps(run, state.get("step", 0), validate, ckpt, n_completions, snapshot)
    final = _validation(run, validate, step, True, n_completions)
    return RunResult(final, _details(history, step, cfg))


def train_steps(
    run: Run, step: int, validate: Callable, ckpt: Checkpointer | None, n_completions: int, snapshot: Callable | None
) -> int:
    """GRPO steps from `step` until `n_grpo_steps` or the time budget, with the mid-run validations and checkpoints
    between them; returns the steps done. Rollouts still in flight at the end are waited for and dropped."""
    cfg, history = run.cfg, run.history
    while step < cfg.n_grpo_steps and not run.over_budget():
        grpo_step(run, step)
        step += 1
        if snapshot:
            snapshot(run.policy, step)
        if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.n_grpo_steps:
            run.settle()
            _validation(run, validate, step, False, n_completions)
        if ckpt and ckpt.due(step):
            in_flight = in_flight_state(run)  # waited for first: the saved clock counts the wait
            ckpt.save_training(run.policy, run.opt, step, history.state(), wall_s=run.wall(), **in_flight)
    run.settle()
    return step


def _details(history: RunHistory, step: int, cfg: GRPOConfig) -> dict:
    """The run's outcome: steps done, the best validation and when it came, and whether the time budget stopped it."""
    best = max(history.rows["eval"], key=lambda r: r["eval/accuracy"])
    return {
        "steps_done": step,
        "optimizer_steps": history.optimizer_steps,  # what the console counts (step k/N)
        "best_accuracy": best["eval/accuracy"],
        "best_step": best["step"],
        "best_wall_s": best.get("perf/wall_s", 0.0),
        "stopped_by_time_budget": step < cfg.n_grpo_steps,
    }
