"""SFT on reasoning traces: Algorithm 1 of the handout, a hand-written loop (no Trainer, no TRL).

Per optimizer step: take `batch_size` examples of a fixed seeded order -> split them into micro-batches by length
(sorted, so padding stays low) -> `get_response_log_probs` -> `sft_microbatch_train_step` -> clip grad norm -> AdamW
step -> schedule step -> log -> periodic validation on a fixed subset -> periodic checkpoint; at the end, validation
on the whole set. Warm-up is a fraction of the run's steps (`warmup_ratio`), so short and long runs of a size sweep
get the same schedule shape. Loss normalization (param): `per_example` is the handout's per-example sum / constant
averaged over the batch; `token_mean` divides the step's summed token log-likelihood by its number of response
tokens, so long answers do not dominate. Deviation from the handout: none in the math; bf16 autocast only where fast.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Literal

import torch

from a5core.base.progress import Clock
from a5core.base.seeds import derive_seed
from a5core.config.sections import Fraction, NonNegative, NonNegativeFloat, Positive, PositiveFloat, Section
from a5core.model import distributed, microbatch
from a5core.model.autocast import autocast_context
from a5core.model.compute import Compute
from a5core.model.logprobs import get_response_log_probs
from a5core.model.optim import make_optimizer, make_schedule
from a5core.model.tokenization import pad_token_id, tokenize_ids
from a5core.rl.losses import sft_microbatch_train_step
from a5core.rl.train_reward import reward_problems, training_reward
from a5core.run.checkpoint import Checkpointer
from a5core.run.evaluation import RunResult, validate_and_log
from a5core.run.history import RunHistory

SFT_PROMPT = "r1_zero"  # the format of the SFT traces (data/prepared/sft.parquet), and so of their reward

Example = tuple[list[int], list[int]]  # (prompt ids, response ids)


@dataclass(frozen=True)
class SFTConfig(Section):
    lr: PositiveFloat = 1e-4  # peak AdamW learning rate
    schedule: Literal["cosine", "constant"] = "cosine"  # decay after warm-up (cosine: to 10% of the peak)
    warmup_ratio: Fraction = 0.05  # linear warm-up over this fraction of the run's optimizer steps
    epochs: Positive = 1  # passes over the training examples
    batch_size: Positive = 16  # examples per optimizer step
    micro_batch_size: Positive = 8  # examples per forward/backward
    loss_normalization: Literal["token_mean", "per_example"] = "token_mean"  # see module docstring
    normalize_constant: PositiveFloat = 1.0  # divisor of the per-example sum (per_example only)
    max_grad_norm: PositiveFloat = 1.0  # gradient clipping
    weight_decay: NonNegativeFloat = 0.0  # AdamW weight decay
    eval_every: NonNegative = 4  # optimizer steps between mid-run validations (0 = only at the end)
    eval_examples: Positive = 32  # questions in the fixed mid-run validation subset
    checkpoint_every: NonNegative = 4  # optimizer steps between resumable checkpoints (0 = never)
    seed: int = 0  # data order seed
    reward_fn: str | None = None  # the reward sft@filtered's traces are kept by (module:function); None = r1_zero's

    def problems(self) -> list[str]:
        found = reward_problems(self.reward_fn, SFT_PROMPT)
        if self.micro_batch_size > self.batch_size:
            found.append(f"micro_batch_size ({self.micro_batch_size}) must be <= batch_size ({self.batch_size})")
        return found

    @property
    def train_reward(self) -> str:
        """The reward that filters the traces sft@filtered trains on (filter_sft_data)."""
        return training_reward(self.reward_fn, SFT_PROMPT)


def encode_examples(tokenizer, rows: list[dict]) -> list[Example]:
    """(prompt ids, response ids) per row; an empty response is an error naming the example."""
    out = []
    for r in rows:
        p = tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
        o = tokenizer(r["response"], add_special_tokens=False)["input_ids"]
        if not o:
            raise ValueError(f"SFT example {r.get('unique_id', '?')!r} has an empty response: nothing to learn from")
        out.append((p, o))
    return out


def micro_batches(examples: list[Example], size: int, cut: microbatch.Cut) -> list[list[int]]:
    """Indices grouped into micro-batches of similar total length (sorted by length): `size` examples each, or as
    many as `cut.micro_batch_tokens` holds (a5core/model/microbatch.py)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]) + len(examples[i][1]))
    lengths = [len(examples[i][0]) + len(examples[i][1]) for i in order]
    prompts = [examples[i][0] for i in order]
    return [[order[j] for j in group] for group in microbatch.micro_batches(lengths, size, cut, prompts)]


