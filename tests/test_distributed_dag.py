"""The smoke DAG's training stages on 2 processes (torchrun over gloo, launched by dvc.yaml's commands): SFT, an EI
round and off-policy GRPO run under ddp, and SFT under fsdp2, each equal to the single process's to float tolerance,
with rank 0 alone writing; a 2-rank SFT stage killed with SIGKILL resumes to the uninterrupted run's bytes on 2 ranks
and to its weights on 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.test_checkpoint import _sft_cmd, kill_repo
from tests.test_smoke_dag import ok, ran_stages, scratch_repo, tree_digest


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def _close(a: Path, b: Path, atol: float = 1e-6) -> float:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    gap = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert gap <= atol, gap
    return gap


@pytest.mark.slow
def test_training_stages_on_two_ranks_match_one(tmp_path):
    work, run = scratch_repo(tmp_path, "smoke")
    ok(run(sys.executable, "-m", "tools.profile", "smoke", "distributed.nproc=2"))
    r = run("dvc", "repro", "sft@filtered", "ei_round_1@G2", "grpo@clip_offpolicy")
    ok(r)
    assert {"sft@filtered", "ei_round_1@G2", "grpo@clip_offpolicy"} <= ran_stages(r)
    assert r.stdout.count("sft@filtered: ") == 1 and r.stdout.count("grpo@clip_offpolicy: validation") == 1  # rank 0
    train = (work / "results" / "sft" / "filtered" / "logs" / "train.csv").read_text().splitlines()
    steps = [line.split(",")[0] for line in train[1:]]
    assert steps == [str(s) for s in range(1, len(steps) + 1)], steps  # one writer: no step logged twice
    assert not (work / "scratch").exists()
    two = tmp_path / "two_ranks"
    (work / "models" / "sft_filtered").rename(two)
    metrics = (work / "results" / "sft" / "filtered" / "metrics.json").read_text()
    for overrides in (["distributed.nproc=1"], ["distributed.nproc=2", "distributed.strategy=fsdp2"]):
        ok(run(sys.executable, "-m", "tools.profile", "smoke", *overrides))
        r = run("dvc", "repro", "--single-item", "sft@filtered")
        ok(r)
        assert ran_stages(r) == {"sft@filtered"}, ran_stages(r)
        _close(work / "models" / "sft_filtered", two)
        assert (work / "results" / "sft" / "filtered" / "metrics.json").read_text() == metrics, overrides


def _launch(cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "a5core.launch", *cmd[1:]]  # cmd[0] is python: the launcher runs the script


@pytest.mark.slow
def test_a_killed_two_rank_stage_resumes_on_two_ranks_and_on_one(tmp_path):
    work, params, env = kill_repo(tmp_path, nproc=2)

    def stage(name: str, params_file: str = "kill.yaml") -> subprocess.CompletedProcess:
        cmd = _launch(_sft_cmd(name, name))
        cmd[cmd.index("--params") + 1] = params_file
        return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)

    def kill_mid_run(name: str) -> int:
        proc = subprocess.Popen(
            _launch(_sft_cmd(name, name)), cwd=work, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        log = work / "results" / name / "logs" / "train.csv"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (log.exists() and log.read_text().count("\n") >= 6):
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun's agent and both workers, mid-training
        proc.wait()
        return torch.load(work / "scratch" / name / "state" / "state.pt", weights_only=True)["step"]

    ok(stage("ref"))
    assert 0 < kill_mid_run("killed") < 24
    ok(stage("killed"))
    assert tree_digest(work / "models" / "killed") == tree_digest(work / "models" / "ref")  # byte for byte
    assert tree_digest(work / "results" / "killed") == tree_digest(work / "results" / "ref")
    assert 0 < kill_mid_run("other_n") < 24
    one = {**params, "distributed": {**params["distributed"], "nproc": 1}}
    (work / "one.yaml").write_text(yaml.safe_dump(one))
    ok(stage("other_n", "one.yaml"))  # the 2-rank checkpoint, resumed by one process
    _close(work / "models" / "other_n", work / "models" / "ref", atol=1e-5)
