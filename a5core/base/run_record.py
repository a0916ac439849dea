"""The volatile facts of one stage run, kept out of every file a later stage hashes.

- `run_record.json` in the stage's run-record folder (dvc.yaml's `--record`, `run_records/<family>/<run>`): the
  commit (`+dirty` with uncommitted edits), when it finished, the host, the CPU kind and the ISA flags that decide
  bf16 autocast, the autocast in force, torch's version and threads, and durations; training stages put their
  per-step timings there too (`timing_<kind>.csv`, a5core/run/history.py). The folder is a cached DVC output of its
  stage, so a stage restored from DVC's run cache brings back the record of the run that made its outputs; no stage
  depends on it (the plots stage reads it without hashing it), so a rerun that writes the same artifacts with a new
  commit or time invalidates nothing downstream.
- The artifacts themselves keep only what is a function of the stage's inputs (`a5core.base.artifacts.provenance`).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RECORD_FILE = "run_record.json"
STARTED = time.monotonic()  # when this process imported a5core: a stage's duration counts from here
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "sve", "bf16")


def code_revision() -> str:
    """The commit the code was run at, `+dirty` when tracked files have edits; "unknown" outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (`/proc/cpuinfo`; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("model name", "Model", "CPU part"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What kind of machine ran the stage: enough to tell whether two runs can be bit-identical."""
    import torch

    cuda = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "host": platform.node(),
        "arch": platform.machine(),
        "cpu": cpu_model(),
        "isa": sorted(f for f in ISA_FLAGS if f in cpu_flags()),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda_devices": cuda,
    }


def machine_kind(record: dict[str, Any]) -> str:
    """One line for a report: the CPU (or GPUs) and the ISA flags that decide bf16 autocast."""
    isa = ", ".join(record.get("isa") or ["none of " + "/".join(ISA_FLAGS[:4])])
    gpus = record.get("cuda_devices") or []
    return f"{record.get('cpu', '?')} ({isa})" + (f", GPUs: {', '.join(gpus)}" if gpus else "")


def run_record(stage: str, **facts: Any) -> dict[str, Any]:
    """The volatile record of the stage run that is ending, with the stage's own facts (the autocast in force,
    timings, ...)."""
    return {
        "stage": stage,
        "code_revision": code_revision(),
        "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - STARTED, 3),
        "machine": machine(),
        **facts,
    }


def write_run_record(folder: str | Path, stage: str, **facts: Any) -> Path:
    """`folder`/run_record.json (the folder: the stage's `--record`)."""
    from a5core.base.artifacts import write_json

    return write_json(run_record(stage, **facts), Path(folder) / RECORD_FILE)


def read_run_record(path: str | Path) -> dict[str, Any] | None:
    import json

    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def record_dir(run_dir: str | Path, results: str | Path, records: str | Path) -> Path:
    """The run-record folder of the training run whose results are in `run_dir` (under `results`): dvc.yaml's
    `--record` of its stage, `records/<family>[_replicate]/<the rest of run_dir's path>`, e.g. results/grpo/x/seed_1
    -> run_records/grpo_replicate/x/seed_1 (a stage's record folder is a DVC output of its own, so the family of the
    replicates is a folder of its own: outputs cannot nest)."""
    family, *rest = Path(run_dir).relative_to(results).parts
    replicate = any(part.startswith("seed_") for part in rest)
    return Path(records) / (family + "_replicate" * replicate) / Path(*rest)
