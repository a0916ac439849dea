"""Preemption (issue 58, item 4): SIGUSR1 (what `#SBATCH --signal=B:USR1@600` sends before a time limit) makes a
training stage checkpoint at its next step boundary and exit 75; scripts/slurm/requeue.sh, which the sbatch templates
run their command under, passes the signal to the stage and requeues the job; the requeued run continues from the
checkpoint to the weights of a run never stopped.

Through the real stage (SFT on the smoke model, a checkpoint only every 24 steps, so the one written is the
preemption's), the real launcher and torchruns, the stand-in srun and scontrol of tests/fake_slurm (which really
launch and log the requeue)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.repos import ok, tree_digest
from tests.support.resume import checkpoint_step, kill_repo, no_resume_state, rows_logged, sft_cmd, weights_close

ROOT = Path(__file__).resolve().parents[1]
FAKE_SLURM = ROOT / "tests" / "fake_slurm"
STEPS = 24  # kill_repo's SFT: 24 optimizer steps


def _preempt(cmd: list[str], work: Path, env: dict, name: str, after: int) -> tuple[int, str]:
    """Start `cmd`, send it SIGUSR1 once its train.csv has `after` rows; (its exit status, its stderr)."""
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    logged, deadline = rows_logged(work / "results" / name / "logs" / "train.csv", after), time.monotonic() + 300
    while proc.poll() is None and not logged() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"it ended before step {after}: {proc.communicate()[1][-3000:]}"
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _was_preempted(code: int, err: str, work: Path, name: str, after: int) -> int:
    """Asserts a preempted stage's end (exit 75, a last `preempted:` line, no traceback of a5's, a checkpoint after step
    `after` and before the end) and returns the checkpoint's step."""
    last = [line for line in err.strip().splitlines() if not line.startswith("a5: ")][-1]  # requeue.sh's own: a5:
    assert code == 75 and last.startswith("preempted: "), err[-3000:]
    assert not re.search(r'File ".*/(a5core|stages)/', err), err[-3000:]  # no traceback of ours (torchrun prints one)
    step = checkpoint_step(work / "scratch" / name / "state" / "state.pt")
    assert after <= step < STEPS, step
    return step


@pytest.mark.slow
def test_sigusr1_checkpoints_at_the_next_step_and_the_requeued_run_ends_where_an_unstopped_one_does(tmp_path):
    work, params, env = kill_repo(tmp_path)
    params["sft"]["checkpoint_every"] = STEPS  # no periodic checkpoint before the end: only the preemption writes one
    (work / "kill.yaml").write_text(yaml.safe_dump(params))
    ok(subprocess.run(sft_cmd("straight"), cwd=work, env=env, capture_output=True, text=True))
    assert tree_digest(work / "models" / "straight") != tree_digest(work / "models" / "base")

    # one process: the stage itself takes the signal
    code, err = _preempt(sft_cmd("one"), work, env, "one", after=3)
    step = _was_preempted(code, err, work, "one", after=3)
    assert f"at optimizer step {step} of {STEPS} (SIGUSR1: checkpointed after step {step})" in err.splitlines()[-1]
    ok(subprocess.run(sft_cmd("one"), cwd=work, env=env, capture_output=True, text=True))
    assert tree_digest(work / "models" / "one") == tree_digest(work / "models" / "straight")  # byte for byte
    assert tree_digest(work / "results" / "one") == tree_digest(work / "results" / "straight")

    # two nodes of a SLURM job, as a batch script runs them: requeue.sh -> the launcher -> srun -> each node's
    # launcher -> its torchrun -> the rank; SIGUSR1 to the batch shell, as `--signal=B:USR1@600` sends it
    two = {**params, "distributed": {**params["distributed"], "nproc": 1, "nnodes": 2}}
    (work / "two.yaml").write_text(yaml.safe_dump(two))
    requeued = tmp_path / "requeued.txt"
    env2 = {k: v for k, v in env.items() if not k.startswith(("SLURM", "A5_"))}
    path = os.pathsep.join([str(FAKE_SLURM), str(Path(sys.executable).parent), env["PATH"]])  # as activated
    env2 |= {"PATH": path, "FAKE_SCONTROL_REQUEUED": str(requeued)}
    env2 |= {"SLURM_JOB_ID": "4243", "SLURM_JOB_NUM_NODES": "2", "SLURMD_NODENAME": socket.gethostname()}
    launch = [sys.executable, "-m", "a5core.stage.launch", *sft_cmd("two", "two.yaml")[1:]]
    batch = ["bash", str(ROOT / "scripts" / "slurm" / "requeue.sh"), *launch]
    code, err = _preempt(batch, work, env2, "two", after=3)
    step = _was_preempted(code, err, work, "two", after=3)
    assert requeued.read_text() == "4243\n" and "a5: SIGUSR1 to the stage process(es)" in err, err[-3000:]
    assert err.count(f"preempted: sft@full at optimizer step {step} of {STEPS}") == 2, err[-3000:]  # each rank's
    ok(subprocess.run(batch, cwd=work, env=env2, capture_output=True, text=True))  # the requeued job
    assert requeued.read_text() == "4243\n"  # it ended: no second requeue
    weights_close(work / "models" / "two", work / "models" / "straight", atol=1e-5)
    no_resume_state(work / "scratch")


