"""Checkpoints load with weights_only (a crafted file cannot run code), an unreadable one is moved aside, and a real
stage process killed with SIGKILL mid-training resumes to bit-identical weights."""

import contextlib
import csv
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from a5core.run.checkpoint import Checkpointer
from tests.support.repos import ok, repo_env, tree_digest
from tests.support.resume import kill_repo, kill_when, no_resume_state, sft_cmd, stage_runs, straight_killed_resumed


class Payload:
    def __init__(self, canary):
        self.canary = canary

    def __reduce__(self):
        return (os.system, (f"touch {self.canary}",))


def test_a_crafted_checkpoint_cannot_run_code(tmp_path, capsys):
    canary = tmp_path / "pwned"
    ck = Checkpointer(tmp_path / "run", "fp", 1)
    (tmp_path / "run" / "state").mkdir()
    with open(tmp_path / "run" / "state" / "state.pt", "wb") as f:
        pickle.dump({"step": 3, "x": Payload(canary)}, f)
    assert ck.load() is None and not canary.exists()
    assert "could not be loaded" in capsys.readouterr().err
    assert list((tmp_path / "run").glob("state.corrupt-*"))  # kept aside for inspection


def test_a_truncated_checkpoint_is_moved_aside_and_the_run_restarts(tmp_path):
    ck = Checkpointer(tmp_path, "fp", 1)
    ck.save({"step": 2, "w": torch.ones(1000)})
    assert ck.load()["step"] == 2
    path = tmp_path / "state" / "state.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert ck.load() is None and not (tmp_path / "state").exists()
    ck.save({"step": 1})
    assert ck.load() == {"step": 1} and not list(tmp_path.glob("state.corrupt-*"))  # a good state clears them


def test_a_changed_fingerprint_resumes_from_nothing_left_over(tmp_path):
    old = Checkpointer(tmp_path, "params A", every=1)
    old.save({"step": 1})
    (tmp_path / "state").rename(tmp_path / "state.old")  # as a kill between save()'s two renames leaves it
    assert Checkpointer(tmp_path, "params A", every=1).load() == {"step": 1}
    assert Checkpointer(tmp_path, "params B", every=1).load() is None
    assert not (tmp_path / "state.old").exists()


def test_a_finished_runs_outputs_are_kept_until_dvcs_cache_holds_them(tmp_path, monkeypatch):
    """kept.py: `keep` replaces the resume state by hard links to the outputs (the same inodes: no extra disk) and
    their md5s; `put_back` restores them where DVC deleted them, for the same fingerprint only; `prune` deletes a kept
    folder once DVC's cache holds the model's files (a real DVC repository's cache, its path from DVC's API; metrics
    are `cache: false`), then the folders left empty."""
    from a5core.run import kept

    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], check=True)
    run = Path("scratch") / "ei_G4" / "round_1"
    Checkpointer(run / "sft", "fp", 1).save({"step": 1})
    (Path("models") / "m").mkdir(parents=True)
    (Path("models") / "m" / "w.bin").write_bytes(b"weights")
    Path("metrics.json").write_text("{}")
    kept.keep(run, "fp", ["models/m", "metrics.json", "absent"])
    assert sorted(p.name for p in run.iterdir()) == ["finished"]  # the resume state is gone
    assert (run / "finished" / "0").stat().st_ino == (Path("models") / "m" / "w.bin").stat().st_ino
    assert kept.has(run, "fp") and not kept.has(run, "other")
    shutil.rmtree("models")  # what DVC does before it runs a stage again
    Path("metrics.json").unlink()
    assert kept.put_back(run, "fp") == 2
    assert (Path("models") / "m" / "w.bin").read_bytes() == b"weights" and Path("metrics.json").read_text() == "{}"
    assert kept.prune() == [] and kept.has(run, "fp")  # DVC's cache does not hold them yet
    subprocess.run([sys.executable, "-m", "dvc", "add", "-q", "models/m"], check=True)  # the model: committed
    (Path("scratch") / "other").mkdir()
    assert kept.prune() == [run / "finished"]
    assert not (Path("scratch") / "ei_G4").exists() and (Path("scratch") / "other").exists()
    kept.keep(run, "fp", ["metrics.json"])
    assert kept.put_back(run, "another run's") == 0 and not (run / "finished").exists()  # never another run's
    kept.keep(run, "fp", ["models/m"])
    (Path("models") / "m" / "w.bin").write_bytes(b"written in place")  # through the link: the kept file changes too
    assert not kept.has(run, "fp") and not (run / "finished").exists()  # never other bytes


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_gives_identical_weights(tmp_path):
    work, _, env = kill_repo(tmp_path)
    killed_at = straight_killed_resumed(stage_runs(sft_cmd, work, env), 5).killed_at  # after step 5, well before 24
    assert 0 < killed_at < 24
    ref, resumed = work / "models" / "straight" / "model.safetensors", work / "models" / "resumed" / "model.safetensors"
    assert _sha(resumed) == _sha(ref)
    # every artifact, byte for byte: the model folder (provenance.json included) and the results but the run record
    assert tree_digest(work / "models" / "resumed") == tree_digest(work / "models" / "straight")
    assert tree_digest(work / "results" / "resumed") == tree_digest(work / "results" / "straight")
    assert (work / "run_records" / "resumed" / "run_record.json").exists()
    assert (work / "results" / "resumed" / "logs" / "train.csv").read_text().count("\n") == 25  # header + 24 steps
    no_resume_state(work / "scratch")
    # a checkpoint truncated as by a full disk: the run warns, restarts from scratch, and still ends identical
    state = work / "scratch" / "trunc" / "state" / "state.pt"
    kill_when(sft_cmd("trunc"), work, env, state.exists)
    state.write_bytes(state.read_bytes()[:1000])
    r = subprocess.run(sft_cmd("trunc"), cwd=work, env=env, capture_output=True, text=True)
    ok(r)
    assert "could not be loaded" in r.stderr
    assert _sha(work / "models" / "trunc" / "model.safetensors") == _sha(ref)


