"""A second experiment in a busy checkout records nothing under the wrong params (issue 58, item 1): DVC frees its
repository lock while a stage's command runs, and a second `dvc exp run -S ...` in the same checkout writes
params.yaml before DVC refuses it as busy. The running stage pinned params.yaml's values at its start
(a5core/base/typed.py `pin_params`) and reads only those; other values at its end (after a grace for a queued
experiment's stash) end it with one line, so DVC writes neither dvc.lock nor its run cache for it, and its resume
checkpoint is kept.

Fast tier: the pin itself, in process. Slow tier: through real DVC on the smoke profile, the running stage held
(SIGSTOP) while the second experiment runs, so the order is certain."""

import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from a5core.base import typed
from a5core.base.typed import ParamsChanged, check_pinned_params, pin_params, read_params
from a5core.run.kept import keep
from tests.support.repos import ok, ran_stages, scratch_repo
from tools.repo_env import repo_env


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    params = tmp_path / "params.yaml"
    params.write_text("sft:\n  lr: 1.0e-4\n")
    pin_params(params)
    monkeypatch.setattr(typed, "GRACE_S", 0.6)
    yield params
    typed._PINNED.clear()


def test_the_stage_reads_the_values_it_started_with(pinned):
    assert read_params(pinned) == {"sft": {"lr": 1e-4}}
    pinned.write_text("sft:\n  lr: 3.0e-6\n")  # what `dvc exp run -S sft.lr=3e-6` writes beside it
    assert read_params(pinned) == {"sft": {"lr": 1e-4}}  # one set of params for the whole stage


def test_other_values_at_the_end_fail_it_and_keep_its_checkpoint(pinned, tmp_path):
    check_pinned_params()
    pinned.write_text("# a comment\nsft: {lr: 0.0001}\n")
    check_pinned_params()  # the same values: DVC records values, not bytes
    pinned.write_text("sft:\n  lr: 3.0e-6\n")
    with pytest.raises(ParamsChanged, match="changed while this stage ran"):
        check_pinned_params()
    scratch = tmp_path / "scratch" / "sft_x"
    scratch.mkdir(parents=True)
    with pytest.raises(ParamsChanged):
        keep(scratch, "fp", [])  # the resume state stays: a rerun at the params it was made with resumes
    assert scratch.exists()
    pinned.unlink()
    with pytest.raises(ParamsChanged):
        check_pinned_params()


def test_values_that_come_back_within_the_grace_pass(pinned):
    """`dvc exp run --queue` stashes the workspace's params.yaml and puts it back a moment later."""
    original = pinned.read_text()
    pinned.write_text("sft:\n  lr: 3.0e-6\n")
    threading.Timer(0.2, lambda: pinned.write_text(original)).start()
    check_pinned_params()


def test_a_file_nobody_pinned_is_read_as_it_is(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("a: 1\n")
    read_params(other)
    other.write_text("a: 2\n")
    assert read_params(other) == {"a": 2}


def stage_processes(dvc: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(dvc.pid).children(recursive=True)


def wait_for(predicate, timeout_s: float = 600) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def run_cache(work: Path) -> set[str]:
    """The entries of DVC's run cache (`.dvc/cache/runs/<xx>/<stage hash>/<entry>`, a YAML of the run's cmd, deps
    and outs)."""
    return {str(p.relative_to(work)) for p in (work / ".dvc" / "cache" / "runs").rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_second_experiment_beside_a_running_stage_records_nothing(tmp_path):
    work, run = scratch_repo(tmp_path, "smoke")
    ok(run("dvc", "repro", "baseline_eval"))  # sft@8's inputs, so that the next repro runs sft@8 alone
    cache_before = run_cache(work)
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen(["dvc", "repro", "sft@8"], cwd=work, env=repo_env(work), stdout=out, stderr=out)
    try:
        wait_for(lambda: "step 1/" in log.read_text() or first.poll() is not None)
        assert first.poll() is None, log.read_text()[-3000:]
        held = stage_processes(first)
        for p in held:
            p.send_signal(signal.SIGSTOP)  # the stage mid-training, for as long as the second experiment runs
        before = (work / "params.yaml").read_text()
        second = run("dvc", "exp", "run", "-S", "sft.lr=3e-6")
        for p in held:
            p.send_signal(signal.SIGCONT)
        assert second.returncode != 0 and "busy" in second.stdout + second.stderr, second.stderr[-2000:]
        assert (work / "params.yaml").read_text() != before  # DVC wrote the new params, then refused the run
        rc = first.wait(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert rc != 0 and len(errors) == 1 and "params.yaml changed while this stage ran" in errors[0], text[-3000:]
    lock = (work / "dvc.lock").read_text()
    assert "sft@8" not in lock  # dvc.lock records nothing of it ...
    # ... nor the run cache: the one new entry is check_params's, which the second experiment ran at its own params
    # (its output is the same text for any valid params) before DVC refused it at sft@8's lock
    new = [(work / entry).read_text() for entry in run_cache(work) - cache_before]
    assert all(entry.startswith("cmd: python stages/check_params.py") for entry in new), new
    assert (work / "scratch" / "sft_8").exists()  # and its resume checkpoint is kept
    # at the params the second experiment left, sft@8 trains (nothing restored from the run cache) and is recorded
    r = run("dvc", "repro", "sft@8")
    ok(r)
    assert "sft@8" in ran_stages(r) and "skipping run" not in r.stdout and "Restored" not in r.stdout, r.stdout
    recorded = yaml.safe_load((work / "dvc.lock").read_text())["stages"]["sft@8"]["params"]["params.yaml"]
    assert float(recorded["sft"]["lr"]) == 3e-6, recorded["sft"]
    ok(r := run("dvc", "status", "sft@8"))
    assert "up to date" in r.stdout, r.stdout
