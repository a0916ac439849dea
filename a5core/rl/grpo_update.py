"""GRPO's update math, between the rollouts and the optimizer (a5core.rl.grpo runs the loop around it).

- `rollout_batch`: graded samples -> a `RolloutBatch` (token ids exactly as sampled, group-normalized advantages,
  the overlong penalty and truncation mask of a5core.rl.rl_options, the engine's log-probs for TIS).
- `old_log_probs_for`: log-probs of a fixed policy (the pre-update one, or the KL reference), once per rollout batch.
- `optimizer_step`: one optimizer step over some rollouts: micro-batched forward/backward through
  `grpo_microbatch_train_step`, each micro-batch's loss its share of the step's mean (a5core.model.microbatch), so the
  update is the same for any split; clip; AdamW. Returns the step's `train/` and `perf/` metrics.
"""

from __future__ import annotations

import time

import torch

from a5core.base.records import GradedSample, RolloutBatch
from a5core.model import distributed, microbatch
from a5core.model.autocast import autocast_context
from a5core.model.compute import Compute
from a5core.model.logprobs import get_response_log_probs
from a5core.model.tokenization import pad_token_id, tokenize_ids
from a5core.rl.advantages import ADVANTAGE_ESTIMATORS, reinforce_pp_token_advantages
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.losses import grpo_microbatch_train_step, normalizer_units
from a5core.rl.rl_options import (
    engine_log_probs,
    kl_logged,
    kl_reward_tokens,
    loss_terms,
    overlong_penalty,
    truncation_keep,
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
    pad = pad_token_id(tokenizer)
    prompts = [tokenizer(s.prompt, add_special_tokens=False)["input_ids"] for s in samples]
    outputs = [
        list(s.token_ids) or [tokenizer.eos_token_id if tokenizer.eos_token_id is not None else pad] for s in samples
    ]
    keep = truncation_keep([s.finish_reason for s in samples]) if cfg.mask_truncated else None  # (N,)
    engine = engine_log_probs(samples) if cfg.tis_cap else None
    adv, meta = advantages(raw, outputs, cfg)  # (N,)
    return RolloutBatch(prompts, outputs, raw, adv, pad, keep=keep, rollout_log_probs=engine), meta


def advantages(raw: torch.Tensor, outputs: list[list[int]], cfg: GRPOConfig) -> tuple[torch.Tensor, dict]:
    """The run's advantage estimator (`grpo.advantage_estimator`, a5core/rl/advantages.py) on rewards `raw` (N,)."""
    lengths = torch.tensor([len(o) for o in outputs])  # (N,) response tokens
    return ADVANTAGE_ESTIMATORS[cfg.advantage_estimator](raw, cfg.group_size, lengths, cfg)  # (N,), metadata


def with_kl_in_reward(
    batch: RolloutBatch, rollout_log_probs: list[torch.Tensor], cfg: GRPOConfig
) -> tuple[RolloutBatch, dict]:
    """`grpo.kl_in_reward` (verl's apply_kl_penalty before compute_advantage): each response token's reward is
    -beta * the KL estimate (`grpo.kl_estimator`'s value) under the rollout policy, and the last token's adds the task
    reward. REINFORCE++ trains on each token's return-to-go whitened over the batch
    (`reinforce_pp_token_advantages`); the other estimators on each response's summed reward (the task reward less
    beta * its summed KL) as its outcome. Returns the batch and `rollout/kl`: the mean over responses of their summed
    `kl_logged`, an unbiased KL(pi_rollout || ref)."""
    prompts, outputs = [len(p) for p in batch.prompt_ids], [len(o) for o in batch.output_ids]
    kl = kl_reward_tokens(rollout_log_probs, batch.ref_log_probs, prompts, outputs, cfg.kl_estimator)  # (O_i,) each
    penalties = [cfg.kl_coef * k for k in kl]  # (O_i,) each
    if cfg.advantage_estimator == "reinforce_pp":
        batch.token_advantages = reinforce_pp_token_advantages(batch.raw_rewards, penalties)  # (O_i,) each
    batch.raw_rewards = batch.raw_rewards - torch.stack([p.sum() for p in penalties])  # (N,)
    batch.advantages, _ = advantages(batch.raw_rewards, batch.output_ids, cfg)  # (N,)
    logged = [
        kl_logged(lp[p - 1 : p - 1 + o], ref[p - 1 : p - 1 + o]).sum()  # ()
        for lp, ref, p, o in zip(rollout_log_probs, batch.ref_log_probs, prompts, outputs)
    ]
    return batch, {"rollout/kl": float(torch.stack(logged).mean())}


def _advantage_rows(rollouts: RolloutBatch, idx: list[int], width: int, device) -> torch.Tensor:
    """The advantages the loss weighs micro-batch `idx` by: one per rollout (b, 1), or with token-level advantages
    (REINFORCE++ with KL in the reward) each token's at its label position (b, T), zero elsewhere (masked out)."""
    if rollouts.token_advantages is None:
        return rollouts.advantages[idx].unsqueeze(-1).to(device)  # (b, 1)
    out = torch.zeros(len(idx), width)  # (b, T)
    for j, i in enumerate(idx):
        start, adv = len(rollouts.prompt_ids[i]) - 1, rollouts.token_advantages[i]  # label t predicts id t + 1
        out[j, start : start + adv.shape[0]] = adv
    return out.to(device)  # (b, T)


def _micro_batches(rollouts: RolloutBatch, idx: list[int], count: int, cut: microbatch.Cut) -> list[list[int]]:
    """Rollouts `idx` as compute micro-batches: the handout's `count` per micro-batch, or `cut.micro_batch_tokens`."""
    lengths = [len(rollouts.prompt_ids[i]) + len(rollouts.output_ids[i]) for i in idx]
    prompts = [rollouts.prompt_ids[i] for i in idx]
    return [[idx[j] for j in group] for group in microbatch.micro_batches(lengths, count, cut, prompts)]


def old_log_probs_for(policy, rollouts: RolloutBatch, micro: int, device, compute: Compute) -> list[torch.Tensor]:
    """Per-rollout log-probs under the rollout policy, computed once per rollout batch (no graph) with the stage's
    `compute` settings; on N ranks each computes its share of the micro-batches and every rank gets them all."""
    mine: list[tuple[int, torch.Tensor]] = []
    groups = _micro_batches(rollouts, list(range(len(rollouts))), micro, compute.cut)
    for idx, weight in distributed.deal(groups, distributed.is_sharded(policy), _tokens(rollouts, groups)):
        b = _batch(rollouts, idx, device)
        with distributed.inference(policy), autocast_context(policy, compute.autocast_on):
            lp = get_response_log_probs(
                policy, b["input_ids"], b["labels"], share_prefix=True, lengths=b["lengths"], cut=compute.cut
            )["log_probs"]  # (b, T)
        mine += [(i, lp[j].cpu()) for j, i in enumerate(idx)] if weight else []  # gathered through the CPU
    out = dict(distributed.gather(mine))
    return [out[i].to(device) for i in range(len(rollouts))]


def _pad_stack(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r[:width], (0, max(0, width - r.shape[0]))) for r in rows])  # (b, T)


