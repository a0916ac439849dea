"""GRPO with verified rewards and no KL term (Algorithm 3 of the handout; Shao et al., 2024), plus the options of
`a5core.rl_options` (clip-higher, overlong handling, entropy bonus, KL to the start policy, truncated importance
sampling, dynamic sampling), each off by default.

Per step, top to bottom in `train_grpo`: sample rollout_batch_size/group_size questions -> generate group_size
rollouts each through the shared backend (weights synced first) -> grade them -> group-normalized advantages ->
old log-probs once per rollout batch, under inference_mode, when the loss is off-policy -> for each of
epochs_per_rollout_batch passes, optimizer steps of train_batch_size rollouts, each a micro-batched backward through
`grpo_microbatch_train_step` -> clip -> AdamW step -> log -> validation every eval_every steps -> checkpoint.
The rollout batch travels between these steps as a `RolloutBatch`. Training uses exactly the sampled token ids.
Each run trains on `reward_fn` (default: its prompt's reward) and validates with its own prompt and that prompt's
reward (a question_only run is not scored by the r1_zero grader), on a fixed seeded subset mid-run and on the whole
validation set at the end.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Annotated, Callable

import torch

from a5core import compute
from a5core.advantages import group_normalize
from a5core.autocast import autocast_context
from a5core.checkpoint import Checkpointer
from a5core.config import (
    Bound,
    NonNegative,
    NonNegativeFloat,
    Positive,
    PositiveFloat,
    PromptName,
    SamplingConfig,
    TopP,
    init_policy_problem,
)
from a5core.evaluation import generate_and_grade, log_evaluation
from a5core.history import RunHistory
from a5core.logprobs import get_response_log_probs
from a5core.losses import (
    LENGTH_NORMALIZERS,
    OFF_POLICY_LOSSES,
    PG_LOSSES,
    LengthNorm,
    grpo_microbatch_train_step,
    normalizer_units,
)
from a5core.optim import make_optimizer
from a5core.prompts import STOPS
from a5core.records import GradedSample, RolloutBatch
from a5core.rewards import reward_problems, training_reward
from a5core.rl_options import (
    RLOptions,
    dynamic_sample,
    engine_log_probs,
    loss_terms,
    overlong_penalty,
    reference_policy,
    refill_sampling,
    truncation_keep,
    truncation_rate,
)
from a5core.tokenization import pad_token_id, tokenize_ids

Beta = Annotated[float, Bound(0, 1, hi_open=True)]


@dataclass(frozen=True)
class GRPOConfig(RLOptions):  # the handout's fields below; the options' (off by default) in rl_options.RLOptions
    init_policy: str = "sft_filtered"  # model folder under models/ to start from (base = the fetched model)
    n_grpo_steps: Positive = 200  # rollout/optimization steps
    learning_rate: PositiveFloat = 1e-5  # AdamW learning rate
    advantage_eps: NonNegativeFloat = 1e-6  # added to the group std
    rollout_batch_size: Positive = 256  # rollouts per step
    group_size: Annotated[int, Bound(lo=2)] = 8  # rollouts per question (a group of one has no baseline)
    temperature: NonNegativeFloat = 1.0  # rollout sampling temperature
    top_p: TopP = 1.0  # rollout nucleus threshold
    min_tokens: NonNegative = 4  # min new tokens per rollout
    max_tokens: Positive = 1024  # max new tokens per rollout
    epochs_per_rollout_batch: Positive = 1  # passes over each rollout batch (> 1 is off-policy)
    train_batch_size: Positive = 256  # rollouts per optimizer step
    gradient_accumulation_steps: Positive = 128  # micro-batches per optimizer step
    loss_type: str = "reinforce_with_baseline"  # policy-gradient loss, a name in losses.PG_LOSSES
    use_std_normalization: bool = True  # divide advantages by the group std
    std_ddof: Annotated[int, Bound(0, 1)] = 1  # 1: unbiased group std (handout), 0: population std
    length_normalization: LengthNorm = "masked_mean"  # per-sequence reduction, a name in losses.LENGTH_NORMALIZERS
    normalize_constant: PositiveFloat = 1024.0  # divisor for masked_normalize (usually max_tokens)
    cliprange: PositiveFloat = 0.2  # epsilon of GRPO-Clip
    prompt: PromptName = "r1_zero"  # rollout and validation prompt
    reward_fn: str | None = None  # the reward GRPO trains on (module:function); None = the prompt's (REWARD_FNS)
    max_grad_norm: PositiveFloat = 1.0  # gradient clipping
    weight_decay: NonNegativeFloat = 0.0  # AdamW weight decay
    betas: tuple[Beta, Beta] = (0.9, 0.95)  # AdamW betas
    eval_every: NonNegative = 5  # GRPO steps between mid-run validations (0 = only at the start and end)
    eval_examples: Positive = 1024  # questions in the fixed mid-run validation subset
    checkpoint_every: NonNegative = 1  # steps between resumable checkpoints (0 = never)
    time_budget_s: NonNegativeFloat = 0.0  # wall-clock budget in seconds (0 = none): stop, validate, report best
    seed: int = 0  # question sampling and rollout seed

    def problems(self) -> list[str]:
        """The handout's consistency rules, and names that must exist."""
        rules = [
            (self.loss_type in PG_LOSSES, f"loss_type {self.loss_type!r} is not one of {sorted(PG_LOSSES)}"),
            (
                self.length_normalization in LENGTH_NORMALIZERS,
                f"length_normalization must be one of {sorted(LENGTH_NORMALIZERS)}",
            ),
            (
                self.train_batch_size % self.gradient_accumulation_steps == 0,
                "train_batch_size must be divisible by gradient_accumulation_steps",
            ),
            (self.rollout_batch_size % self.group_size == 0, "rollout_batch_size must be divisible by group_size"),
            (self.train_batch_size >= self.group_size, "train_batch_size must be >= group_size"),
            (
                self.rollout_batch_size % self.train_batch_size == 0,
                "rollout_batch_size must be divisible by train_batch_size",
            ),
            (
                self.needs_old_log_probs or not self.off_policy,
                "off-policy training (epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size) needs "
                "a loss "
                f"that uses old log-probs: one of {sorted(OFF_POLICY_LOSSES)}",
            ),
            (self.min_tokens <= self.max_tokens, "min_tokens must be <= max_tokens"),
        ]
        problems = [msg for ok, msg in rules if not ok] + self.option_problems()
        named = [init_policy_problem(self.init_policy)] + reward_problems(self.reward_fn, self.prompt)
        return problems + [p for p in named if p]

    @property
    def train_reward(self) -> str:
        return training_reward(self.reward_fn, self.prompt)

    @property
    def off_policy(self) -> bool:
        return self.epochs_per_rollout_batch > 1 or self.train_batch_size < self.rollout_batch_size

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in OFF_POLICY_LOSSES

    @property
    def micro_batch_size(self) -> int:
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def questions_per_step(self) -> int:
        return self.rollout_batch_size // self.group_size

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.epochs_per_rollout_batch * (self.rollout_batch_size // self.train_batch_size)

    def sampling(self, step: int) -> SamplingConfig:
        return SamplingConfig(
            self.temperature,
            self.top_p,
            self.max_tokens,
            self.min_tokens,
            STOPS[self.prompt],
            self.group_size,
            self.seed * 100_003 + step,
        )


def _batch(rollouts: RolloutBatch, idx: list[int], device) -> dict:
    """Rollouts `idx` tokenized and right-padded, with each row's real length (`lengths`, for packing)."""
    t = tokenize_ids([rollouts.prompt_ids[i] for i in idx], [rollouts.output_ids[i] for i in idx], rollouts.pad_id)
    lengths = [len(rollouts.prompt_ids[i]) + len(rollouts.output_ids[i]) - 1 for i in idx]
    return {**{k: v.to(device) for k, v in t.items()}, "lengths": lengths}


def rollout_batch(tokenizer, samples: list[GradedSample], cfg: GRPOConfig) -> tuple[RolloutBatch, dict]:
    """Rewards -> group-normalized advantages, with the prompt and sampled ids of every rollout."""
    raw = torch.tensor([s.reward for s in samples], dtype=torch.float32)  # (N,)
    if cfg.overlong_buffer:  # DAPO's soft overlong punishment, part of the reward the advantages see
        lengths = torch.tensor([s.output_tokens for s in samples])  # (N,)
        raw = raw + overlong_penalty(lengths, cfg.max_tokens, cfg.overlong_buffer, cfg.overlong_penalty)  # (N,)
    adv, meta = group_normalize(raw, cfg.group_size, cfg.advantage_eps, cfg.use_std_normalization, cfg.std_ddof)  # (N,)
    pad = pad_token_id(tokenizer)
    prompts = [tokenizer(s.prompt, add_special_tokens=False)["input_ids"] for s in samples]
    outputs = [
        list(s.token_ids) or [tokenizer.eos_token_id if tokenizer.eos_token_id is not None else pad] for s in samples
    ]
    keep = truncation_keep([s.finish_reason for s in samples]) if cfg.mask_truncated else None  # (N,)
    engine = engine_log_probs(samples) if cfg.tis_cap else None
    return RolloutBatch(prompts, outputs, raw, adv, pad, keep=keep, rollout_log_probs=engine), meta


def _micro_batches(rollouts: RolloutBatch, idx: list[int], count: int) -> list[list[int]]:
    """Rollouts `idx` as compute micro-batches: the handout's `count` per micro-batch, or model.micro_batch_tokens."""
    lengths = [len(rollouts.prompt_ids[i]) + len(rollouts.output_ids[i]) for i in idx]
    return [[idx[j] for j in group] for group in compute.micro_batches(lengths, count)]


@torch.inference_mode()
def old_log_probs_for(policy, rollouts: RolloutBatch, micro: int, device) -> list[torch.Tensor]:
    """Per-rollout log-probs under the rollout policy, computed once per rollout batch (no graph)."""
    out: list[torch.Tensor | None] = [None] * len(rollouts)
    for idx in _micro_batches(rollouts, list(range(len(rollouts))), micro):
        b = _batch(rollouts, idx, device)
        with autocast_context(policy):
            lp = get_response_log_probs(policy, b["input_ids"], b["labels"], share_prefix=True, lengths=b["lengths"])[
                "log_probs"
            ]  # (b, T)
        for j, i in enumerate(idx):
            out[i] = lp[j].clone()
    return out


def _pad_stack(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r[:width], (0, max(0, width - r.shape[0]))) for r in rows])  # (b, T)


