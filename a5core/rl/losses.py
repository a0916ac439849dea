"""Masked reductions and the SFT / policy-gradient losses of the CS336 A5 handout.

Shapes: B = batch, T = sequence length. Loss variants dispatch from the `PG_LOSSES` and
`LENGTH_NORMALIZERS` tables, one small named function each.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch
from torch import Tensor

LengthNorm = Literal["masked_mean", "masked_normalize", "token_mean"]


def masked_normalize(tensor: Tensor, mask: Tensor, normalize_constant: float = 1.0, dim: int | None = None) -> Tensor:
    """Sum of `tensor` where `mask` is set (along `dim`, or everything when None), divided by a constant."""
    masked = tensor * mask  # same shape as tensor
    total = masked.sum() if dim is None else masked.sum(dim=dim)
    return total / normalize_constant


def masked_mean(tensor: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `tensor` over the positions where `mask` is set (NaN where no position is set)."""
    mask = mask.to(tensor.dtype)
    if dim is None:
        return (tensor * mask).sum() / mask.sum()
    return (tensor * mask).sum(dim=dim) / mask.sum(dim=dim)


def _check_mask(response_mask: Tensor) -> None:
    """A training step over zero response tokens would silently produce NaN; refuse it instead."""
    if not bool(response_mask.any()):
        raise ValueError("response_mask is all zero: the micro-batch has no response tokens to train on")
    empty = (response_mask.sum(dim=-1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"examples {empty} of the micro-batch have no response tokens (empty output)")


def sft_microbatch_train_step(
    policy_log_probs: Tensor, response_mask: Tensor, gradient_accumulation_steps: float, normalize_constant: float = 1.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Handout SFT step: loss = mean_b(-sum_t mask*logp / c) / k; calls backward; returns the scaled loss.
    (k may be a micro-batch's share of an uneven split: the step's examples over its own;
    a5core/model/microbatch.py.)"""
    _check_mask(response_mask)
    per_example = -masked_normalize(policy_log_probs, response_mask, normalize_constant, dim=-1)  # (B,)
    loss = per_example.mean() / gradient_accumulation_steps  # ()
    loss.backward()
    n_tokens = response_mask.sum()
    return loss.detach(), {"per_example_loss": per_example.detach(), "response_tokens": n_tokens}


def compute_naive_policy_gradient_loss(raw_rewards_or_advantages: Tensor, policy_log_probs: Tensor) -> Tensor:
    """REINFORCE per-token loss -A * log p, A of shape (B, 1) broadcast over T (Williams, 1992)."""
    return -raw_rewards_or_advantages.detach() * policy_log_probs  # (B, T)


def _clip_bounds(cliprange: float | tuple) -> tuple[float, float, float | None]:
    """(eps_low, eps_high, dual-clip c or None) from the handout's float, (eps_low, eps_high) or (low, high, c)."""
    if not isinstance(cliprange, tuple):
        return cliprange, cliprange, None
    return (cliprange[0], cliprange[1], cliprange[2] if len(cliprange) > 2 else None)


def _clipped_surrogate(ratio: Tensor, adv: Tensor, cliprange: float | tuple) -> tuple[Tensor, dict[str, Tensor]]:
    """-min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A); with dual-clip c, for A < 0 the loss is min(that, -c*A)
    (verl's compute_policy_loss_vanilla: pg_losses3 = -A * c, taken where A < 0). `ratio` (B, T) carries the
    gradient; `adv` (B, 1) is a constant."""
    low, high, c = _clip_bounds(cliprange)
    unclipped = ratio * adv  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - low, 1.0 + high) * adv  # (B, T)
    loss = -torch.minimum(unclipped, clipped)  # (B, T)
    meta = {"clipped": clipped < unclipped, "ratio": ratio.detach()}  # (B, T) each
    if c is not None:  # dual-clip: for A < 0 the loss is bounded by -c * A (a constant: no gradient there)
        bound = (-c * adv).expand_as(loss)  # (B, T)
        dual = (adv < 0) & (loss > bound)  # (B, T)
        loss = torch.where(dual, bound, loss)  # (B, T)
        meta["clipped"] = meta["clipped"] | dual
        meta["dual_clipped"] = dual
    return loss, meta


def compute_grpo_clip_loss(
    advantages: Tensor, policy_log_probs: Tensor, old_log_probs: Tensor, cliprange: float | tuple
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO/GRPO clipped surrogate -min(rho*A, clip(rho, 1-eps, 1+eps)*A) (Schulman et al., 2017; Shao et al., 2024).

    `cliprange=(eps_low, eps_high)` clips to [1 - eps_low, 1 + eps_high] (clip-higher, DAPO; Yu et al., 2025): a
    larger eps_high lets unlikely tokens with positive advantage gain more probability, against entropy collapse.
    `(eps_low, eps_high, c)`: dual-clip as well (Ye et al., 2020; verl's clip_ratio_c), see `_clipped_surrogate`.
    """
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())  # (B, T)
    return _clipped_surrogate(ratio, advantages.detach(), cliprange)  # (B, T), metadata


def compute_gspo_loss(
    advantages: Tensor, policy_log_probs: Tensor, old_log_probs: Tensor, cliprange: float | tuple, response_mask: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO (Zheng et al., 2025, arXiv:2507.18071): the clipped surrogate on the sequence-level ratio
    s_i = exp(mean over response tokens of (log pi - log pi_old)), as s_i,t = sg[s_i] * pi / sg[pi] per token so each
    token's gradient is s_i * grad log pi / |y_i| under a per-sequence mean (length_normalization masked_mean).
    Checked against verl's compute_policy_loss_gspo (the log-ratio clamped at 10 there too) and TRL's
    `importance_sampling_level="sequence"`. Clipping (and clip-higher, dual-clip) applies to s_i."""
    mask = response_mask.to(policy_log_probs.dtype)  # (B, T)
    log_ratio = (policy_log_probs - old_log_probs.detach()) * mask  # (B, T)
    seq = log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    log_s = (policy_log_probs - policy_log_probs.detach() + seq.detach()).clamp(max=10.0)  # (B, T)
    return _clipped_surrogate(torch.exp(log_s), advantages.detach(), cliprange)  # (B, T), metadata


def compute_grpo_no_clip_loss(
    advantages: Tensor, policy_log_probs: Tensor, old_log_probs: Tensor
) -> tuple[Tensor, dict]:
    """The handout's unclipped ablation: -rho*A with rho = exp(logp - old_logp)."""
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())  # (B, T)
    return -ratio * advantages.detach(), {"ratio": ratio.detach()}  # (B, T)


def _require(name: str, value, loss_type: str):
    if value is None:
        raise ValueError(f"loss_type={loss_type!r} requires {name}")
    return value


def _no_baseline(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
    return compute_naive_policy_gradient_loss(_require("raw_rewards", raw_rewards, "no_baseline"), lp), {}


def _reinforce_with_baseline(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
    adv = _require("advantages", advantages, "reinforce_with_baseline")
    return compute_naive_policy_gradient_loss(adv, lp), {}


def _grpo_clip(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
    adv = _require("advantages", advantages, "grpo_clip")
    old = _require("old_log_probs", old_log_probs, "grpo_clip")
    return compute_grpo_clip_loss(adv, lp, old, _require("cliprange", cliprange, "grpo_clip"))


def _grpo_no_clip(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
    adv = _require("advantages", advantages, "grpo_no_clip")
    return compute_grpo_no_clip_loss(adv, lp, _require("old_log_probs", old_log_probs, "grpo_no_clip"))


def _gspo(lp, raw_rewards, advantages, old_log_probs, cliprange, mask):
    adv = _require("advantages", advantages, "gspo")
    old = _require("old_log_probs", old_log_probs, "gspo")
    return compute_gspo_loss(
        adv, lp, old, _require("cliprange", cliprange, "gspo"), _require("response_mask", mask, "gspo")
    )


ClipRange = float | tuple
PGLossFn = Callable[
    [Tensor, Tensor | None, Tensor | None, Tensor | None, ClipRange | None, Tensor | None], tuple[Tensor, dict]
]

# The policy-gradient losses by name: (log_probs, raw_rewards, advantages, old_log_probs, cliprange, response_mask) ->
# per-token loss (B, T) and metadata; `cliprange` is a float, or (eps_low, eps_high[, c]) when the two bounds differ
# (`grpo.cliprange_high`, GSPO's own range) or `grpo.clip_ratio_c` is set (GRPOConfig.clip_bounds). This table is the
# one list of loss names: `GRPOConfig.loss_type` is checked against it, and a loss in OFF_POLICY_LOSSES (one that needs
# the rollout policy's log-probs) may train off-policy.
PG_LOSSES: dict[str, PGLossFn] = {
    "no_baseline": _no_baseline,
    "reinforce_with_baseline": _reinforce_with_baseline,
    "grpo_clip": _grpo_clip,
    "grpo_no_clip": _grpo_no_clip,
    "gspo": _gspo,
}
OFF_POLICY_LOSSES: set[str] = {"grpo_clip", "grpo_no_clip", "gspo"}
CLIPPED_LOSSES: set[str] = {"grpo_clip", "gspo"}  # the losses that apply `cliprange` (clip-higher, dual-clip)
# each clipped loss's (eps_low, eps_high) when `grpo.cliprange` is null: GRPO-Clip's 0.2 (Shao et al., 2024; the
# handout's); GSPO's sequence-level ratio stays within a few 1e-4 of 1, so its paper clips at 3e-4 / 4e-4 (Zheng et
# al., 2025, section 5.1; TRL's GSPO recipe and verl's gspo example use the same)
DEFAULT_CLIPRANGE: dict[str, tuple[float, float]] = {"grpo_clip": (0.2, 0.2), "gspo": (3e-4, 4e-4)}


def register_pg_loss(name: str, fn: PGLossFn, *, off_policy: bool) -> None:
    """Add a policy-gradient loss under `name` (usable as `grpo.loss_type`); `off_policy`: it uses old log-probs."""
    if name in PG_LOSSES:
        raise ValueError(f"a policy-gradient loss named {name!r} already exists")
    PG_LOSSES[name] = fn
    if off_policy:
        OFF_POLICY_LOSSES.add(name)


def compute_policy_gradient_loss(
    policy_log_probs: Tensor,
    loss_type: str,
    raw_rewards: Tensor | None = None,
    advantages: Tensor | None = None,
    old_log_probs: Tensor | None = None,
    cliprange: ClipRange | None = None,
    response_mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token policy-gradient loss (B, T) for `loss_type`, looked up in `PG_LOSSES` (`response_mask`: for losses
    that reduce over a sequence, GSPO)."""
    if loss_type not in PG_LOSSES:
        raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {sorted(PG_LOSSES)}")
    return PG_LOSSES[loss_type](policy_log_probs, raw_rewards, advantages, old_log_probs, cliprange, response_mask)


def _norm_masked_mean(per_token: Tensor, mask: Tensor, constant: float | None) -> Tensor:
    """Per-sequence mean over its own tokens, then batch mean (the handout's GRPO; Shao et al., 2024)."""
    return masked_mean(per_token, mask, dim=-1).mean()


def _norm_masked_normalize(per_token: Tensor, mask: Tensor, constant: float | None) -> Tensor:
    """Per-sequence sum / a fixed constant, then batch mean (Dr. GRPO; Liu et al., 2025)."""
    if constant is None:
        raise ValueError("length_normalization='masked_normalize' requires normalize_constant (e.g. max tokens)")
    return masked_normalize(per_token, mask, constant, dim=-1).mean()


def _norm_token_mean(per_token: Tensor, mask: Tensor, constant: float | None) -> Tensor:
    """Sum over every response token of the micro-batch / their count (DAPO; Yu et al., 2025)."""
    return masked_mean(per_token, mask)


LENGTH_NORMALIZERS: dict[str, Callable[[Tensor, Tensor, float | None], Tensor]] = {
    "masked_mean": _norm_masked_mean,
    "masked_normalize": _norm_masked_normalize,
    "token_mean": _norm_token_mean,
}


def normalizer_units(length_normalization: str, response_mask: Tensor) -> int:
    """What a normalizer averages over in `response_mask` (B, T): response tokens for token_mean, else sequences.

    A micro-batch's `gradient_accumulation_steps` is the step's units over its own (a5core/model/microbatch.py: share),
    so the accumulated gradient is the optimizer step's mean whatever the split; dividing token_mean by each
    micro-batch's own token count instead would weight a token by the size of its micro-batch (trl#3231).
    """
    return int(response_mask.sum()) if length_normalization == "token_mean" else int(response_mask.shape[0])


def grpo_microbatch_train_step(
    policy_log_probs: Tensor,
    response_mask: Tensor,
    gradient_accumulation_steps: float,
    loss_type: str,
    raw_rewards: Tensor | None = None,
    advantages: Tensor | None = None,
    old_log_probs: Tensor | None = None,
    cliprange: ClipRange | None = None,
    length_normalization: str = "masked_mean",
    normalize_constant: float | None = None,
    pg_weight: Tensor | None = None,
    penalty: Tensor | None = None,
    sample_weight: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PG loss (* pg_weight) (+ penalty) (* sample_weight) -> length normalization -> / k -> backward.
    Returns the scaled loss and metadata.

    `gradient_accumulation_steps`: the handout's k, or (a5's loops) the step's normalizer units over this
    micro-batch's (`normalizer_units`), which is k for an even split and keeps any other split exact.
    `pg_weight` (B, T): a constant weight per token on the PG loss only (truncated importance sampling);
    `penalty` (B, T): per-token terms added to the PG loss (beta * KL, -coef * entropy; see rl_options);
    `sample_weight` (B, 1): a weight per rollout on its whole per-token loss (0 masks a truncated rollout out; its
    tokens still count in this micro-batch's normalizer, which keeps every normalizer defined, and the loop's
    `gradient_accumulation_steps` share, counted over kept rollouts only, cancels it: DAPO's drop from the loss and
    its count; a5core/rl/grpo_update.py). None (the default) skips each.
    Metadata adds `clip_fraction` (share of response tokens whose clipped side was the smaller; 0 for
    losses without clipping).
    """
    _check_mask(response_mask)
    if length_normalization not in LENGTH_NORMALIZERS:
        raise ValueError(
            f"unknown length_normalization {length_normalization!r}; choose one of {sorted(LENGTH_NORMALIZERS)}"
        )
    per_token, meta = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange, response_mask
    )  # (B, T)
    if pg_weight is not None:
        per_token = per_token * pg_weight  # (B, T)
    if penalty is not None:
        per_token = per_token + penalty  # (B, T)
    if sample_weight is not None:
        per_token = per_token * sample_weight  # (B, T)
    loss = LENGTH_NORMALIZERS[length_normalization](per_token, response_mask, normalize_constant)
    loss = loss / gradient_accumulation_steps  # ()
    loss.backward()
    return loss.detach(), _with_clip_fractions(meta, response_mask)


def _with_clip_fractions(meta: dict[str, Tensor], response_mask: Tensor) -> dict[str, Tensor]:
    """`meta` with `clip_fraction` (and `dual_clip_fraction` where the loss dual-clips): the share of response tokens
    whose clipped side was the smaller; 0 for losses without clipping."""
    if "clipped" in meta:
        meta["clip_fraction"] = masked_mean(meta["clipped"].float(), response_mask)  # ()
        if "dual_clipped" in meta:
            meta["dual_clip_fraction"] = masked_mean(meta["dual_clipped"].float(), response_mask)  # ()
    else:
        meta["clip_fraction"] = torch.zeros(())
    return meta
