"""Pre-flight: refuse, before any model is fetched or loaded, a profile this machine cannot run.

`problems(params, machine)` is pure: it takes the params and a `Machine` of facts, so every refusal is tested on a
CPU. `machine()` gathers the facts (torch's view of CUDA, `nvidia-smi`'s driver, memory and compute capability) and
`check(params_path)` is what every stage runs first (a5core/stage/entry.py `args`). A profile that says it needs CUDA
(`model.device: cuda`, as `full` does) is refused where CUDA is unusable, never run on the CPU instead; `two_gpu`
with vLLM needs two visible GPUs; bf16 needs compute capability 8.0 on every GPU the layout uses (the policy's and, for
`two_gpu`, the engine's); the memory plan (a5core/run/plan.py) must fit the smallest of them, the `one_gpu` engine
share included. Every stage also refuses a DVC `cache.type` that links outputs to the cache (`cache_link_problem`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from dvc.config import Config

from a5core.base.typed import read_params
from a5core.config.sections import engine_gpu
from a5core.run import plan

# CUDA 13.0's minimum Linux driver (NVIDIA's CUDA 13.0 release notes); requirements/gpu.lock pins a CUDA 13.0 torch
MIN_DRIVER = (580, 65)
BF16_CAPABILITY = (8, 0)  # bf16 tensor cores start at Ampere (sm_80)
FIX = (
    "Install the GPU stack of docs/full-scale.md (requirements/gpu.lock, CUDA 13.0, NVIDIA driver "
    ">= 580.65) on a machine with NVIDIA GPUs, or run a CPU profile (python -m tools.profile full-mini)."
)


@dataclass(frozen=True)
class Gpu:
    """One visible GPU, as nvidia-smi reports it."""

    gb: float | None  # total memory in GiB (None: nvidia-smi said [N/A])
    capability: tuple[int, int] | None  # compute capability


@dataclass(frozen=True)
class Machine:
    """What the checks need to know about this machine."""

    cuda_available: bool  # torch.cuda.is_available()
    device_count: int  # GPUs torch sees (CUDA_VISIBLE_DEVICES applied)
    torch_version: str  # torch.__version__
    torch_cuda: str | None  # the CUDA version torch was built for (None: a CPU build)
    driver: str | None  # nvidia-smi's driver version (None: no nvidia-smi, or it failed)
    gpus: tuple[Gpu, ...] = ()  # the visible GPUs in CUDA's order (CUDA_VISIBLE_DEVICES applied, PCI bus order)


def used_gpus(params: dict, machine: Machine) -> tuple[Gpu, ...]:
    """The visible GPUs a run of these params uses: one per rank of a node (cuda:<local rank>), and the engine's
    second one for vLLM's two_gpu (one rank)."""
    gen, dist = params.get("generation") or {}, params.get("distributed") or {}
    two_gpu = engine_gpu(gen.get("backend", "hf"), gen.get("layout"))
    return machine.gpus[: max(int(dist.get("nproc", 1)), 2 if two_gpu else 1)]


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
    if engine_gpu(gen.get("backend", "hf"), gen.get("layout")) and machine.device_count < 2:
        found.append(
            f"generation.layout two_gpu needs two visible GPUs, {machine.device_count} found: use "
            "-S generation.layout=one_gpu -S generation.gpu_memory_utilization=0.3, or make a second GPU visible "
            "(CUDA_VISIBLE_DEVICES)"
        )
    nproc = int((params.get("distributed") or {}).get("nproc", 1))
    if nproc > machine.device_count:
        found.append(
            f"distributed.nproc {nproc} needs one visible GPU per rank of a node, {machine.device_count} found: set "
            f"-S distributed.nproc={machine.device_count}, or make more GPUs visible (CUDA_VISIBLE_DEVICES)"
        )
    old = [(i, g.capability) for i, g in enumerate(used_gpus(params, machine)) if g.capability]
    old = [(i, c) for i, c in old if c < BF16_CAPABILITY]
    if model.get("dtype") == "bfloat16" and old:
        has = ", ".join(f"GPU {i} has {c[0]}.{c[1]}" for i, c in old)
        found.append(f"bfloat16 needs compute capability 8.0 (Ampere) or newer; {has}: use a newer GPU")
    return found


