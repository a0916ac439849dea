"""Where a stage's time goes: process start, imports, model load, input hashing, generation, grading, training,
evaluation, saving, checkpointing, logging, the rest, and DVC's share (checking the stage, hashing its outputs).

Each stage runs its own `dvc.yaml` command once, in a sandbox folder: the repository's code and the stage's inputs are
symlinked there and its outputs are written there, so the workspace, its outputs and `dvc status` are untouched. The
child process wraps a few a5core functions with timers; a call inside another timed call counts to the outer one
(a validation's generation is evaluation, a rollout's generation is generation). Process start is the time from the
process's creation (`/proc`) to the first line of this script; imports are the stage script's imports.
DVC's share is measured beside the run: DVC's status of the stage in the workspace (what `dvc repro` checks before a
stage, with DVC's hash cache warm; DVC's own start, once per `dvc repro`, is not counted) and an md5 over the outputs
the run wrote (what DVC computes after a stage).

    python bench/stage_profile.py --stages baseline_eval sft@24 ei_round_1@G4 grpo@reinforce_baseline \\
        --out reports/stage_profile.json
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (module, attribute, phase), wrapped as each module is first imported (PatchOnImport).
TIMED = [
    ("a5core.base.artifacts", "hash_path", "input hashing"),
    ("a5core.model.loading", "load_policy", "model load"),
    ("a5core.run.evaluation", "evaluate_policy", "evaluation"),
    ("a5core.generation.hf", "HFBackend.generate", "generation"),
    ("a5core.generation.vllm", "VLLMBackend.generate", "generation"),  # imports vllm only when an engine starts
    ("a5core.generation.vllm", "VLLMBackend.__init__", "engine start"),
    ("a5core.generation.vllm", "VLLMBackend.sync_weights", "weight sync"),
    ("a5core.grader.pool", "GraderPool.map", "grading"),
    ("a5core.rl.sft", "optimizer_step", "training"),
    ("a5core.rl.grpo", "optimizer_step", "training"),
    ("a5core.rl.grpo", "old_log_probs_for", "training"),
    ("a5core.stage.training", "Validator.__call__", "evaluation"),
    ("a5core.stage.training", "save_policy", "saving"),
    (
        "a5core.run.checkpoint",
        "Checkpointer.save",
        "checkpointing",
    ),  # resume state in scratch/ (sft/grpo checkpoint_every)
    ("a5core.run.checkpoint", "Checkpointer.save_training", "checkpointing"),
    ("a5core.run.history", "RunHistory.log", "logging"),  # console, CSV, dvclive (and a tracker)
]
PHASES = ["process start", "imports"] + list(dict.fromkeys(phase for _, _, phase in TIMED))
DVC = ["dvc: status", "dvc: hash outputs (md5)"]


def since_process_start() -> float:
    """Seconds since this process was created (Linux: /proc, 10 ms resolution)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


class Clock:
    """Seconds per phase; each instant counts once, to the outermost timed call."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth = 0

    def wrap(self, phase: str, fn):
        @functools.wraps(fn)
        def timed(*a, **k):
            if self.depth:
                return fn(*a, **k)
            self.depth += 1
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[phase] += time.perf_counter() - t
                self.depth -= 1

        return timed

    def patch(self, module, attr: str, phase: str) -> None:
        owner = module
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, self.wrap(phase, getattr(owner, name)))


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Wraps TIMED's functions as their modules finish executing, before anything can import them by name, and
    without importing a module the stage does not (so "imports" is the stage's own)."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def find_spec(self, name, path, target=None):
        targets = [(attr, phase) for module, attr, phase in TIMED if module == name]
        if not targets:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None  # let the normal import machinery fail or load it, untimed
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            for attr, phase in targets:
                self.clock.patch(module, attr, phase)

        spec.loader.exec_module = exec_module
        return spec


def child(out: str, script: str, argv: list[str]) -> None:
    """Run one stage script with the timers on; write the seconds per phase to `out`."""
    started = since_process_start()
    t0 = time.perf_counter()
    sys.path.insert(0, os.getcwd())
    clock = Clock()
    sys.meta_path.insert(0, PatchOnImport(clock))
    # Grader workers are spawned: they re-import __main__ by its file, which must be the stage's script, as in a run.
    sys.modules["__main__"].__file__ = str(Path(script).resolve())
    namespace = runpy.run_path(script, run_name="__profiled__")  # the stage's imports, not its main()
    imports = time.perf_counter() - t0
    sys.argv = [script, *argv]
    namespace["main"]()
    total = started + time.perf_counter() - t0
    seconds = {"process start": started, "imports": imports, **clock.seconds}
    seconds["other"] = total - sum(seconds.values())
    Path(out).write_text(json.dumps({"seconds": seconds, "total_s": total}))


def sandbox(stage, folder: Path) -> None:
    """Symlink the repository's top-level entries into `folder`, except the folders the stage writes to, where only
    the stage's inputs are linked."""
    outs = [Path(o.def_path) for o in stage.outs]
    for dep in stage.deps:
        if any(out.is_relative_to(dep.def_path) for out in outs):
            raise SystemExit(f"{stage.addressing}: the dependency {dep.def_path} holds an output; cannot sandbox it")
    written = {out.parts[0] for out in outs} | {"scratch", "checkpoints"}
    for entry in ROOT.iterdir():
        if entry.name not in written and entry.name not in {".git", ".dvc", ".study"}:
            (folder / entry.name).symlink_to(entry)
    for dep in stage.deps:
        path = Path(dep.def_path)
        if path.parts[0] in written and (ROOT / path).exists():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).symlink_to(ROOT / path)