def _micro_step(policy, cfg: GRPOConfig, rollouts: RolloutBatch, mi: list[int], step_units: int, device) -> dict:
    """Forward/backward of micro-batch `mi` with its share of the step's loss; returns its sums for the log."""
    b = _batch(rollouts, mi, device)
    with autocast_context(policy):
        out = get_response_log_probs(
            policy,
            b["input_ids"],
            b["labels"],
            return_token_entropy=True,
            share_prefix=True,
            entropy_grad=bool(cfg.entropy_coef),
            lengths=b["lengths"],
        )
    width, mask = b["labels"].shape[1], b["response_mask"]
    old = _pad_stack([rollouts.old_log_probs[i] for i in mi], width) if rollouts.old_log_probs else None  # (b, T)
    terms, option_terms = loss_terms(cfg, out, old, rollouts, mi, width)
    loss, meta = grpo_microbatch_train_step(
        out["log_probs"],
        mask,
        compute.share(step_units, normalizer_units(cfg.length_normalization, mask)),
        cfg.loss_type,
        raw_rewards=rollouts.raw_rewards[mi].unsqueeze(-1).to(device),  # (b, 1)
        advantages=rollouts.advantages[mi].unsqueeze(-1).to(device),  # (b, 1)
        old_log_probs=old,
        cliprange=cfg.clip_bounds,
        length_normalization=cfg.length_normalization,
        normalize_constant=cfg.normalize_constant,
        **terms,
    )
    tokens = int(mask.sum())
    return {
        "loss": float(loss),
        "clip": float(meta["clip_fraction"]) * tokens,
        "entropy": float((out["token_entropy"].detach() * mask).sum()),
        "tokens": tokens,
        "cells": compute.cost(b["lengths"], compute.settings().pack_sequences),  # positions the forward computed
        "real": sum(b["lengths"]),  # of which real (not padding)
        **{f"option/{name}": float((per_token * mask).sum()) for name, per_token in option_terms.items()},
    }