def sft_step(policy, batch: list[Example], cfg: SFTConfig, pad_id: int, device, compute: Compute) -> dict:
    """Forward/backward over one optimizer step's examples with the stage's `compute` settings (gradients accumulate;
    no optimizer step)."""
    groups = micro_batches(batch, cfg.micro_batch_size, compute.cut)
    n_tokens = sum(len(o) for _, o in batch)
    stats = {"loss": 0.0, "entropy_sum": 0.0, "tokens": 0, "padded": 0, "cells": 0}
    tokens = [sum(len(batch[i][0]) + len(batch[i][1]) for i in g) for g in groups]  # ranks are balanced by these
    for idx, weight in distributed.deal(groups, distributed.is_sharded(policy), tokens):  # this rank's share
        t = tokenize_ids([batch[i][0] for i in idx], [batch[i][1] for i in idx], pad_id)
        ids, labels, mask = t["input_ids"].to(device), t["labels"].to(device), t["response_mask"].to(device)
        lengths = [len(batch[i][0]) + len(batch[i][1]) - 1 for i in idx]  # each row's real positions
        with autocast_context(policy, compute.autocast_on):
            out = get_response_log_probs(policy, ids, labels, True, share_prefix=True, lengths=lengths, cut=compute.cut)
        # both are the micro-batch's share of the step's mean, whatever the split (a5core/model/microbatch.py)
        if cfg.loss_normalization == "token_mean":  # the step's summed log-likelihood / its response tokens
            # why n_tokens / len(idx): the handout's step returns the micro-batch's mean over its len(idx) rows of
            # (row sum / constant), i.e. sum / (constant * len(idx)) = sum / n_tokens, the step's token mean
            k, constant = microbatch.divisor(1, 1, weight), n_tokens / len(idx)
        else:  # mean over the step's examples of their sum / normalize_constant
            k, constant = microbatch.divisor(len(batch), len(idx), weight), cfg.normalize_constant
        loss, _ = sft_microbatch_train_step(out["log_probs"], mask, k, constant)
        stats["loss"] += float(loss)
        if not weight:  # a fsdp2 rank's repeat: its forward and backward only keep the collectives in step
            continue
        stats["entropy_sum"] += float((out["token_entropy"] * mask).sum())
        stats["tokens"] += int(mask.sum())
        cells = microbatch.cost(lengths, compute.cut.pack_sequences)  # positions the forward computed
        stats["padded"] += cells - sum(lengths)
        stats["cells"] += cells
    distributed.reduce_gradients(policy)
    return distributed.all_sum(stats)


def optimizer_step(
    policy, opt, sched, batch: list[Example], cfg: SFTConfig, pad_id: int, device, compute: Compute
) -> dict:
    """One optimizer step on `batch`: forward/backward -> clip -> AdamW -> schedule. Returns its log row."""
    t0 = time.monotonic()
    stats = sft_step(policy, batch, cfg, pad_id, device, compute)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
    lr = float(sched.get_last_lr()[0])  # a tensor for torchao's AdamW (model.weight_update: stochastic_round)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    dt = time.monotonic() - t0
    return {  # the optimizer step's row (names as in GRPO's: a5core.rl.grpo.optimizer_step)
        "train/loss": stats["loss"],  # the step's loss (its micro-batches' shares summed)
        "train/grad_norm": grad_norm,  # L2 norm before clipping
        "train/lr": lr,
        "train/entropy": stats["entropy_sum"] / max(stats["tokens"], 1),  # mean next-token entropy, nats
        "train/response_tokens": stats["tokens"] / len(batch),  # mean response length of the step's examples
        "count/loss_tokens": stats["tokens"],  # response tokens in the step's loss
        "perf/tokens_per_s": (stats["cells"] - stats["padded"]) / dt,  # real (not padding) positions forwarded per s
        "perf/padding_fraction": stats["padded"] / max(stats["cells"], 1),  # share of forwarded positions padded
    }


def example_order(n: int, cfg: SFTConfig) -> list[int]:
    """The indices of `n` examples in training order: each epoch a fresh seeded shuffle of them all."""
    return [
        i for e in range(cfg.epochs) for i in random.Random(derive_seed(cfg.seed, "sft_order", e)).sample(range(n), n)
    ]


def train_sft(
    policy,
    tokenizer,
    *,
    rows: list[dict],
    cfg: SFTConfig,
    validate: Callable,
    history: RunHistory,
    initial: dict | None = None,
    ckpt: Checkpointer | None = None,
    n_completions: int = 8,
    snapshot: Callable | None = None,
    compute: Compute,
    clock: Clock | None = None,
) -> RunResult:
    """Train `policy` in place on rows {prompt, response}; returns the final full validation and the step count.

    `compute`: the stage's compute settings (micro-batches, autocast, weight update; a5core/model/compute.py).
    `validate(policy, full=bool)` evaluates; `initial` (the starting policy's saved full validation record) is
    logged as the step-0 point of the curve; `snapshot(policy, step)`, when given, runs after every optimizer step.
    Validations record the run's `clock` (`perf/wall_s`; default: started here, or a resumed run's saved one).
    """
    if not rows:
        raise ValueError("no SFT examples to train on (is the filtered data empty?)")
    examples = encode_examples(tokenizer, rows)
    order = example_order(len(examples), cfg)
    total = math.ceil(len(order) / cfg.batch_size)
    opt = make_optimizer(policy, cfg.lr, cfg.weight_decay, update=compute.weight_update)
    sched = make_schedule(opt, total, round(cfg.warmup_ratio * total), cfg.schedule)
    state = ckpt.restore_training(policy, opt, sched) if ckpt else {}
    history.total_steps = total
    history.restore(state.get("history"))
    clock = clock or Clock.resumed(state.get("wall_s", 0.0))
    if not state and initial:
        history.log("eval", {"step": 0, **initial["metrics"], "perf/wall_s": 0.0})
    policy.train()
    pad_id = pad_token_id(tokenizer)
    for step in range(state.get("step", 0), total):
        batch = [examples[i] for i in order[step * cfg.batch_size : (step + 1) * cfg.batch_size]]
        row = optimizer_step(policy, opt, sched, batch, cfg, pad_id, next(policy.parameters()).device, compute)
        history.log("train", {"step": step + 1, **row})
        if snapshot:
            snapshot(policy, step + 1)
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < total:
            validate_and_log(history, step + 1, validate, policy, full=False, clock=clock, n_completions=n_completions)
            policy.train()
        if ckpt and ckpt.due(step + 1) and step + 1 < total:
            ckpt.save_training(policy, opt, step + 1, history.state(), sched, wall_s=clock.seconds())
    final = validate_and_log(history, total, validate, policy, full=True, clock=clock, n_completions=n_completions)
    return RunResult(final, {"steps": total})
