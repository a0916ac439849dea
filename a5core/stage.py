"""Small helpers shared by the stage scripts: arguments (paths come from dvc.yaml) with every params section
validated first, torch setup, row I/O."""

from __future__ import annotations

import argparse
import os
import sys

import torch

from a5core.artifacts import read_parquet
from a5core.config import ConfigError, check_params


def args(*names: str, **extra) -> argparse.Namespace:
    """`--name PATH` for each name, plus typed extras; then the whole params file is checked, so that a bad value in
    any section stops the first stage that runs, with every problem listed, before any work."""
    parser = argparse.ArgumentParser()
    for name in names:
        parser.add_argument(f"--{name}", required=True)
    for name, tp in extra.items():
        parser.add_argument(f"--{name}", type=tp, default=None)
    parser.add_argument("--params", default="params.yaml")
    parsed = parser.parse_args()
    try:
        check_params(parsed.params)
    except ConfigError as err:
        sys.exit(f"error: {err}\nNothing was run. Fix these values in {parsed.params} (or the -S overrides) and rerun.")
    return parsed


def setup_torch(seed: int = 0) -> torch.device:
    """Seed torch, use every core (A5_THREADS to limit), and return the training device (cuda:0 when present)."""
    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("A5_THREADS", os.cpu_count() or 1)))
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def rows(path: str, required: list[str] | None = None) -> list[dict]:
    return read_parquet(path, required).to_pylist()