def optimizer_step(policy, opt, cfg: GRPOConfig, idx: list[int], rollouts: RolloutBatch, device) -> dict:
    """One optimizer step over rollouts `idx`: micro-batched forward/backward, clip, AdamW step.

    Each micro-batch's loss is its share of the step's mean (compute.share over losses.normalizer_units), so the
    update is the same for any split into micro-batches (the handout's, or a token budget)."""
    token_mean = cfg.length_normalization == "token_mean"
    step_units = sum(len(rollouts.output_ids[i]) for i in idx) if token_mean else len(idx)
    t0 = time.monotonic()
    sums: dict[str, float] = {}  # over the micro-batches: loss, clip, entropy, tokens, cells, option/<name>
    for mi in _micro_batches(rollouts, idx, cfg.micro_batch_size):
        for key, value in _micro_step(policy, cfg, rollouts, mi, step_units, device).items():
            sums[key] = sums.get(key, 0) + value
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
    opt.step()
    opt.zero_grad(set_to_none=True)
    n_tok = max(sums["tokens"], 1)
    return {
        "loss": sums["loss"],
        "grad_norm": grad_norm,
        "clip_fraction": sums["clip"] / n_tok,
        "token_entropy": sums["entropy"] / n_tok,
        "tokens_per_s": sums["tokens"] / (time.monotonic() - t0),
        "padding_fraction": 1
        - sums["real"] / max(sums["cells"], 1),  # share of the forward's positions that are padding
        **{k.removeprefix("option/"): v / n_tok for k, v in sums.items() if k.startswith("option/")},
    }


