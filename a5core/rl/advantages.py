"""Advantages from outcome rewards: GRPO's group normalization (Shao et al., 2024, DeepSeekMath) and the estimators
`grpo.advantage_estimator` selects from `ADVANTAGE_ESTIMATORS` (one small function each, checked against verl's
verl/trainer/ppo/core_algos.py). Shapes: N = rollouts, groups of `group_size` consecutive rollouts."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def group_normalize(
    raw_rewards: Tensor, group_size: int, advantage_eps: float, normalize_by_std: bool, std_ddof: int = 1
) -> tuple[Tensor, dict[str, float]]:
    """A_i = (r_i - mean_group) / (std_group + eps), or r_i - mean_group without std normalization.

    `std_ddof=1` is torch's unbiased std (what the handout's tests pin); `std_ddof=0` the population std.
    Consecutive blocks of `group_size` rollouts form a group.
    """
    if raw_rewards.numel() % group_size != 0:
        raise ValueError(f"{raw_rewards.numel()} rewards do not split into groups of {group_size}")
    if std_ddof not in (0, 1):
        raise ValueError(f"std_ddof must be 0 or 1, got {std_ddof}")
    grouped = raw_rewards.view(-1, group_size).float()  # (G, n)
    centered = grouped - grouped.mean(dim=1, keepdim=True)  # (G, n)
    if normalize_by_std:
        std = grouped.std(dim=1, keepdim=True, unbiased=bool(std_ddof))  # (G, 1)
        centered = centered / (std + advantage_eps)  # (G, n)
    all_equal = (grouped.max(dim=1).values == grouped.min(dim=1).values).float()  # (G,)
    return centered.flatten(), {"frac_groups_all_equal": float(all_equal.mean())}  # (N,)


def rloo(raw: Tensor, group_size: int, lengths: Tensor, cfg) -> tuple[Tensor, dict[str, float]]:
    """RLOO's leave-one-out baseline (Ahmadian et al., 2024, arXiv:2402.14740): A_i = r_i - mean of the group's
    other rewards = n / (n - 1) * (r_i - group mean); no std. As verl's compute_rloo_outcome_advantage."""
    grouped = raw.view(-1, group_size).float()  # (G, n)
    adv = (grouped - grouped.mean(dim=1, keepdim=True)) * group_size / (group_size - 1)  # (G, n)
    return adv.flatten(), _all_equal(grouped)  # (N,)


def _whiten_tokens(values: Tensor, lengths: Tensor) -> Tensor:
    """(values - mean) / sqrt(var + 1e-8) over the batch's response tokens: each rollout's value counts once per
    token (verl's masked_whiten over a (N, T) tensor holding each rollout's value at its tokens; unbiased var)."""
    w = lengths.float()  # (N,)
    n = w.sum()
    mean = (values * w).sum() / n
    var = ((values - mean) ** 2 * w).sum() / n * n / (n - 1).clamp(min=1)
    return (values - mean) * torch.rsqrt(var + 1e-8)  # (N,)


def reinforce_pp(raw: Tensor, group_size: int, lengths: Tensor, cfg) -> tuple[Tensor, dict[str, float]]:
    """REINFORCE++ (Hu, 2025, arXiv:2501.03262) for an outcome reward with gamma = 1: every response token's return
    is the reward, whitened over the batch's tokens (no group baseline). As verl's
    compute_reinforce_plus_plus_outcome_advantage."""
    grouped = raw.view(-1, group_size).float()  # (G, n)
    return _whiten_tokens(raw.float(), lengths), _all_equal(grouped)  # (N,)


def reinforce_pp_baseline(raw: Tensor, group_size: int, lengths: Tensor, cfg) -> tuple[Tensor, dict[str, float]]:
    """REINFORCE++-baseline (Hu, 2025): the group mean subtracted, then whitened over the batch's tokens. As verl's
    compute_reinforce_plus_plus_baseline_outcome_advantage."""
    grouped = raw.view(-1, group_size).float()  # (G, n)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()  # (N,)
    return _whiten_tokens(centered, lengths), _all_equal(grouped)  # (N,)


def reinforce_pp_token_advantages(task_rewards: Tensor, penalties: list[Tensor]) -> list[Tensor]:
    """REINFORCE++ with token-level rewards (Hu, 2025, arXiv:2501.03262, section 3; verl's
    compute_reinforce_plus_plus_outcome_advantage with gamma 1): token t's reward is -penalties_t (beta * KL with
    `grpo.kl_in_reward`) and the last token's adds the task reward; each token's advantage is its return-to-go (the
    rewards from it to the end) whitened over the batch's response tokens (mean, unbiased variance, eps 1e-8).
    task_rewards (N,), penalties (O_i,) each -> advantages (O_i,) each."""
    returns = []
    for reward, penalty in zip(task_rewards.float(), penalties):
        rewards = -penalty.float()  # (O,)
        rewards = torch.cat([rewards[:-1], rewards[-1:] + reward])  # (O,): the outcome at the last token
        returns.append(rewards.flip(0).cumsum(0).flip(0))  # (O,) return-to-go
    flat = torch.cat(returns)  # (sum O,)
    n = flat.numel()
    mean = flat.mean()
    var = ((flat - mean) ** 2).sum() / max(n - 1, 1)
    return [(r - mean) * torch.rsqrt(var + 1e-8) for r in returns]  # (O_i,) each


def grpo(raw: Tensor, group_size: int, lengths: Tensor, cfg) -> tuple[Tensor, dict[str, float]]:
    """The handout's group normalization (`group_normalize`) with the run's eps, std and ddof settings."""
    return group_normalize(raw, group_size, cfg.advantage_eps, cfg.use_std_normalization, cfg.std_ddof)


def _all_equal(grouped: Tensor) -> dict[str, float]:
    all_equal = (grouped.max(dim=1).values == grouped.min(dim=1).values).float()  # (G,)
    return {"frac_groups_all_equal": float(all_equal.mean())}


# The advantage estimators by name (`grpo.advantage_estimator`): (raw rewards (N,), group_size, response lengths (N,),
# the GRPO config) -> advantages (N,) and metadata.
ADVANTAGE_ESTIMATORS: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "grpo": grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, object], dict[str, float]],
    rollout_responses: list[str],
    repeated_ground_truths: list,
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
    std_ddof: int = 1,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Grade each rollout with `reward_fn`, then group-normalize. Returns (advantages, raw_rewards, metadata)."""
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError("rollout_responses and repeated_ground_truths differ in length")
    scores = [reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths)]
    raw = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)  # (N,)
    advantages, meta = group_normalize(raw, group_size, advantage_eps, normalize_by_std, std_ddof)  # (N,)
    meta.update(reward_stats(raw, scores))
    return advantages, raw, meta


def reward_stats(raw: Tensor, scores: list[dict[str, float]]) -> dict[str, float]:
    """Summary statistics of a batch of rewards, for logging."""
    n = max(len(scores), 1)
    return {
        "reward_mean": float(raw.mean()),
        "reward_std": float(raw.std()) if raw.numel() > 1 else 0.0,
        "reward_min": float(raw.min()),
        "reward_max": float(raw.max()),
        "format_reward_mean": sum(s["format_reward"] for s in scores) / n,
        "answer_reward_mean": sum(s["answer_reward"] for s in scores) / n,
    }
