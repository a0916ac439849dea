"""The grid recipes of docs/scaling-out.md, run for real on the smoke profile, with what each machine ran:
`python bench/grid_check.py [--out reports/grid_check.md]` (about 10 min on 2 cores).

1. A grid whose machines start at the same time. One machine runs the shared upstream (every stage but the GRPO
   runs and the plots) and pushes it (`tools.push_runs`); then two machines, started together, each run one GRPO run
   with `dvc repro --pull` and push it; a collector runs `dvc repro --pull` of the whole DAG. Checked: no stage ran
   on two machines, the GRPO machines ran their GRPO run alone (the upstream restored from the run cache), and the
   collector ran neither the upstream nor their runs.
2. `dvc exp run --queue` with two queue workers (`dvc queue start -j 2`): two experiments queued, both done, each
   ran only the GRPO stages and the plots (the rest restored).
3. `dvc exp push` / `dvc exp pull` between two clones through a bare git remote (and the folder DVC remote): the
   second clone pulls an experiment the first ran and applies it; its metrics are the first's, byte for byte.

Each machine is a clone of one scratch repo (the working tree's files, committed). Writes a Markdown report.
May import: the standard library (bench imports no test).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root, for tools/
from tools.repo_env import repo_env  # noqa: E402

GRID = ("reinforce_baseline", "no_baseline")  # the two GRPO runs started together


def _env(work: Path) -> dict[str, str]:
    return {**repo_env(work), "A5_NO_PIPELINE_LINE": "1"}


def run(work: Path, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=work, env=_env(work), capture_output=True, text=True)
    if check and r.returncode:
        sys.exit(f"{' '.join(cmd)} failed in {work}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def ran(stdout: str) -> set[str]:
    """The stages a `dvc repro` ran (not those it restored or skipped)."""
    return set(re.findall(r"Running stage '([^']+)'", stdout))


def origin(tmp: Path) -> Path:
    """The working tree's files as a repo with the smoke profile, a folder DVC remote and a bare git remote."""
    work = tmp / "origin"
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
    run(work, sys.executable, "-m", "tools.profile", "smoke")
    run(work, "git", "init", "-q", "-b", "main")
    run(work, "dvc", "remote", "add", "-d", "shared", str(tmp / "dvc-remote"))
    run(work, "git", "add", "-A")
    run(work, "git", "commit", "-qm", "smoke, a shared remote")
    run(tmp, "git", "init", "-q", "--bare", "-b", "main", str(tmp / "git-remote.git"))
    run(work, "git", "remote", "add", "origin", str(tmp / "git-remote.git"))
    run(work, "git", "push", "-q", "origin", "main")
    return work


def machine(tmp: Path, name: str) -> Path:
    path = tmp / name
    run(tmp, "git", "clone", "-q", str(tmp / "git-remote.git"), str(path))
    return path


def concurrent_grid(tmp: Path, lines: list[str]) -> None:
    stages = run(machine(tmp, "lister"), "dvc", "stage", "list", "--name-only").stdout.split()
    upstream = [s for s in stages if not s.startswith(("grpo", "plots"))]
    first = machine(tmp, "upstream")
    t0 = time.monotonic()
    r = run(first, "dvc", "repro", "--pull", *upstream)
    run(first, sys.executable, "-m", "tools.push_runs")
    took = {"upstream": time.monotonic() - t0}
    by = {"upstream": ran(r.stdout)}
    procs = {}
    for name in GRID:  # started together
        path = machine(tmp, name)
        cmd = f"dvc repro --pull grpo@{name} && {sys.executable} -m tools.push_runs"
        procs[name] = (subprocess.Popen(["bash", "-c", cmd], cwd=path, env=_env(path), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True), time.monotonic())  # fmt: skip
    for name, (proc, start) in procs.items():
        out, _ = proc.communicate()
        if proc.returncode:
            sys.exit(f"grpo@{name} failed:\n{out[-3000:]}")
        by[name], took[name] = ran(out), time.monotonic() - start
    collector = machine(tmp, "collector")
    t0 = time.monotonic()
    by["collector"], took["collector"] = ran(run(collector, "dvc", "repro", "--pull").stdout), time.monotonic() - t0
    run(collector, sys.executable, "-m", "tools.push_runs")  # the rest, for the experiments below
    twice = {s for a in by for b in by if a < b for s in by[a] & by[b]} - {"check_params"}
    lines += ["## 1. A grid started together", "", "| machine | command | ran | seconds |", "|---|---|---|---|"]
    cmds = {"upstream": "dvc repro --pull <every stage but grpo*, plots> && python -m tools.push_runs"}
    cmds |= {x: f"dvc repro --pull grpo@{x} && python -m tools.push_runs (started together)" for x in GRID}
    cmds["collector"] = "dvc repro --pull"
    for name in by:
        lines.append(f"| {name} | `{cmds[name]}` | {', '.join(sorted(by[name]))} | {took[name]:.0f} |")
    checks = {
        "no stage ran on two machines (check_params aside: it reruns wherever params.yaml is read)": not twice,
        "each GRPO machine ran its GRPO run alone": all(by[x] - {"check_params"} == {f"grpo@{x}"} for x in GRID),
        "the collector ran no upstream stage and no run of the grid": not by["collector"]
        & (by["upstream"] | {f"grpo@{x}" for x in GRID}),  # fmt: skip
    }
    lines += ["", *(f"- {'PASS' if ok else 'FAIL'}: {what}" for what, ok in checks.items()), ""]
    if not all(checks.values()):
        raise SystemExit("\n".join(lines))