def rollout_stats(samples: list[GradedSample], meta: dict) -> dict:
    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")

    return {
        "train_reward": mean([s.reward for s in samples]),
        "train_format_reward": mean([s.format_reward for s in samples]),
        "train_answer_reward": mean([s.answer_reward for s in samples]),
        "response_length": mean([s.output_tokens for s in samples]),
        "response_length_correct": mean([s.output_tokens for s in samples if s.answer_reward == 1]),
        "response_length_incorrect": mean([s.output_tokens for s in samples if s.answer_reward != 1]),
        "frac_groups_all_equal": meta["frac_groups_all_equal"],
        "truncation_rate": truncation_rate([s.finish_reason for s in samples]),  # cut at max_tokens (DAPO's concern)
    }


@dataclass
class Run:
    """The state one GRPO run carries from step to step."""

    policy: object
    opt: torch.optim.Optimizer
    cfg: GRPOConfig
    history: RunHistory
    device: torch.device
    t_start: float  # monotonic time the run's wall clock counts from (a resumed run continues it)
    ref: object = None  # the frozen start policy of the KL term (grpo.kl_coef), else None

    def wall(self) -> float:
        return time.monotonic() - self.t_start

    def over_budget(self) -> bool:
        return bool(self.cfg.time_budget_s) and self.wall() >= self.cfg.time_budget_s