CATCHER = """import signal, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: (out / sys.argv[2]).write_text("got it"))
if sys.argv[2] == "stage":  # a process under it that takes the signal too: the stage's to pass on, not the walker's
    child = subprocess.Popen([sys.executable, __file__, sys.argv[1], "rank"])
(out / f"{sys.argv[2]}.ready").write_text("")
time.sleep(60)
"""


def test_preempt_signals_the_topmost_processes_under_it_that_take_sigusr1(tmp_path):
    """`--preempt PID` (requeue.sh's): past the processes that do not take SIGUSR1 (a shell ignoring it, as DVC does
    under requeue.sh) to the first that does, and not below it (its launcher passes it on to the ranks)."""
    from a5core.stage.launch import preempt, takes_sigusr1

    (tmp_path / "catcher.py").write_text(CATCHER)
    shell = f"trap '' USR1; {sys.executable} {tmp_path / 'catcher.py'} {tmp_path} stage; true"  # not exec'd
    proc = subprocess.Popen(["bash", "-c", shell], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "rank.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not takes_sigusr1(proc.pid)
        sent = preempt(proc.pid)
        assert len(sent) == 1 and takes_sigusr1(sent[0])
        while not (tmp_path / "stage").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert (tmp_path / "stage").read_text() == "got it" and not (tmp_path / "rank").exists()
        assert proc.poll() is None  # the shell ignored it
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_signal_during_a_grpo_step_checkpoints_after_it_and_the_resume_ends_where_an_unstopped_run_does(
    tiny, tmp_path, monkeypatch, staleness
):
    """In process, the GRPO loop (synchronous, and with the next step's rollouts in flight): SIGUSR1 during step 2
    stops the run after step 2 with a checkpoint though `checkpoint_every` is 0; the run started again from other
    weights resumes from it (the weights are the checkpoint's) and ends with the weights of a run never stopped."""
    import copy

    import torch

    from a5core.generation.hf import HFBackend
    from a5core.run import checkpoint
    from a5core.run.checkpoint import Checkpointer, Preempted
    from tests.support.loops import grpo_cfg, run_grpo

    model, tok = tiny
    async_ = dict(max_staleness=1, tis_cap=2.0) if staleness else {}
    cfg = grpo_cfg(n_grpo_steps=4, max_tokens=6, entropy_coef=0.05, lr=1e-2, checkpoint_every=0, **async_)

    def train(name: str, policy, **kw):
        backend = HFBackend(policy, tok, batch_size=8)
        return run_grpo(policy, tok, tmp_path / name, cfg, backend=backend, **kw)

    monkeypatch.setattr(checkpoint, "_asked", [])
    handlers = {sig: signal.getsignal(sig) for sig in checkpoint.PREEMPTING}
    checkpoint.take_preemption_signals()
    try:
        straight = copy.deepcopy(model)
        train("straight", straight)
        with pytest.raises(Preempted) as stop:
            train("stopped", copy.deepcopy(model), ckpt=Checkpointer(tmp_path / "ck", "fp", 0), signal_at=2)
        assert stop.value.step == 2 and stop.value.args[0] == "SIGUSR1: checkpointed after step 2"
        checkpoint._asked.clear()  # the requeued run's process has had no signal
        other = copy.deepcopy(model)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(0.01)  # a fresh start from these would end elsewhere
        details, _ = train("resumed", other, ckpt=Checkpointer(tmp_path / "ck", "fp", 0))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert details["steps_done"] == 4
    weights = [m.state_dict() for m in (straight, other, model)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
