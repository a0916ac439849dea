"""bf16 autocast for float32 weights: a setting (`model.autocast`), resolved once per stage and recorded.

- `auto`: on CUDA, and on CPUs with native bf16 matmul (`amx_bf16` or `avx512_bf16` in /proc/cpuinfo); off
  elsewhere (AVX2-only CPUs emulate bf16 GEMMs, slower than float32). This was the only behaviour before the
  setting existed, so the same profile gave different numbers on different CPUs without saying so.
- `off`: float32 everywhere (bit-identical runs on one machine kind; the default, smoke and CPU-study profiles).
- `bf16`: always on, also where it is slow: how CI exercises on an AVX2 machine what AMX/AVX512-BF16 machines run.
- Weights already in bf16 (the full profile's policy) never get autocast: every matmul is bf16 already.
The stage calls `configure` once; the mode in force goes to the console and to every run record (run_record.py).
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

from a5core.base import run_record
from a5core.base.run_record import cpu_flags

Mode = Literal["auto", "off", "bf16"]
FAST_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
_configured: dict | None = None  # the stage's resolved setting (configure); None: library use, `auto`


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


def configure(mode: Mode, device: torch.device | str = "cpu", *, weights: str = "float32", quiet: bool = False) -> dict:
    """Set the mode for this process (once per stage, before any model runs) for a policy of `weights` dtype; print
    and return what is in force."""
    global _configured
    device_type = torch.device(device).type
    on, why = resolve(mode, device_type, cpu_flags(), weights)
    _configured = {"mode": mode, "device": device_type, "bf16_autocast": on, "decided_by": why}
    run_record.note(autocast=dict(_configured))
    if not quiet:
        print(f"autocast: bf16 {'on' if on else 'off'} for float32 weights on {device_type} ({why})", flush=True)
    return dict(_configured)


def reset() -> None:
    """Back to the library default (`auto`, unconfigured)."""
    global _configured
    _configured = None


def in_force() -> dict:
    """The resolved setting as configured for this stage (or the `auto` default on the CPU, unconfigured)."""
    if _configured is not None:
        return dict(_configured)
    on, why = resolve("auto", "cpu", cpu_flags())
    return {"mode": "auto", "device": "cpu", "bf16_autocast": on, "decided_by": why, "configured": False}


def enabled(device_type: str) -> bool:
    mode = _configured["mode"] if _configured is not None else "auto"
    return resolve(mode, device_type, cpu_flags())[0]


def autocast_context(model, dtype_pref: str = "auto"):
    """bf16 autocast for a model with float32 weights when the setting in force says so for its device (`dtype_pref`
    "bfloat16" / "float32", the hf backend's `generation.dtype`, forces it on / off); a no-op for bf16 weights."""
    params = list(model.parameters())
    if not any(p.dtype == torch.float32 for p in params):
        return contextlib.nullcontext()
    device = params[0].device
    use = dtype_pref == "bfloat16" or (dtype_pref == "auto" and enabled(device.type))
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use)
