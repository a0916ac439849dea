"""Resumable training state in a scratch folder outside DVC's cache.

The folder holds `fingerprint.txt` (a hash of the run's params and inputs) and `state/` (model,
optimizer, scheduler, RNG states, step, logs so far), replaced atomically: written to `state.tmp/`, then
renamed. A run whose fingerprint differs starts fresh (the old state is deleted). A SIGKILL at any moment
leaves either the previous complete state or the new one.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch


def fingerprint(params: Any, inputs: dict[str, str]) -> str:
    from a5core.artifacts import _jsonable, hash_path

    blob = json.dumps({"params": params, "inputs": {k: hash_path(v) for k, v in inputs.items()}}, default=_jsonable, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


class Checkpointer:
    def __init__(self, folder: str | Path, fp: str, every: int):
        self.folder, self.every = Path(folder), every
        self.folder.mkdir(parents=True, exist_ok=True)
        fp_file = self.folder / "fingerprint.txt"
        if not fp_file.exists() or fp_file.read_text() != fp:
            shutil.rmtree(self.folder / "state", ignore_errors=True)
            fp_file.write_text(fp)

    def load(self) -> dict | None:
        path = self.folder / "state" / "state.pt"
        return torch.load(path, weights_only=False) if path.exists() else None

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def save(self, state: dict) -> None:
        tmp, final = self.folder / "state.tmp", self.folder / "state"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save(state, tmp / "state.pt")
        old = self.folder / "state.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)

    def save_training(self, policy, optimizer, step: int, logs: list, scheduler=None, **extra) -> None:
        """Save everything a training loop needs to continue after step `step`."""
        state = {"model": policy.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(), "step": step, "logs": logs, **extra}
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        self.save(state)

    def restore_training(self, policy, optimizer, scheduler=None, log=lambda kind, row: None) -> tuple[dict, list]:
        """Load the last saved state into the objects (replaying its logs into `log`); ({}, []) when there is none."""
        state = self.load()
        if not state:
            return {}, []
        policy.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        for kind, row in state["logs"]:
            log(kind, row)
        return state, list(state["logs"])

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
