"""SLURM as the cluster path (issue 45, item 2): in an allocation of several nodes the launcher runs `srun` with one
torchrun per node, meeting at the batch host, and a rank that fails on any node stops every node's ranks.

The srun is tests/fake_slurm/srun, a stand-in that really launches each task here with SLURM's variables (its
docstring says what it does of srun's); the torchruns, the c10d rendezvous and the gloo collectives are real.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a5core.model.distributed import DistributedConfig
from a5core.stage.launch import Slurm

ROOT = Path(__file__).resolve().parents[1]
FAKE_SLURM = ROOT / "tests" / "fake_slurm"
PROBE = """import json, os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
node = os.environ.get("SLURM_NODEID")
row = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(), "node": node}
open(os.path.join(os.environ["OUT"], f"rank{dist.get_rank()}.json"), "w").write(json.dumps(row))
if node == os.environ.get("FAIL_NODE"):  # mid-stage: after the rendezvous and a collective
    if os.environ.get("FAIL_HOW") == "kill":
        os.kill(os.getpid(), 9)
    os._exit(5)  # at once: an interpreter exit with the process group alive can abort in gloo's teardown (SIGABRT)
if os.environ.get("FAIL_NODE"):
    time.sleep(300)  # the other node's rank is busy (no collective that would fail with its peer): srun must stop it
dist.destroy_process_group()
"""


def test_an_allocation_of_several_nodes_is_read_from_slurms_variables():
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2", "SLURMD_NODENAME": "gpu07", "SLURM_CPUS_PER_TASK": "16"}
    slurm = Slurm.from_env(env)
    assert slurm == Slurm("77", 2, "gpu07", "16") and Slurm.from_env({}) is None
    cfg = DistributedConfig(nproc=8, nnodes=2)
    argv = slurm.srun(cfg, ["stages/grpo.py", "--run", "a"], "gpu07:41234")
    torchrun = argv.index(sys.executable)
    assert argv[:torchrun] == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--export=ALL",
        f"--chdir={os.getcwd()}", "--cpus-per-task=16",
    ]  # fmt: skip
    assert {"--nnodes=2", "--nproc-per-node=8", "--rdzv-endpoint=gpu07:41234"} <= set(argv)
    other = slurm.srun(cfg, ["stages/grpo.py", "--run", "b"], "gpu07:41234")
    ids = [next(a for a in x if a.startswith("--rdzv-id=")) for x in (argv, other)]
    assert ids[0].startswith("--rdzv-id=slurm77-grpo-") and ids[0] != ids[1]  # per job and per stage
    assert Slurm("77", 3, "gpu07").problems(2) and not slurm.problems(2)


def test_under_salloc_the_rendezvous_is_the_allocations_first_node(monkeypatch):
    """`salloc`'s shell runs on the login node (no SLURMD_NODENAME): the first host of the node list, where srun puts
    task 0, read with `scontrol show hostnames` (the stand-in in tests/fake_slurm expands the list as SLURM does)."""
    monkeypatch.setenv("PATH", f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}")
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    assert Slurm.from_env(env).head == "gpu07"
    lost = Slurm.from_env({"SLURM_JOB_ID": "9", "SLURM_JOB_NUM_NODES": "2"})
    assert lost.head == "" and "set A5_RDZV_ENDPOINT" in lost.problems(2)[0] and not lost.problems(2, "gpu07:29400")


def _launch(tmp_path, fail_node: str = "", how: str = "") -> tuple[subprocess.CompletedProcess, float]:
    params = tmp_path / "p.yaml"
    params.write_text("distributed: {nproc: 1, nnodes: 2}\n")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "A5_"))}
    env |= {"PATH": f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)}
    env |= {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURMD_NODENAME": socket.gethostname()}
    env |= {"FAKE_SRUN_LOG": str(tmp_path / "srun.jsonl"), "FAIL_NODE": fail_node, "FAIL_HOW": how}
    argv = [sys.executable, "-m", "a5core.stage.launch", str(tmp_path / "probe.py"), "--params", str(params)]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    return done, time.monotonic() - t0


@pytest.mark.slow
def test_a_two_node_allocation_runs_one_torchrun_per_node_through_srun(tmp_path):
    done, _ = _launch(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted((json.loads(f.read_text()) for f in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["sum"]) for r in rows] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert sorted(r["node"] for r in rows) == ["0", "1"]  # one rank on each node's torchrun
    (call,) = [json.loads(line) for line in (tmp_path / "srun.jsonl").read_text().splitlines()]
    assert "--kill-on-bad-exit=1" in call["argv"] and f"--chdir={tmp_path}" in call["argv"]
    assert any(a.startswith("--rdzv-id=slurm4242-probe-") for a in call["argv"])


@pytest.mark.slow
@pytest.mark.parametrize(("node", "how", "cause"), [("0", "", "exit code 5"), ("1", "kill", "killed by SIGKILL")])
def test_a_rank_failing_mid_stage_on_either_node_stops_both_with_one_line_naming_it(tmp_path, node, how, cause):
    done, seconds = _launch(tmp_path, fail_node=node, how=how)
    assert done.returncode != 0
    assert len(list(tmp_path.glob("rank*.json"))) == 2  # both ranks were past the rendezvous: mid-stage
    last = done.stderr.strip().splitlines()[-1]
    # the node from srun's error line (srun itself says "Exited with exit code 1": torchrun's), rank and cause from
    # that node's torchrun summary
    assert last == f"error: probe.py failed on node node{node}, rank {node}: {cause}; srun stopped every node's ranks"
    assert seconds < 120  # the busy rank was stopped
