"""GRPO with verified rewards (Algorithm 3 of the handout; Shao et al., 2024): the loop and its typed state.

- A step reads as two calls, `rollout(run, step)` then `update_policy(run, rollouts, step)`; `Run` holds what is
  fixed for the run (config: a5core/rl/grpo_config.py; policy, tokenizer, backend, grader pool, questions, the
  stage's `Compute` settings) and what it carries (optimizer, history, wall clock); a step's rollouts travel to the
  update as a `Rollouts` record (a5core.rl.grpo_update: the math).
- Around the steps, `train_grpo`: start validation (outside the wall-clock budget), validation on a fixed seeded
  subset every `eval_every` steps and on the whole set at the end, a checkpoint every `checkpoint_every` steps.
- Departures from the handout, all off by default: the options of a5core.rl.rl_options (clip-higher, overlong
  handling, entropy bonus, KL to the start policy, truncated importance sampling, dynamic sampling); `reward_fn`,
  the training reward (default: the prompt's); validation uses the run's own prompt and that prompt's reward.
- Training uses exactly the sampled token ids (never a re-tokenization of the text).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

import torch

from a5core.base.records import GradedSample, RolloutBatch
from a5core.base.seeds import derive_seed
from a5core.base.stats import mean
from a5core.grader.audit import audit_metrics
from a5core.model import distributed
from a5core.model.compute import Compute
from a5core.model.optim import make_optimizer
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.grpo_update import old_log_probs_for, optimizer_step, rollout_batch, with_kl_in_reward
from a5core.rl.rl_options import dynamic_sample, reference_policy, refill_sampling, truncation_rate
from a5core.run.checkpoint import Checkpointer
from a5core.run.evaluation import RunResult, generate_and_grade, log_evaluation
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
    t_start: float  # monotonic time the run's wall clock counts from (a resumed run continues it)
    ref: object = None  # the frozen start policy of the KL term (grpo.kl_coef), else None

    def wall(self) -> float:
        return time.monotonic() - self.t_start

    def over_budget(self) -> bool:
        """Past the wall-clock budget: on N ranks, on any of them (every rank must stop at the same step)."""
        return bool(self.cfg.time_budget_s) and distributed.any_rank(self.wall() >= self.cfg.time_budget_s)


@dataclass
class Rollouts:
    """One step's graded rollouts, ready for the update (GRPO-Zero's episodes)."""

    batch: RolloutBatch  # tokens, advantages, old/reference log-probs
    stats: dict  # `rollout/...` metrics of the step's samples
    timing: dict  # `perf/..._s`: where the step's time went before the update


def rollout(run: Run, step: int) -> Rollouts:
    """Step `step` (0-based): sync weights -> sample questions -> generate and grade (refilled when dynamic sampling)
    -> group-normalized advantages -> old and reference log-probs."""
    cfg, t0 = run.cfg, time.monotonic()
    rows = random.Random(derive_seed(cfg.seed, "grpo_questions", step)).sample(run.train_rows, cfg.questions_per_step)
    run.backend.sync_weights(run.policy)
    t1 = time.monotonic()

    def generate(questions: list[dict], refill_round: int) -> list[GradedSample]:
        sampling = refill_sampling(cfg.sampling(step), refill_round)
        return generate_and_grade(run.backend, questions, cfg.prompt, sampling, run.pool, progress=False)

    if cfg.dynamic_sampling:
        samples, ds_stats = dynamic_sample(cfg, generate, rows, run.train_rows, step)
    else:
        samples, ds_stats = generate(rows, 0), {}
    batch, meta = rollout_batch(run.tokenizer, samples, cfg)
    t2 = time.monotonic()
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
    timing = {"perf/sync_s": t1 - t0, "perf/rollout_s": t2 - t1, "perf/old_log_probs_s": time.monotonic() - t2}
    return Rollouts(batch, {**rollout_stats(samples, meta), **ds_stats}, timing)


def update_policy(run: Run, rollouts: Rollouts, step: int) -> None:
    """`epochs_per_rollout_batch` passes over the rollouts in shuffled optimizer steps of `train_batch_size`, each
    logged as one train row (with the step's rollout stats and timings)."""
    cfg, n = run.cfg, len(rollouts.batch)
    run.policy.train()
    for epoch in range(cfg.epochs_per_rollout_batch):
        perm = random.Random(derive_seed(cfg.seed, "grpo_order", step, epoch)).sample(range(n), n)
        for s in range(0, n, cfg.train_batch_size):
            t3 = time.monotonic()
            idx = perm[s : s + cfg.train_batch_size]
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
                    "perf/wall_s": run.wall(),
                },
            )


def grpo_step(run: Run, step: int) -> None:
    """One GRPO step: rollouts, then the policy update on them."""
    update_policy(run, rollout(run, step), step)


def _eval_extra(step: int, run: Run) -> dict:
    return {"count/grpo_step": step, "perf/wall_s": run.wall()}


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
    compute: Compute = Compute(),
) -> RunResult:
    """Run GRPO in place on `policy` with the stage's `compute` settings (micro-batches, autocast, weight update;
    a5core/model/compute.py). Returns the final full validation, and when the best validation was.

    Validation: `initial` (the starting policy's saved full validation under the same protocol) or a measurement is
    the step-0 point (outside the wall-clock budget), the fixed subset every `eval_every` steps, the whole set at
    the end. `snapshot(policy, step)`, when given, runs after every GRPO step.
    """
    cfg.validate()
    device = next(policy.parameters()).device
    opt = make_optimizer(policy, cfg.lr, cfg.weight_decay, cfg.betas, compute.weight_update)
    ref = reference_policy(policy, cfg)  # before the restore: the reference is the run's start policy
    state = ckpt.restore_training(policy, opt) if ckpt else {}
    history.restore(state.get("history"))
    history.total_steps = cfg.n_grpo_steps * cfg.optimizer_steps_per_step
    if not state:  # where the curve starts; outside the wall-clock budget
        metrics = initial["metrics"] if initial else validate(policy, full=True).metrics
        history.log("eval", {"step": 0, "count/grpo_step": 0, **metrics, "perf/wall_s": 0.0})
    t_start = time.monotonic() - state.get("wall_s", 0.0)
    run = Run(cfg, policy, tokenizer, backend, pool, train_rows, opt, history, device, compute, t_start, ref)
    step = state.get("step", 0)
    while step < cfg.n_grpo_steps and not run.over_budget():
        grpo_step(run, step)
        step += 1
        if snapshot:
            snapshot(policy, step)
        if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.n_grpo_steps:
            mid = validate(policy, full=False)
            log_evaluation(history, history.optimizer_steps, mid, n_completions, _eval_extra(step, run))
        if ckpt and ckpt.due(step):
            ckpt.save_training(policy, opt, step, history.state(), wall_s=run.wall())
    final = validate(policy, full=True)
    log_evaluation(history, history.optimizer_steps, final, n_completions, _eval_extra(step, run))
    return RunResult(final, _details(history, step, cfg))


def _details(history: RunHistory, step: int, cfg: GRPOConfig) -> dict:
    """The run's outcome: steps done, the best validation and when it came, and whether the time budget stopped it."""
    best = max(history.rows["eval"], key=lambda r: r["eval/accuracy"])
    return {
        "steps_done": step,
        "best_accuracy": best["eval/accuracy"],
        "best_step": best["step"],
        "best_wall_s": best.get("perf/wall_s", 0.0),
        "stopped_by_time_budget": step < cfg.n_grpo_steps,
    }