def _forward(policy, cfg: GRPOConfig, b: dict, compute: Compute) -> dict:
    """The policy's log-probs and token entropies of micro-batch `b`'s responses (entropy with its gradient only
    when the loss has an entropy term)."""
    with autocast_context(policy, compute.autocast_on):
        return get_response_log_probs(
            policy,
            b["input_ids"],
            b["labels"],
            return_token_entropy=True,
            share_prefix=True,
            entropy_grad=bool(cfg.entropy_coef),
            lengths=b["lengths"],
            cut=compute.cut,
        )


def _micro_step(
    policy,
    cfg: GRPOConfig,
    rollouts: RolloutBatch,
    mi: list[int],
    step_units: int,
    device,
    compute: Compute,
    weight: float = 1.0,
) -> dict:
    """Forward/backward of micro-batch `mi` with its share of the step's loss (times `weight`: 0 is a fsdp2 rank's
    repeat that only keeps the collectives in step); returns its sums for the log."""
    b = _batch(rollouts, mi, device)
    out = _forward(policy, cfg, b, compute)
    width, mask = b["labels"].shape[1], b["response_mask"]
    old = _pad_stack([rollouts.old_log_probs[i] for i in mi], width) if rollouts.old_log_probs else None  # (b, T)
    terms, option_terms = loss_terms(cfg, out, old, rollouts, mi, width)
    loss, meta = grpo_microbatch_train_step(
        out["log_probs"],
        mask,
        microbatch.divisor(step_units, normalizer_units(cfg.length_normalization, mask), weight),
        cfg.loss_type,
        raw_rewards=rollouts.raw_rewards[mi].unsqueeze(-1).to(device),  # (b, 1)
        advantages=_advantage_rows(rollouts, mi, width, device),  # (b, 1), or (b, T) token-level
        old_log_probs=old,
        cliprange=cfg.clip_bounds,
        length_normalization=cfg.length_normalization,
        normalize_constant=cfg.normalize_constant,
        **terms,
    )
    if not weight:  # a fsdp2 rank's repeat: nothing to log
        return {}
    tokens = int(mask.sum())
    return {
        "loss": float(loss),
        "clip": float(meta["clip_fraction"]) * tokens,
        "entropy": float((out["token_entropy"].detach() * mask).sum()),
        "tokens": tokens,
        "cells": microbatch.cost(b["lengths"], compute.cut.pack_sequences),  # positions the forward computed
        "real": sum(b["lengths"]),  # of which real (not padding)
        **{f"option/{name}": float((per_token * mask).sum()) for name, per_token in option_terms.items()},
    }