def grpo_step(run: Run, tokenizer, backend, train_rows: list[dict], pool, step: int) -> None:
    """GRPO step `step` (0-based): generate -> grade -> advantages -> old log-probs -> optimizer steps -> log.

    Each train row also records where the step's time went: weight sync, rollouts (generation and grading), old
    log-probs, and the optimizer step itself (`sync_s`, `rollout_s`, `old_log_probs_s`, `optimizer_s`).
    """
    cfg, t0 = run.cfg, time.monotonic()
    questions = random.Random(cfg.seed * 100_003 + step).sample(train_rows, cfg.questions_per_step)
    backend.sync_weights(run.policy)
    t1 = time.monotonic()

    def generate(rows: list[dict], refill_round: int) -> list[GradedSample]:
        sampling = refill_sampling(cfg.sampling(step), refill_round)
        return generate_and_grade(backend, rows, cfg.prompt, sampling, pool, progress=False)

    if cfg.dynamic_sampling:
        samples, ds_stats = dynamic_sample(cfg, generate, questions, train_rows, step)
    else:
        samples, ds_stats = generate(questions, 0), {}
    rollouts, meta = rollout_batch(tokenizer, samples, cfg)
    t2 = time.monotonic()
    if cfg.needs_old_log_probs:
        rollouts.old_log_probs = old_log_probs_for(run.policy, rollouts, cfg.micro_batch_size, run.device)
    if run.ref is not None:  # the reference's log-probs: once per rollout batch, no graph, like the old ones
        rollouts.ref_log_probs = old_log_probs_for(run.ref, rollouts, cfg.micro_batch_size, run.device)
    timing = {"sync_s": t1 - t0, "rollout_s": t2 - t1, "old_log_probs_s": time.monotonic() - t2}
    stats = {**rollout_stats(samples, meta), **ds_stats}
    run.policy.train()
    for epoch in range(cfg.epochs_per_rollout_batch):
        perm = random.Random(cfg.seed + 7919 * step + epoch).sample(range(len(rollouts)), len(rollouts))
        for s in range(0, len(perm), cfg.train_batch_size):
            t3 = time.monotonic()
            row = optimizer_step(run.policy, run.opt, cfg, perm[s : s + cfg.train_batch_size], rollouts, run.device)
            row = {
                "step": run.history.optimizer_steps + 1,
                "grpo_step": step + 1,
                "epoch": epoch,
                **row,
                **stats,
                **timing,
                "optimizer_s": time.monotonic() - t3,
                "wall_s": run.wall(),
            }
            run.history.log("train", row)


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
) -> dict:
    """Run GRPO in place on `policy`. Returns the final full validation's metrics and when the best one was.

    Validation: `initial` (the starting policy's saved full validation under the same protocol) or a measurement is
    the step-0 point (outside the wall-clock budget), the fixed subset every `eval_every` steps, the whole set at
    the end. `snapshot(policy, step)`, when given, runs after every GRPO step.
    """
    cfg.validate()
    device = next(policy.parameters()).device
    opt = make_optimizer(policy, cfg.learning_rate, cfg.weight_decay, cfg.betas)
    ref = reference_policy(policy, cfg)  # before the restore: the reference is the run's start policy
    state = ckpt.restore_training(policy, opt) if ckpt else {}
    history.restore(state.get("history"))
    history.total_steps = cfg.n_grpo_steps * cfg.optimizer_steps_per_step
    if not state:  # where the curve starts; outside the wall-clock budget
        metrics = initial["metrics"] if initial else validate(policy, full=True).metrics
        history.log("eval", {"step": 0, "grpo_step": 0, **metrics, "wall_s": 0.0})
    run = Run(policy, opt, cfg, history, device, time.monotonic() - state.get("wall_s", 0.0), ref)
    step = state.get("step", 0)
    while step < cfg.n_grpo_steps and not run.over_budget():
        grpo_step(run, tokenizer, backend, train_rows, pool, step)
        step += 1
        if snapshot:
            snapshot(policy, step)
        if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.n_grpo_steps:
            log_evaluation(
                history,
                history.optimizer_steps,
                validate(policy, full=False),
                n_completions,
                grpo_step=step,
                wall_s=run.wall(),
            )
        if ckpt and ckpt.due(step):
            ckpt.save_training(policy, opt, step, history.state(), wall_s=run.wall())
    final = validate(policy, full=True)
    log_evaluation(history, history.optimizer_steps, final, n_completions, grpo_step=step, wall_s=run.wall())
    evals = history.rows["eval"]
    best = max(evals, key=lambda r: r["accuracy"])
    return {
        "final": final,
        "steps_done": step,
        "best_accuracy": best["accuracy"],
        "best_step": best["step"],
        "best_wall_s": best.get("wall_s", 0.0),
        "stopped_by_time_budget": step < cfg.n_grpo_steps,
    }