@pytest.mark.slow
def test_the_stage_passes_its_compute_settings_to_every_loop(tmp_path):
    """Each training stage's `model` settings travel as one record (a5core/model/compute.py) into its loop: a
    micro-batch budget smaller than any sequence stops the SFT and GRPO stages at their first optimizer step with the
    budget's one-line error (a stage that dropped the record would train on the handout's split and succeed; EI's
    loop: tests/test_rl_loops.py), and the autocast in force is in the run record."""
    import json

    import yaml

    from tests.support.workspace import command

    work, params, env = kill_repo(tmp_path)
    tight = {**params, "model": {**params["model"], "micro_batch_tokens": 4}}
    (work / "tight.yaml").write_text(yaml.safe_dump(tight))
    grpo = command(work, next(n for n in stage_names(work) if n.startswith("grpo@")), "tight.yaml")
    grpo[grpo.index("--model") + 1] = "models/base"  # the fetched model (the smoke repo ran only the baseline)
    for cmd in (sft_cmd("tight", "tight.yaml"), grpo):
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        assert r.returncode != 0 and "does not fit model.micro_batch_tokens=4" in r.stdout + r.stderr, (cmd[1], r)
    one = {**params, "sft": {**params["sft"], "epochs": 1, "checkpoint_every": 0}}
    (work / "one.yaml").write_text(yaml.safe_dump(one))
    ok(subprocess.run(sft_cmd("one", "one.yaml"), cwd=work, env=env, capture_output=True, text=True))
    record = json.loads((work / "run_records" / "one" / "run_record.json").read_text())
    assert record["autocast"]["mode"] == params["model"]["autocast"] and "bf16_autocast" in record["autocast"]
    # generation.dtype bfloat16 reaches the backend of a training stage (its validation) and of the baseline stage:
    # their validations' next-token entropies, taken from the generating distributions, are no longer float32's
    bf16 = {**one, "generation": {**one["generation"], "dtype": "bfloat16"}}
    (work / "bf16.yaml").write_text(yaml.safe_dump(bf16))
    r = subprocess.run(sft_cmd("one_bf16", "bf16.yaml"), cwd=work, env=env, capture_output=True, text=True)
    ok(r)
    assert "generation: from a bf16 copy of the float32 weights" in r.stdout
    assert json.loads((work / "run_records" / "one_bf16" / "run_record.json").read_text())["autocast"][
        "generation_bf16"
    ]
    entropy = {
        run: last_row(work / "results" / run / "logs" / "eval.csv")["eval/entropy"] for run in ("one", "one_bf16")
    }
    assert entropy["one"] != entropy["one_bf16"]
    base = command(work, "baseline_eval", "bf16.yaml")
    base[base.index("--record") + 1] = "run_records/baseline_bf16"
    for flag in ("--generations", "--metrics", "--breakdown", "--report", "--initial"):
        base[base.index(flag) + 1] = f"results/baseline_bf16_{flag[2:]}" + Path(base[base.index(flag) + 1]).suffix
    ok(subprocess.run(base, cwd=work, env=env, capture_output=True, text=True))
    f32, b16 = (
        json.loads((work / "results" / p).read_text())
        for p in ("baseline/breakdown.json", "baseline_bf16_breakdown.json")
    )
    assert f32["eval/entropy"] != b16["eval/entropy"]


