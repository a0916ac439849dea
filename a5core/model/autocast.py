"""bf16 autocast for float32 weights: a setting (`model.autocast`), resolved once per stage and recorded; and the hf
backend's generation precision (`generation.dtype`), resolved beside it.

- `auto`: on CUDA, and on CPUs with native bf16 matmul (`amx_bf16` or `avx512_bf16` in /proc/cpuinfo); off
  elsewhere (AVX2-only CPUs emulate bf16 GEMMs, slower than float32). The default profile's: on an AVX512-BF16 CPU
  the GRPO update ran 1.2-1.6x faster and the run still learned (reports/grpo_sweep.md).
- `off`: float32 training and log-probs (the smoke, quick and CPU-study profiles, whose reports were made so).
  Every mode is bit-identical on reruns on one machine kind.
- `bf16`: always on, also where it is slow: how CI exercises on an AVX2 machine what AMX/AVX512-BF16 machines run.
- Weights already in bf16 (the full profile's policy) never get autocast: every matmul is bf16 already.
- Generation never runs under autocast (it recast every weight at every decode step: slower than float32 here).
  `generation.dtype` auto generates float32 weights from a bf16 copy on CUDA and in float32 on a CPU; bfloat16 /
  float32 force it; bf16 weights generate as they are (no copy).
The stage resolves both once (`resolved`, into its `Compute` record, a5core/model/compute.py); what is in force goes to
the console and to the stage's run record (run_record.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import torch

from a5core.base.run_record import cpu_flags

Mode = Literal["auto", "off", "bf16"]
FAST_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class Autocast:
    """The setting as resolved for a stage (`resolved`); the default is library use: float32."""

    mode: str = "off"  # model.autocast
    device: str = "cpu"  # the device type it was resolved for
    bf16_autocast: bool = False  # bf16 autocast on for the policy's weights (its dtype's): the run's numerics record
    decided_by: str = "library default: off"  # why, in words (console and run record)
    on_float32: bool = False  # the mode as for float32 weights: what a model's float32 parameters run under (LoRA's
    # float32 adapters beside bf16 weights too); `autocast_context` is a no-op for a model without float32 parameters
    generation_bf16: bool = False  # the hf backend generates from a bf16 copy of the float32 weights (generation.dtype)
    generation_decided_by: str = "library default: float32"  # why, in words (console and run record)


def resolve(
    mode: Mode, device_type: str, flags: frozenset[str] | set[str], weights: str = "float32"
) -> tuple[bool, str]:
    """(autocast on?, why) for a mode on a device of `device_type` whose CPU has `flags`, for `weights` (the
    model.dtype). Pure."""
    if weights != "float32":
        return False, f"{weights} weights: every matmul is {weights} already"
    if mode == "off":
        return False, "model.autocast: off"
    if mode == "bf16":
        return True, "model.autocast: bf16"
    if device_type == "cuda":
        return True, "auto: CUDA"
    fast = sorted(set(FAST_BF16_FLAGS) & set(flags))
    if fast:
        return True, f"auto: the CPU has {', '.join(fast)}"
    return False, f"auto: the CPU has neither {' nor '.join(FAST_BF16_FLAGS)}"


def resolve_generation(dtype: str, device_type: str, weights: str = "float32") -> tuple[bool, str]:
    """(does the hf backend generate from a bf16 copy?, why) for `generation.dtype` on a device of `device_type`, for
    `weights` (the model.dtype). auto: bf16 on CUDA; float32 on every CPU, also those with fast bf16: there the copy
    generated GRPO's rollouts 1.2x faster in the real stage, and the default GRPO run trained on them lost its gain
    (reports/grpo_sweep.md#bf16-generation). Pure."""
    if weights != "float32":
        return False, f"{weights} weights: generation is {weights} already"
    if dtype == "float32":
        return False, "generation.dtype: float32"
    if dtype == "bfloat16":
        return True, "generation.dtype: bfloat16"
    if device_type == "cuda":
        return True, "auto: CUDA"
    return False, "auto: float32 on a CPU (bf16 rollouts: reports/grpo_sweep.md#bf16-generation)"


def resolved(
    mode: Mode,
    device: torch.device | str = "cpu",
    *,
    weights: str = "float32",
    generation: str = "float32",
    quiet: bool = False,
) -> Autocast:
    """The stage's setting, resolved once (before any model runs) for a policy of `weights` dtype on `device`, with
    `generation` the hf backend's generation.dtype (float32 for a vLLM engine, which has its own); printed (unless
    `quiet`) and returned, to travel in the stage's `Compute` record and its run record."""
    device_type = torch.device(device).type
    on, why = resolve(mode, device_type, cpu_flags(), weights)
    on_float32, _ = resolve(mode, device_type, cpu_flags())
    gen, gen_why = resolve_generation(generation, device_type, weights)
    if not quiet:
        print(f"autocast: bf16 {'on' if on else 'off'} for float32 weights on {device_type} ({why})", flush=True)
        if gen:
            print(f"generation: from a bf16 copy of the float32 weights ({gen_why})", flush=True)
    return Autocast(mode, device_type, on, why, on_float32, gen, gen_why)


def autocast_context(model, on: bool):
    """bf16 autocast for a model with float32 parameters when `on` (the stage's `Autocast.on_float32`); a no-op for bf16
    weights. Training and log-probs only: the hf backend generates from a bf16 copy (a5core/generation/hf.py)."""
    params = list(model.parameters())
    if not any(p.dtype == torch.float32 for p in params):
        return contextlib.nullcontext()
    return torch.autocast(device_type=params[0].device.type, dtype=torch.bfloat16, enabled=on)