def queue_and_exp_push(tmp: Path, lines: list[str]) -> None:
    first = machine(tmp, "queue")
    restored = ran(run(first, "dvc", "repro", "--pull").stdout)  # the whole DAG from the remote: the run cache
    for lr in ("3e-6", "1e-5"):
        run(first, "dvc", "exp", "run", "--queue", "-S", f"grpo.lr={lr}", "-n", f"lr-{lr}")
    t0 = time.monotonic()
    run(first, "dvc", "queue", "start", "-j", "2")
    while True:
        status = run(first, "dvc", "queue", "status").stdout
        if not re.search(r"\b(Queued|Running)\b", status):
            break
        if time.monotonic() - t0 > 1800:
            sys.exit(f"the queue did not finish in 30 min:\n{status}")
        time.sleep(5)
    took = time.monotonic() - t0
    run(first, "dvc", "queue", "stop", check=False)
    status = run(first, "dvc", "queue", "status").stdout
    done = re.findall(r"^\S+\s+(lr-\S+)\s+.*\bSuccess\b", status, re.M)
    logs = {name: run(first, "dvc", "queue", "logs", name, check=False).stdout for name in ("lr-3e-6", "lr-1e-5")}
    ran_by = {name: ran(log) for name, log in logs.items()}
    lines += ["## 2. `dvc exp run --queue` with two workers", ""]
    lines += [f"A fresh clone's `dvc repro --pull` ran {sorted(restored) or 'nothing'} (the rest restored), then:", ""]
    lines += [
        "    dvc exp run --queue -S grpo.lr=3e-6 -n lr-3e-6",
        "    dvc exp run --queue -S grpo.lr=1e-5 -n lr-1e-5",
    ]
    lines += ["    dvc queue start -j 2", "", "```", status.strip(), "```", ""]
    lines += [f"- {name}: ran {', '.join(sorted(r)) or '(nothing)'}" for name, r in ran_by.items()]
    only_grpo = all(r and all(s.startswith(("grpo", "plots", "check_params")) for s in r) for r in ran_by.values())
    lines += [f"- both done, {took:.0f} s for the two (`dvc queue start -j 2`)", ""]
    lines += [f"- {'PASS' if sorted(done) == ['lr-1e-5', 'lr-3e-6'] else 'FAIL'}: both experiments succeeded"]
    lines += [f"- {'PASS' if only_grpo else 'FAIL'}: each ran only the GRPO stages and the plots", ""]
    run(first, "dvc", "exp", "push", "origin", "lr-3e-6")
    other = machine(tmp, "exp-puller")
    run(other, "dvc", "exp", "pull", "origin", "lr-3e-6")
    listed = run(other, "dvc", "exp", "list", "--name-only").stdout.split()
    run(other, "dvc", "exp", "apply", "lr-3e-6")
    run(first, "dvc", "exp", "apply", "lr-3e-6")
    metrics = "results/grpo/reinforce_baseline/metrics.json"
    same = (first / metrics).read_bytes() == (other / metrics).read_bytes()
    accuracy = json.loads((other / metrics).read_text()).get("eval/accuracy")
    lines += ["## 3. `dvc exp push` / `dvc exp pull` through a bare git remote", ""]
    lines += [
        "    dvc exp push origin lr-3e-6      # clone 1: the experiment's commit to git, its outputs to the DVC remote",
        "    dvc exp pull origin lr-3e-6      # clone 2",
        "    dvc exp apply lr-3e-6",
        "",
        f"- clone 2 lists {listed}; after `dvc exp apply`, {metrics} (eval/accuracy {accuracy})",
        f"- {'PASS' if same and 'lr-3e-6' in listed else 'FAIL'}: the pulled experiment's metrics equal the first "
        "clone's, byte for byte",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reports/grid_check.md")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        "# The grid recipes, run (smoke profile)",
        "",
        f"`python bench/grid_check.py`, {time.strftime('%Y-%m-%d', time.gmtime())}, commit {commit.stdout.strip()}"
        f" and the working tree, on {os.cpu_count()} cores; each machine is a clone on this machine, sharing a "
        "folder DVC remote and a bare git remote (docs/scaling-out.md).",
        "",
    ]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        origin(tmp)
        concurrent_grid(tmp, lines)
        queue_and_exp_push(tmp, lines)
    text = "\n".join(lines)
    (ROOT / args.out).write_text(text)
    print(text)
    if "FAIL" in text:
        sys.exit(1)


if __name__ == "__main__":
    main()