def last_row(path: Path) -> dict:
    """The last row of a CSV log."""
    return list(csv.DictReader(path.open()))[-1]


def stage_names(work: Path) -> list[str]:
    from a5core.config.sections import read_params
    from a5core.run.dvc_stages import dag_stages

    return [name for name, _, _ in dag_stages(read_params(work / "params.yaml"), work)]


@pytest.mark.slow
def test_a_stage_whose_dvc_commit_never_happened_puts_its_outputs_back_instead_of_training_again(tmp_path):
    """Issue 58, item 3: DVC killed between a training stage's command and its commit (what a full cache disk, a time
    limit or a lost node leaves: outputs in the workspace, no dvc.lock entry). The rerun, after DVC deleted those
    outputs, puts them back from scratch/ (byte for byte; nothing trained) and DVC commits them, unless the code
    changed in between (then it trains); the next stage's start deletes the kept folder, once DVC's cache holds the
    model's files. Then the cache on a filesystem too small for the model: DVC's commit fails (ENOSPC), and once
    there is room the rerun puts the outputs back, as after the kill."""
    work, _, _ = kill_repo(tmp_path)
    at = partial(subprocess.run, cwd=work, env=repo_env(work), capture_output=True, text=True)
    spec = (work / "dvc.yaml").read_text()
    cmd_end = "--record run_records/sft/${key}\n"  # the end of the sft stages' command
    assert spec.count(cmd_end) == 1
    (work / "dvc.yaml").write_text(spec.replace(cmd_end, cmd_end.rstrip("\n") + " && kill -9 $PPID\n"))
    r = at(["dvc", "repro", "--single-item", "sft@8"])  # $PPID: the shell's parent, DVC
    assert r.returncode == -9, r.stdout[-2000:] + r.stderr[-2000:]
    outs = [work / "models" / "sft_8", work / "results" / "sft" / "8", work / "run_records" / "sft" / "8"]

    def files() -> list[dict]:  # every file's bytes by path, the run record's too (DVC's .gitignore files aside)
        return [
            {p.relative_to(o): p.read_bytes() for p in sorted(o.rglob("*")) if p.is_file() and p.name != ".gitignore"}
            for o in outs
        ]

    first = files()
    assert all(first) and "sft@8" not in (work / "dvc.lock").read_text()  # written, never committed
    assert sorted(p.name for p in (work / "scratch" / "sft_8").iterdir()) == ["finished"]  # no resume state
    # other code since (an executed line; a comment would not count, a5core/base/code.py): outputs that other code
    # made are not put back, the stage trains
    (work / "rewards" / "__init__.py").write_text((work / "rewards" / "__init__.py").read_text() + "EDITED = 1\n")
    r = at(["dvc", "repro", "--single-item", "sft@8"])
    assert r.returncode == -9 and "sft@8: 8 examples" in r.stdout and "put back" not in r.stdout, r.stdout[-3000:]
    made = files()
    assert made != first  # its run record: a run of its own
    (work / "dvc.yaml").write_text(spec)
    r = at(["dvc", "repro", "--single-item", "sft@8"])
    ok(r)
    assert "sft@8: put back the " in r.stdout and "nothing trained" in r.stdout, r.stdout[-3000:]
    assert files() == made  # the run record too: the outputs of the run that trained
    assert "sft@8" in (work / "dvc.lock").read_text() and "up to date" in at(["dvc", "status", "sft@8"]).stdout
    ok(at(["dvc", "repro", "--single-item", "--force", "check_params"]))  # any stage's start prunes
    assert not (work / "scratch").exists()
    # the cache on a full filesystem: DVC's commit of a retrained sft@8 fails for space; with room again, the rerun
    # puts the outputs back
    with small_cache(tmp_path / "cache_fs", at) as make_room:
        r = at(["dvc", "repro", "--single-item", "--force", "sft@8"])
        assert r.returncode != 0 and "No space left" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
        trained = files()
        assert trained != made and "sft@8: 8 examples" in r.stdout  # it trained (its run record is its own)
        make_room()
        r = at(["dvc", "repro", "--single-item", "sft@8"])
        ok(r)
        assert "sft@8: put back the " in r.stdout and "nothing trained" in r.stdout, r.stdout[-3000:]
        assert files() == trained and "up to date" in at(["dvc", "status", "sft@8"]).stdout


@contextlib.contextmanager
def small_cache(where: Path, at):
    """DVC's cache moved to a 64 KiB tmpfs at `where` (skips when this machine refuses the mount); yields a function
    that makes room (remounts it at 1 GiB); unmounted at the end."""
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here: the full-cache case needs one")
    try:
        ok(at(["dvc", "cache", "dir", str(where)]))
        yield lambda: subprocess.run(["mount", "-o", "remount,size=1g", str(where)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
