"""The kill-and-resume check the tests share: a run straight through, the same run killed mid-way, then resumed from
the checkpoint the killed attempt left; the caller compares what the straight and the resumed runs give.

- `straight_killed_resumed(run, kill_at)`: calls `run(name, kill_at)` three times, as `run("straight", None)`, then
  `run("resumed", kill_at)` (the attempt to kill), then `run("resumed", None)` (its resume: the same name, hence the
  same folders and checkpoint; the straight run has its own). With `kill_at` None a run goes to its end and returns
  its result; with a step it must die there: in process, raise KeyboardInterrupt (tests/support/loops.py's
  DyingHistory does, as a kill would stop the loop); a stage process, return the step of its checkpoint
  (`stage_runs` does). Returns `Resumed(straight, killed_at, resumed)`.
- `checkpointer(root, name)`: the Checkpointer of an in-process run (`root/ck`), none for the straight run.
- Stage processes: `stage_runs(command, work, env)` makes `run` for a stage's command line; `kill_when` starts a
  command and SIGKILLs it (every process under it) once a condition holds; `rows_logged`, `checkpoint_step`;
  `kill_repo` (a smoke repo with the baseline run and kill.yaml: long enough to kill) and `sft_cmd` (its SFT stage);
  `no_resume_state` after a stage finished, `weights_close` to compare two model folders.

May import: the standard library, a5core, torch, PyYAML, psutil, pytest and tests/support. Test modules import
this; it imports no test module.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import psutil
import torch
import yaml

from a5core.run.checkpoint import Checkpointer
from tests.support.repos import ok, scratch_repo

T = TypeVar("T")
STRAIGHT, RESUMED = "straight", "resumed"


@dataclass(frozen=True)
class Resumed(Generic[T]):
    straight: T  # what the uninterrupted run returned
    killed_at: int | None  # the step of the checkpoint the killed attempt left (None in process: it raised)
    resumed: T  # what the resumed run returned


def straight_killed_resumed(run: Callable[[str, int | None], T], kill_at: int) -> Resumed[T]:
    """Run straight, killed at `kill_at`, and resumed (the module's docstring gives `run`'s contract)."""
    straight = run(STRAIGHT, None)
    try:
        killed_at = run(RESUMED, kill_at)
    except KeyboardInterrupt:  # in process: the run was 'killed' where it was told to die
        killed_at = None
    else:  # a stage process: SIGKILLed, it returns the step of its checkpoint; anything else ran to its end
        assert type(killed_at) is int, f"the run to kill at step {kill_at} was not killed (it returned {killed_at!r})"
    return Resumed(straight, killed_at, run(RESUMED, None))


def checkpointer(root: Path, name: str) -> Checkpointer | None:
    """An in-process run's checkpoints: the killed attempt and its resume share `root/ck`; the straight run has none."""
    return None if name == STRAIGHT else Checkpointer(root / "ck", "fp", 1)


def kill_when(cmd: list[str], cwd: Path, env: dict, until: Callable[[], bool], timeout_s: float = 300) -> None:
    """Start `cmd`, wait until `until()` holds (or the process ended, or `timeout_s` passed), then SIGKILL it and
    every process under it. Why the whole tree, not killpg: torchrun starts each worker in a session of its own, so
    killing the launcher's group leaves them running to the end (which then clear the checkpoint, and the "resumed"
    run starts afresh); a plain stage's grader workers go with it too."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and not until():
        time.sleep(0.02)
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(tree[1:], timeout=30)
    proc.wait()


def no_resume_state(scratch: Path) -> None:
    """Asserts that a finished stage left no resume state under `scratch`: at most its outputs, kept (as hard links)
    in `finished/` until DVC's cache holds them (a5core/run/kept.py)."""
    left = [p for p in scratch.rglob("*") if p.is_file() and "finished" not in p.relative_to(scratch).parts]
    assert not left, left


def weights_close(a: Path, b: Path, atol: float = 1e-6) -> float:
    """The largest gap between two model folders' weights, asserted at most `atol` (same tensor names)."""
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    gap = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert gap <= atol, gap
    return gap


def rows_logged(log: Path, rows: int) -> Callable[[], bool]:
    """True once the CSV `log` holds more than `rows` rows (the header line not counted)."""
    return lambda: log.exists() and log.read_text().count("\n") > rows


def checkpoint_step(state: Path) -> int:
    """The step of the checkpoint a killed run left (`<scratch>/state/state.pt`)."""
    assert state.exists(), "the killed run left no checkpoint"
    return torch.load(state, weights_only=True)["step"]


def stage_runs(command: Callable[[str], list[str]], work: Path, env: dict) -> Callable[[str, int | None], int | None]:
    """`run(name, kill_at)` for a stage process in the repo `work`: `command(name)` writes its logs under
    results/<name>/logs and its checkpoint under scratch/<name>. To the end it must succeed; killed, it is SIGKILLed
    once its train.csv has `kill_at` rows, and the step of the checkpoint it left is returned."""

    def run(name: str, kill_at: int | None) -> int | None:
        if kill_at is None:
            ok(subprocess.run(command(name), cwd=work, env=env, capture_output=True, text=True))
            return None
        kill_when(command(name), work, env, rows_logged(work / "results" / name / "logs" / "train.csv", kill_at))
        return checkpoint_step(work / "scratch" / name / "state" / "state.pt")

    return run


def kill_repo(tmp_path: Path, nproc: int = 1) -> tuple[Path, dict, dict]:
    """A smoke repo with the baseline run and kill.yaml: SFT of 24 steps on `nproc` processes, a checkpoint after
    each (time to kill in the middle). Returns (repo, those params, the environment to run its stages in)."""
    work, run = scratch_repo(tmp_path, "smoke")
    ok(run("dvc", "repro", "baseline_eval"))
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["sft"].update(epochs=8, eval_every=0, checkpoint_every=1)
    params["distributed"]["nproc"] = nproc
    (work / "kill.yaml").write_text(yaml.safe_dump(params))
    return work, params, {**os.environ, "PYTHONPATH": str(work)}


def sft_cmd(name: str, params: str = "kill.yaml") -> list[str]:
    """stages/sft.py's `full` run from the base model, reading `params`, its outputs and scratch under `name`."""
    return [
        sys.executable,
        "stages/sft.py",
        "--run",
        "full",
        "--model",
        "models/base",
        "--data",
        "data/prepared/sft.parquet",
        "--validation",
        "data/prepared/validation.parquet",
        "--initial",
        "results/baseline/validation.json",
        "--out",
        f"models/{name}",
        "--metrics",
        f"results/{name}/metrics.json",
        "--live",
        f"results/{name}/live",
        "--logs",
        f"results/{name}/logs",
        "--scratch",
        f"scratch/{name}",
        "--record",
        f"run_records/{name}",
        "--params",
        params,
    ]
