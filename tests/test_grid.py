"""A grid whose machines start at the same time (docs/scaling-out.md, "A grid over machines"), on the smoke profile:
one machine runs the shared upstream of the GRPO runs and pushes it; two machines, started together, each run one
GRPO run with `dvc repro --pull` and push it; a collector's `dvc repro --pull` of both runs restores them. No stage
runs on two machines. (bench/grid_check.py runs the whole DAG this way, and the queue and `dvc exp push`/`pull`.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.repos import ok, ran_stages, repo_env, scratch_repo, tree_digest

GRID = ("reinforce_baseline", "no_baseline")


@pytest.mark.slow
def test_machines_started_together_share_one_upstream_and_run_no_stage_twice(tmp_path):
    origin, run = scratch_repo(tmp_path, "smoke")
    ok(run("dvc", "remote", "add", "-d", "shared", str(tmp_path / "remote")))
    ok(run("git", "commit", "-qam", "a shared remote"))

    def clone(name):
        path = tmp_path / name
        ok(run("git", "clone", "-q", str(origin), str(path)))
        return path, repo_env(path)

    first, env = clone("upstream")
    r = subprocess.run(["dvc", "repro", "--pull", "sft@filtered"], cwd=first, env=env, capture_output=True, text=True)
    ok(r)
    ok(subprocess.run([sys.executable, "-m", "tools.push_runs"], cwd=first, env=env, capture_output=True, text=True))
    ran = {"upstream": ran_stages(r)}
    procs = {}
    for name in GRID:  # started together, once the upstream is pushed
        path, env = clone(name)
        cmd = f"dvc repro --pull grpo@{name} && {sys.executable} -m tools.push_runs"
        procs[name] = (path, subprocess.Popen(["bash", "-c", cmd], cwd=path, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))  # fmt: skip
    for name, (_, proc) in procs.items():
        out, _ = proc.communicate()
        assert proc.returncode == 0, out[-3000:]
        ran[name] = ran_stages(subprocess.CompletedProcess([], 0, out, ""))
    collector, env = clone("collector")
    r = subprocess.run(["dvc", "repro", "--pull", *(f"grpo@{x}" for x in GRID)], cwd=collector, env=env,
                       capture_output=True, text=True)  # fmt: skip
    ok(r)
    ran["collector"] = ran_stages(r)

    assert {"baseline_eval", "sft@filtered"} <= ran["upstream"], ran
    assert all(ran[x] == {f"grpo@{x}"} for x in GRID), ran  # the upstream restored, not retrained
    assert ran["collector"] == set(), ran  # both runs restored
    twice = {s for a in ran for b in ran if a < b for s in ran[a] & ran[b]}
    assert not twice, ran
    for name in GRID:  # the collector's copy is the machine's, byte for byte
        assert tree_digest(collector / "models" / f"grpo_{name}") == tree_digest(
            procs[name][0] / "models" / f"grpo_{name}"
        )
