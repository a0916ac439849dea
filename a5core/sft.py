"""SFT on reasoning traces: Algorithm 1 of the handout, a hand-written loop (no Trainer, no TRL).

Per optimizer step: take `batch_size` examples of a fixed seeded order -> split them into micro-batches
by length (sorted, so padding stays low) -> `get_response_log_probs` -> `sft_microbatch_train_step` ->
clip grad norm -> AdamW step -> schedule step -> log -> periodic eval -> periodic checkpoint.
Loss normalization (param): `per_example` is the handout's per-example sum / constant averaged over the
batch; `token_mean` divides the step's summed token log-likelihood by its number of response tokens, so
long answers do not dominate. Deviation: none from the handout's math; bf16 autocast only where fast.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Literal

import torch
from tqdm.auto import tqdm

from a5core.checkpoint import Checkpointer
from a5core.generation.hf import autocast_context
from a5core.logprobs import get_response_log_probs
from a5core.losses import sft_microbatch_train_step
from a5core.optim import make_optimizer, make_schedule
from a5core.tokenization import pad_token_id, tokenize_ids


@dataclass(frozen=True)
class SFTConfig:
    learning_rate: float = 1e-4  # peak AdamW learning rate
    schedule: Literal["cosine", "constant"] = "cosine"  # decay after warm-up
    warmup_steps: int = 2  # linear warm-up steps
    epochs: int = 1  # passes over the training examples
    batch_size: int = 16  # examples per optimizer step
    micro_batch_size: int = 8  # examples per forward/backward
    loss_normalization: Literal["token_mean", "per_example"] = "token_mean"  # see module docstring
    normalize_constant: float = 1.0  # divisor of the per-example sum (per_example only)
    max_grad_norm: float = 1.0  # gradient clipping
    weight_decay: float = 0.0  # AdamW weight decay
    eval_every: int = 4  # optimizer steps between evaluations (0 = only at the end)
    eval_examples: int = 32  # validation examples per in-training evaluation
    checkpoint_every: int = 4  # optimizer steps between resumable checkpoints (0 = never)
    seed: int = 0  # data order and sampling seed


@dataclass(frozen=True)
class SFTRun:
    examples: int = 0  # unique traces from the fixed shuffle (0 = all)
    data: str = "prepared/sft"  # which traces: data/<data>.parquet (the path itself is built in dvc.yaml)


def encode_examples(tokenizer, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids) per row; an empty response is an error naming the example."""
    out = []
    for r in rows:
        p = tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
        o = tokenizer(r["response"], add_special_tokens=False)["input_ids"]
        if not o:
            raise ValueError(f"SFT example {r.get('unique_id', '?')!r} has an empty response: nothing to learn from")
        out.append((p, o))
    return out


def micro_batches(examples: list[tuple[list[int], list[int]]], size: int) -> list[list[int]]:
    """Indices grouped into micro-batches of similar total length (sorted by length)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]) + len(examples[i][1]))
    return [order[i : i + size] for i in range(0, len(order), size)]


def sft_step(policy, batch: list[tuple[list[int], list[int]]], cfg: SFTConfig, pad_id: int, device) -> dict:
    """Forward/backward over one optimizer step's examples (gradients accumulate; no optimizer step)."""
    groups = micro_batches(batch, cfg.micro_batch_size)
    n_tokens = sum(len(o) for _, o in batch)
    stats = {"loss": 0.0, "entropy_sum": 0.0, "tokens": 0, "padded": 0, "cells": 0}
    for idx in groups:
        t = tokenize_ids([batch[i][0] for i in idx], [batch[i][1] for i in idx], pad_id)
        ids, labels, mask = t["input_ids"].to(device), t["labels"].to(device), t["response_mask"].to(device)
        with autocast_context(device):
            out = get_response_log_probs(policy, ids, labels, return_token_entropy=True, share_prefix=True)
        if cfg.loss_normalization == "token_mean":
            loss, _ = sft_microbatch_train_step(out["log_probs"], mask, 1, n_tokens / len(idx))
        else:
            loss, _ = sft_microbatch_train_step(out["log_probs"], mask, len(groups), cfg.normalize_constant)
        stats["loss"] += float(loss)
        stats["entropy_sum"] += float((out["token_entropy"] * mask).sum())
        stats["tokens"] += int(mask.sum())
        lengths = torch.tensor([len(batch[i][0]) + len(batch[i][1]) for i in idx])
        stats["padded"] += int(ids.numel() - (lengths - 1).sum())
        stats["cells"] += ids.numel()
    return stats


def train_sft(policy, tokenizer, rows: list[dict], cfg: SFTConfig, evaluate_fn: Callable[[object, int], dict],
              ckpt: Checkpointer | None = None, log: Callable[[str, dict], None] = lambda kind, row: None) -> dict:
    """Train `policy` in place on rows {prompt, response}; returns the final eval metrics."""
    if not rows:
        raise ValueError("no SFT examples to train on (is the filtered data empty?)")
    device = next(policy.parameters()).device
    examples = encode_examples(tokenizer, rows)
    order = [i for e in range(cfg.epochs) for i in random.Random(cfg.seed + e).sample(range(len(examples)), len(examples))]
    total = math.ceil(len(order) / cfg.batch_size)
    opt = make_optimizer(policy, cfg.learning_rate, cfg.weight_decay)
    sched = make_schedule(opt, total, cfg.warmup_steps, cfg.schedule)
    state, logs = ckpt.restore_training(policy, opt, sched, log) if ckpt else ({}, [])
    start = state.get("step", 0)
    record = lambda kind, row: (logs.append((kind, row)), log(kind, row))  # noqa: E731
    policy.train()
    t_start = time.monotonic()
    for step in tqdm(range(start, total), desc="sft", initial=start, total=total):
        t0 = time.monotonic()
        batch = [examples[i] for i in order[step * cfg.batch_size : (step + 1) * cfg.batch_size]]
        stats = sft_step(policy, batch, cfg, pad_token_id(tokenizer), device)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        dt = time.monotonic() - t0
        record("train", {"step": step + 1, "loss": stats["loss"], "grad_norm": grad_norm, "lr": lr,
                         "tokens_per_s": stats["cells"] / dt, "response_tokens": stats["tokens"],
                         "mean_response_tokens": stats["tokens"] / len(batch), "mean_entropy": stats["entropy_sum"] / max(stats["tokens"], 1),
                         "padding_fraction": stats["padded"] / max(stats["cells"], 1), "wall_s": time.monotonic() - t_start})
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < total:
            record("eval", {"step": step + 1, **evaluate_fn(policy, cfg.eval_examples)})
            policy.train()
        if ckpt and ckpt.due(step + 1) and step + 1 < total:
            ckpt.save_training(policy, opt, step + 1, logs, sched)
    final = evaluate_fn(policy, 0)
    record("eval", {"step": total, **final})
    return final