def md5_seconds(paths: list[Path]) -> float:
    t = time.perf_counter()
    for root in paths:
        for f in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if f.is_file():
                with open(f, "rb") as fh:
                    hashlib.file_digest(fh, "md5")
    return time.perf_counter() - t


def profile(repo, name: str) -> dict:
    (stage,) = repo.stage.collect(name)
    t = time.perf_counter()
    repo.status(targets=[name])  # in this process, as `dvc repro` checks each stage (DVC already imported)
    status_s = time.perf_counter() - t
    cmd = shlex.split(stage.cmd) if isinstance(stage.cmd, str) else []
    if cmd[1:3] == [
        "-m",
        "a5core.stage.launch",
    ]:  # a training stage: one process runs its script as is (a5core/stage/launch.py)
        cmd = [cmd[0], *cmd[3:]]
    if len(cmd) < 2 or cmd[0] not in ("python", "python3") or not cmd[1].endswith(".py") or stage.wdir != str(ROOT):
        raise SystemExit(f"{name}: can only profile `python <script>.py ...` run from the repository root")
    scratch = ROOT / "scratch"  # the sandbox sits on the disk the stage writes to, not a tmpfs
    made = not scratch.exists()
    scratch.mkdir(exist_ok=True)
    try:
        return _run_in_sandbox(stage, cmd, scratch, status_s)
    finally:
        if made and not any(scratch.iterdir()):
            scratch.rmdir()  # leave the workspace as it was


def _run_in_sandbox(stage, cmd: list[str], scratch: Path, status_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="profile-", dir=scratch) as tmp:
        folder, out = Path(tmp) / "repo", Path(tmp) / "seconds.json"
        folder.mkdir()
        sandbox(stage, folder)
        t = time.perf_counter()
        run = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--", *cmd[1:]]
        path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
        subprocess.run(run, cwd=folder, env={**os.environ, "PYTHONPATH": path}, check=True)
        wall = time.perf_counter() - t
        result = json.loads(out.read_text())
        result["seconds"][DVC[1]] = md5_seconds([folder / o.def_path for o in stage.outs])
    result["seconds"][DVC[0]] = status_s
    return {**result, "wall_s": wall}


def table(results: dict) -> str:
    seen = {p for r in results.values() for p in r["seconds"]}
    phases = [p for p in [*PHASES, "other", *DVC] if p in seen]
    lines = ["| stage | " + " | ".join(phases) + " | total |", "|---" * (len(phases) + 2) + "|"]
    for name, r in results.items():
        cells = [f"{r['seconds'].get(p, 0.0):.1f}" for p in phases]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {r['total_s']:.1f} |")
    lines.append("\n(total: the stage's process, from its start to its exit; the dvc columns are beside it.)")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[4], sys.argv[5:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", nargs="+", required=True, help="stage names as in `dvc stage list`")
    ap.add_argument("--out", default="stage_profile.json")
    a = ap.parse_args()
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        results = {name: profile(repo, name) for name in a.stages}
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
