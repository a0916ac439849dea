"""Pre-flight: refuse, before any model is fetched or loaded, a profile this machine cannot run.

`problems(params, machine)` is pure: it takes the params and a `Machine` of facts, so every refusal is tested on a
CPU. `machine()` gathers the facts (torch's view of CUDA, `nvidia-smi`'s driver, memory and compute capability) and
`check(params_path)` is what every stage runs first (a5core/stage/entry.py `args`). A profile that says it needs CUDA
(`model.device: cuda`, as `full` does) is refused where CUDA is unusable, never run on the CPU instead; `two_gpu`
with vLLM needs two visible GPUs; bf16 needs compute capability 8.0; the memory plan (a5core/run/plan.py) must fit the
visible card, the `one_gpu` engine share included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from a5core.base.typed import read_params
from a5core.run import plan

# CUDA 13.0's minimum Linux driver (NVIDIA's CUDA 13.0 release notes); requirements/gpu.lock pins a CUDA 13.0 torch
MIN_DRIVER = (580, 65)
BF16_CAPABILITY = (8, 0)  # bf16 tensor cores start at Ampere (sm_80)
FIX = (
    "Install the GPU stack of docs/full-scale.md (requirements/gpu.lock, CUDA 13.0, NVIDIA driver "
    ">= 580.65) on a machine with NVIDIA GPUs, or run a CPU profile (python -m tools.profile full-mini)."
)


@dataclass(frozen=True)
class Machine:
    """What the checks need to know about this machine."""

    cuda_available: bool  # torch.cuda.is_available()
    device_count: int  # GPUs torch sees (CUDA_VISIBLE_DEVICES applied)
    torch_version: str  # torch.__version__
    torch_cuda: str | None  # the CUDA version torch was built for (None: a CPU build)
    driver: str | None  # nvidia-smi's driver version (None: no nvidia-smi, or it failed)
    gpu_gb: float | None = None  # total memory of the first visible GPU in GiB (nvidia-smi)
    capability: tuple[int, int] | None = None  # compute capability of the first visible GPU (nvidia-smi)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def cuda_problems(machine: Machine) -> list[str]:
    """Why CUDA is unusable here (empty when it is usable)."""
    if machine.cuda_available and machine.device_count > 0:
        return []
    found = []
    if machine.torch_cuda is None:
        found.append(f"torch {machine.torch_version} is a CPU build (torch.version.cuda is None)")
    if machine.driver is None:
        found.append("no NVIDIA driver: nvidia-smi is missing or failed")
    elif _version(machine.driver)[:2] < MIN_DRIVER:
        found.append(f"NVIDIA driver {machine.driver} is older than CUDA 13.0's minimum 580.65")
    if not found:
        found.append(
            f"torch.cuda.is_available() is False with driver {machine.driver} and torch {machine.torch_version} "
            f"(CUDA {machine.torch_cuda}); check CUDA_VISIBLE_DEVICES and `nvidia-smi`"
        )
    return found


def problems(params: dict, machine: Machine) -> list[str]:
    """Every reason this machine cannot run these params' GPU settings (empty: go on)."""
    model, gen = params.get("model") or {}, params.get("generation") or {}
    if model.get("device", "auto") != "cuda":
        return []  # auto: CUDA when present, the CPU otherwise (the CPU profiles)
    missing = cuda_problems(machine)
    if missing:
        need = f"model.device is cuda ({gen.get('backend', 'hf')} backend, {model.get('dtype')} weights)"
        return [f"{need} but CUDA is unusable here: " + "; ".join(missing) + ". " + FIX]
    found = []
    if gen.get("backend") == "vllm" and gen.get("layout") == "two_gpu" and machine.device_count < 2:
        found.append(
            f"generation.layout two_gpu needs two visible GPUs, {machine.device_count} found: use "
            "-S generation.layout=one_gpu -S generation.gpu_memory_utilization=0.3, or make a second GPU visible "
            "(CUDA_VISIBLE_DEVICES)"
        )
    if model.get("dtype") == "bfloat16" and machine.capability and machine.capability < BF16_CAPABILITY:
        found.append(
            f"bfloat16 needs compute capability 8.0 (Ampere) or newer; this GPU has "
            f"{machine.capability[0]}.{machine.capability[1]}: use a newer GPU"
        )
    return found


def _nvidia_smi() -> list[list[str]]:
    """One row (driver, MiB, compute capability) per GPU, [] without a working nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=driver_version,memory.total,compute_cap", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def machine() -> Machine:
    """This machine's facts. torch.cuda.is_available and device_count do not create a CUDA context (so vLLM can
    still fork its workers); memory and capability come from nvidia-smi for the same reason."""
    import torch

    rows = _nvidia_smi()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    first = rows[int(visible)] if visible.isdigit() and int(visible) < len(rows) else (rows[0] if rows else None)
    gpu_gb = capability = None
    if first and len(first) == 3:
        try:
            gpu_gb = float(first[1]) / 1024
            major, minor = first[2].split(".")
            capability = (int(major), int(minor))
        except ValueError:
            pass  # a field nvidia-smi reports as [N/A]: that check is skipped
    return Machine(
        torch.cuda.is_available(),
        torch.cuda.device_count(),
        torch.__version__,
        torch.version.cuda,
        first[0] if first else None,
        gpu_gb,
        capability,
    )


def plan_problems(params_path: str, machine: Machine, model_dir: str = "models/base") -> list[str]:
    """The memory plan on this machine's card (a CUDA run only; the engine's share, the policy's resident tensors
    and the CUDA context on one card for one_gpu); empty when it fits or the model's architecture is not known yet
    (the training stages plan again once the model is fetched)."""
    if not (machine.cuda_available and machine.gpu_gb):
        return []
    try:
        lines, fits, _ = plan.report(params_path, machine.gpu_gb, model_dir)
    except SystemExit:
        return []
    return [] if fits else ["the memory plan does not fit this GPU:\n" + "\n".join(lines)]


def check(params_path: str = "params.yaml") -> None:
    """Exit with every problem before any work when this machine cannot run the params' GPU settings."""
    params = read_params(params_path)
    model = params.get("model")
    if not isinstance(model, dict) or model.get("device", "auto") != "cuda":
        return  # the CPU profiles (or a malformed model section, which check_params reports): nothing to gather
    facts = machine()
    try:
        found = problems(params, facts)
    except (AttributeError, TypeError, ValueError):
        return  # a malformed section: check_params, which runs next, lists it
    found = found or plan_problems(params_path, facts)
    if found:
        listed = found[0] if len(found) == 1 else f"{len(found)} problems:\n  - " + "\n  - ".join(found)
        raise SystemExit(f"error: {listed}\nNothing was run.")
