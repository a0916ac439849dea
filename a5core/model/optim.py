"""Optimizer and learning-rate schedule shared by the SFT, EI and GRPO loops.

How AdamW writes its update into bfloat16 weights is a setting, `model.weight_update` (reports/precision.md has the
measurement behind the choices):
- `nearest`: torch's AdamW; the new weight is rounded to the nearest bf16. A step smaller than half a bf16 ulp of
  the weight is lost: at lr 1e-5 an RMSNorm weight of 1.0 (ulp 2^-7) never moves.
- `stochastic_round`: torchao's AdamW with `bf16_stochastic_round=True`: the update is computed in float32 and
  rounded up or down with the probabilities that make it exact in expectation. Same memory as `nearest`.
- `kahan`: AdamW with Kahan summation (`KahanAdamW` below): a bf16 buffer per weight keeps what rounding dropped and
  adds it back at the next step, so the bf16 weights follow float32 AdamW's. Costs 2 bytes per parameter.
float32 weights (`model.dtype: float32`, with bf16 autocast on GPU) take `nearest`: their updates are exact.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

WeightUpdate = Literal["nearest", "stochastic_round", "kahan"]


def make_optimizer(
    model,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    update: WeightUpdate = "nearest",
):
    """AdamW over `model`'s parameters with the weight update `update` (a stage's: its `Compute.weight_update`)."""
    if update not in WeightUpdate.__args__:
        raise ValueError(f"weight update {update!r} is not one of {list(WeightUpdate.__args__)}")
    every = list(model.parameters())
    params, betas = [p for p in every if p.requires_grad], tuple(betas)  # LoRA: the adapters only
    if len(params) < len(every) and all(p.dtype == torch.float32 for p in params):
        update = "nearest"  # LoRA's float32 adapters beside frozen bf16 weights: their updates are exact
    if update != "nearest" and any(p.dtype != torch.bfloat16 for p in params):
        raise ValueError(f"weight update {update!r} is for bfloat16 weights; float32 weights take 'nearest'")
    if update == "stochastic_round":
        from torchao.optim import _AdamW  # torchao's AdamW: its public name in torchao 0.18 is `_AdamW`

        return _AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, bf16_stochastic_round=True)
    if update == "kahan":
        return KahanAdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)


class KahanAdamW(torch.optim.Optimizer):
    """AdamW computed in float32 for weights of any dtype, with Kahan-compensated writes into them.

    Per weight: the moments (in the weight's dtype, as torch's AdamW keeps them) and `compensation`, the part of the
    past updates that rounding to the weight's dtype dropped. Each step adds update + compensation to the weight
    and keeps what the rounded result still misses. Decoupled weight decay as in torch.optim.AdamW.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamW settings: lr {lr}, betas {betas}, eps {eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, self.state[p], group)
        return loss

    @staticmethod
    def _update(p: torch.Tensor, state: dict, group: dict) -> None:
        if not state:
            state["step"] = 0
            for name in ("exp_avg", "exp_avg_sq", "compensation"):
                state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        (beta1, beta2), lr, step = group["betas"], group["lr"], state["step"]
        grad, weight = p.grad.float(), p.float()
        exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].float().lerp_(grad.square(), 1 - beta2)
        state["exp_avg"].copy_(exp_avg)
        state["exp_avg_sq"].copy_(exp_avg_sq)
        denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
        delta = exp_avg.div_(denom).mul_(-lr / (1 - beta1**step))  # (the float32 copy of exp_avg is done with)
        delta.sub_(weight, alpha=lr * group["weight_decay"])
        delta.add_(state["compensation"].float())  # the updates rounding dropped so far
        p.copy_(weight + delta)  # rounded to p's dtype
        state["compensation"].copy_(delta - (p.float() - weight))  # what the rounded weight still misses


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