def _nvidia_smi() -> list[list[str]]:
    """One row (uuid, driver, MiB, compute capability) per GPU in PCI bus order, [] without a working nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=uuid,driver_version,memory.total,compute_cap", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def visible_rows(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """nvidia-smi's rows of the GPUs CUDA_VISIBLE_DEVICES makes visible, in its order: indices (nvidia-smi's, which are
    CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID) or UUIDs (GPU-..., a prefix is enough; a MIG-... slice is listed
    without facts); like CUDA, the list ends at the first entry that names no GPU."""
    if visible is None:
        return rows
    out = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.startswith("MIG-"):  # a MIG slice: nvidia-smi's GPU rows do not describe it (checks skipped)
            out.append([entry])
            continue
        match = [r for r in rows if entry.startswith("GPU-") and r[0].startswith(entry)]
        if entry.isdigit() and int(entry) < len(rows):
            match = [rows[int(entry)]]
        if not match:
            break
        out.append(match[0])
    return out


def _gpu(row: list[str]) -> Gpu:
    try:
        major, minor = row[3].split(".")
        return Gpu(float(row[2]) / 1024, (int(major), int(minor)))
    except (ValueError, IndexError):
        return Gpu(None, None)  # a field nvidia-smi reports as [N/A]: that check is skipped


def machine() -> Machine:
    """This machine's facts. torch.cuda.is_available and device_count do not create a CUDA context (so vLLM can
    still fork its workers); memory and capability come from nvidia-smi for the same reason. CUDA's own device order
    is fastest first; CUDA_DEVICE_ORDER=PCI_BUS_ID (set here unless the environment says otherwise, before CUDA
    starts in this process) makes it nvidia-smi's, so cuda:N and the row checked here are one card."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    import torch

    rows = _nvidia_smi()
    return Machine(
        torch.cuda.is_available(),
        torch.cuda.device_count(),
        torch.__version__,
        torch.version.cuda,
        rows[0][1] if rows and len(rows[0]) > 1 else None,
        tuple(_gpu(r) for r in visible_rows(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))),
    )


def plan_problems(params_path: str, machine: Machine, model_dir: str = "models/base") -> list[str]:
    """The memory plan on this machine's card (a CUDA run only; the engine's share, the policy's resident tensors
    and the CUDA context on one card for one_gpu); empty when it fits or the model's architecture is not known yet
    (the training stages plan again once the model is fetched)."""
    sizes = [g.gb for g in used_gpus(read_params(params_path), machine) if g.gb]
    if not (machine.cuda_available and sizes):
        return []
    try:
        lines, fits, _ = plan.report(params_path, min(sizes), model_dir)  # on the smallest card the layout uses
    except SystemExit:
        return []
    return [] if fits else ["the memory plan does not fit this GPU:\n" + "\n".join(lines)]


# DVC's link types that make a workspace output and its cache object one file: a write in place changes the object
LINKED = {"hardlink": "a hard link is the cache object itself", "symlink": "a symbolic link points at the cache object"}


def cache_link_problem(cache_types: list[str] | str | None) -> str | None:
    """Why DVC's configured `cache.type` (its list, as DVC's config holds it; None: DVC's default `reflink,copy`)
    is unsafe for a5's outputs, or None when it is safe (copy, reflink: an output written in place is its own file)."""
    types = [cache_types] if isinstance(cache_types, str) else list(cache_types or [])
    linked = [t for t in types if t in LINKED]
    if not linked:
        return None
    return (
        f"DVC's cache.type {','.join(types)} links outputs to the cache ({LINKED[linked[0]]}): an output changed in "
        "place (a truncated Parquet file, a model overwritten) would change the cached object under its md5, and "
        "every experiment or clone that restores it would get other bytes (reports/inplace_outputs.md). Set "
        "`dvc config cache.type reflink,copy` (a5's default; `--local`/`--global` wherever it was set)"
    )


def check(params_path: str = "params.yaml") -> None:
    """Exit with every problem before any work: a DVC cache that links outputs (`cache_link_problem`), or GPU
    settings this machine cannot run."""
    problem = cache_link_problem(Config.from_cwd().get("cache", {}).get("type"))
    if problem:
        raise SystemExit(f"error: {problem}\nNothing was run.")
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
