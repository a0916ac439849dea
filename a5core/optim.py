"""Optimizer and learning-rate schedule shared by the SFT, EI and GRPO loops."""

from __future__ import annotations

import math

import torch


def make_optimizer(model, lr: float, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999)):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=tuple(betas))


def make_schedule(optimizer, total_steps: int, warmup_steps: int = 0, kind: str = "constant"):
    """Linear warm-up, then constant or cosine decay to 10% of the peak."""

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if kind == "cosine" and total_steps > warmup_steps:
            progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
