"""Run a training stage on the `distributed` section's processes: `python -m a5core.launch stages/<x>.py <args>`.

- One process on one node (`nproc: 1`, `nnodes: 1`): the script replaces this process (os.execv), exactly the
  command without the launcher: today's single-process path.
- Otherwise torchrun (`python -m torch.distributed.run`): `--nproc-per-node nproc --nnodes nnodes`, c10d rendezvous
  at `rdzv_endpoint` (port 0 on one node: any free port). Every node runs the same `dvc repro` (README: Scaling out).
The section is read from the stage's `--params` file (default params.yaml) and validated first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from a5core.config import load_section
from a5core.distributed import DistributedConfig


def command(cfg: DistributedConfig, script: list[str]) -> list[str]:
    """The argv that runs `script` (a stage script and its arguments) on the section's processes."""
    if cfg.nproc * cfg.nnodes == 1:
        return [sys.executable, *script]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={cfg.nnodes}",
        f"--nproc-per-node={cfg.nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={cfg.rdzv_endpoint}",
        f"--rdzv-id={Path(script[0]).stem}",  # the same id on every node, distinct per stage
        "--",  # the script's own flags follow (torchrun would take --run for its --run-path)
        *script,
    ]


def params_path(script: list[str]) -> str:
    """The stage's `--params` value (its default: params.yaml)."""
    for i, arg in enumerate(script):
        if arg == "--params" and i + 1 < len(script):
            return script[i + 1]
        if arg.startswith("--params="):
            return arg.split("=", 1)[1]
    return "params.yaml"


def main(argv: list[str] | None = None) -> None:
    script = list(sys.argv[1:] if argv is None else argv)
    if not script or not script[0].endswith(".py"):
        sys.exit("usage: python -m a5core.launch stages/<stage>.py [--flag value ...]")
    cfg = load_section(DistributedConfig, "distributed", params_path(script))
    argv_out = command(cfg, script)
    sys.stdout.flush()
    os.execv(argv_out[0], argv_out)


if __name__ == "__main__":
    main()