def optimizer_step(
    policy, opt, cfg: GRPOConfig, idx: list[int], rollouts: RolloutBatch, device, compute: Compute
) -> dict:
    """One optimizer step over rollouts `idx`: micro-batched forward/backward with the stage's `compute` settings,
    clip, AdamW step.

    Each micro-batch's loss is its share of the step's mean (microbatch.share over losses.normalizer_units), so the
    update is the same for any split into micro-batches (the handout's, or a token budget) and over ranks, whose
    gradients are summed (a5core.model.distributed)."""
    token_mean = cfg.length_normalization == "token_mean"
    # mask_truncated drops truncated rollouts from the step's count as from its loss (DAPO; trl#6439): each
    # micro-batch's share cancels its own normalizer, so the step's loss is over the kept rollouts' units alone
    kept = [i for i in idx if rollouts.keep is None or not cfg.mask_truncated or rollouts.keep[i] > 0]
    step_units = sum(len(rollouts.output_ids[i]) for i in kept) if token_mean else len(kept)
    step_units = max(step_units, 1)  # every rollout truncated: a zero update, not 0 / 0
    t0 = time.monotonic()
    sums: dict[str, float] = {}  # over the micro-batches: loss, clip, entropy, tokens, cells, option/<name>
    groups = _micro_batches(rollouts, idx, cfg.micro_batch_size, compute.cut)
    tokens = _tokens(rollouts, groups)
    for mi, weight in distributed.deal(groups, distributed.is_sharded(policy), tokens):
        for key, value in _micro_step(policy, cfg, rollouts, mi, step_units, device, compute, weight).items():
            sums[key] = sums.get(key, 0) + value
    distributed.reduce_gradients(policy)
    sums = distributed.all_sum(sums)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
    opt.step()
    opt.zero_grad(set_to_none=True)
    n_tok = max(sums["tokens"], 1)
    return {  # the optimizer step's row; `train/...`: per response token unless said
        "train/loss": sums["loss"],  # the step's loss (its micro-batches' shares summed)
        "train/grad_norm": grad_norm,  # L2 norm before clipping
        "train/clip_fraction": sums["clip"] / n_tok,  # share of tokens whose ratio was clipped (grpo_clip)
        "train/entropy": sums["entropy"] / n_tok,  # mean next-token entropy, nats
        **{f"train/{k.removeprefix('option/')}": v / n_tok for k, v in sums.items() if k.startswith("option/")},
        "perf/tokens_per_s": sums["real"] / (time.monotonic() - t0),  # real (not padding) positions forwarded per s
        "perf/padding_fraction": 1 - sums["real"] / max(sums["cells"], 1),  # share of forwarded positions padded
        **_rank_spread(tokens, distributed.is_sharded(policy)),
    }


def _tokens(rollouts: RolloutBatch, groups: list[list[int]]) -> list[int]:
    """Each micro-batch's tokens (prompt and response), by which ranks are balanced."""
    return [sum(len(rollouts.prompt_ids[i]) + len(rollouts.output_ids[i]) for i in g) for g in groups]


def _rank_spread(tokens: list[int], sharded: bool) -> dict:
    """On N ranks, `perf/rank_tokens_max_over_mean`: the busiest rank's tokens over the mean (1.0: balanced)."""
    size = distributed.world().size
    if size == 1:
        return {}
    per_rank = distributed.rank_tokens(tokens, size, sharded)
    return {"perf/rank_tokens_max_over_mean": max(per_rank) * size / max(sum(per_rank), 1)}
