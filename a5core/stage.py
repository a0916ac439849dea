"""Small helpers shared by the stage scripts (argument parsing, torch setup, row I/O)."""
from __future__ import annotations

import argparse
import os

import torch

from a5core.artifacts import read_parquet


def args(*names: str, **extra) -> argparse.Namespace:
    """`--name PATH` for each name (paths come from dvc.yaml), plus typed extras."""
    p = argparse.ArgumentParser()
    for n in names:
        p.add_argument(f"--{n}", required=True)
    for n, tp in extra.items():
        p.add_argument(f"--{n}", type=tp, default=None)
    p.add_argument("--params", default="params.yaml")
    return p.parse_args()


def setup_torch(seed: int = 0) -> torch.device:
    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("A5_THREADS", os.cpu_count() or 1)))
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def rows(path: str, required: list[str] | None = None, limit: int = 0) -> list[dict]:
    out = read_parquet(path, required).to_pylist()
    return out[:limit] if limit else out


def remove(path: str) -> None:
    """Delete a scratch folder if it exists."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
