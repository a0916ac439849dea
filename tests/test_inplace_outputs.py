"""An output changed in place never poisons DVC's cache (issue 50, reports/inplace_outputs.md): on the smoke profile,
after `dvc repro sft@filtered`, a Parquet output and a model file are truncated, overwritten (same size, other bytes)
and appended to in place, as root, and `dvc repro` of their stage either restores a valid file (its md5 is the one
dvc.lock records and it loads) or fails with one line naming it; every object in `.dvc/cache` keeps the md5 of its
name. A cache object that holds other bytes anyway (written through a hard link under the old `cache.type`) is
refused by `tools.push_runs` before anything is pushed, and `tools.push_runs --repair` + `dvc repro` mends it."""

import hashlib
import json
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from safetensors import safe_open

from a5core.run.preflight import cache_link_problem
from tests.support.repos import ok, scratch_repo

PARQUET = ("data/prepared/train.parquet", "prepare_math", None)  # (file, stage, the dvc.lock output it is in)
MODEL = ("models/sft_filtered/model.safetensors", "sft@filtered", "models/sft_filtered")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, callable]:
    """The working tree as a fresh git repo on the smoke profile (tests/support/repos.py), after
    `dvc repro sft@filtered` (the six stages up to the model)."""
    work, run = scratch_repo(tmp_path_factory.mktemp("inplace"), "smoke")
    ok(run("dvc", "repro", MODEL[1]))
    return work, run


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def recorded_md5(work: Path, file: str, folder: str | None) -> str:
    """The md5 dvc.lock records for `file` (for a file inside an output folder: the folder's listing in the cache,
    named by dvc.lock's hash of the folder)."""
    outs = [o for s in yaml.safe_load((work / "dvc.lock").read_text())["stages"].values() for o in s.get("outs", [])]
    out = next(o for o in outs if o["path"] == (folder or file))
    if folder is None:
        return out["md5"]
    listing = work / ".dvc" / "cache" / "files" / "md5" / out["md5"][:2] / out["md5"][2:]
    relpath = Path(file).relative_to(folder).as_posix()
    return next(e["md5"] for e in json.loads(listing.read_text()) if e["relpath"] == relpath)


def loads(path: Path) -> None:
    if path.suffix == ".parquet":
        pq.read_table(path)
    else:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                f.get_tensor(key)


def corrupt_cache_objects(work: Path) -> list[str]:
    """Objects of `.dvc/cache/files/md5` whose md5 is not their name (a `.dir` listing's name is its bytes' md5)."""
    root = work / ".dvc" / "cache" / "files" / "md5"
    return [
        str(p.relative_to(root))
        for p in sorted(root.glob("??/*"))
        if p.is_file() and not p.name.startswith(".") and md5(p) != p.parent.name + p.name.removesuffix(".dir")
    ]


def change_in_place(path: Path, how: str) -> None:
    """What a user or a tool does to an output without replacing the file (the same inode), as root: DVC's read-only
    mode does not stop it."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        if how == "truncate":
            f.truncate(size // 2)
        elif how == "overwrite":  # same size, other bytes
            data = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0xFF for b in data))
        else:
            f.seek(0, os.SEEK_END)
            f.write(b"appended garbage\n" * 64)


def mend(work: Path, run) -> None:
    """Valid outputs and a consistent cache again after a failed case, so that each case fails on its own."""
    assert run(sys.executable, "-m", "tools.push_runs", "--repair").returncode == 0
    assert run("dvc", "repro", MODEL[1]).returncode == 0
    assert corrupt_cache_objects(work) == []


@pytest.mark.slow
@pytest.mark.parametrize("target", [PARQUET, MODEL], ids=["parquet", "model"])
@pytest.mark.parametrize("how", ["truncate", "overwrite", "append"])
def test_an_output_changed_in_place_is_restored_or_refused(repo, how, target):
    work, run = repo
    file, stage, folder = target
    path = work / file
    want = recorded_md5(work, file, folder)
    if md5(path) != want or corrupt_cache_objects(work):  # an earlier case failed: start this one from valid bytes
        mend(work, run)
    change_in_place(path, how)
    assert md5(path) != want
    r = run("dvc", "repro", stage)
    if r.returncode == 0:  # restored: the recorded bytes, a file that loads
        assert md5(path) == want, f"dvc repro exited 0 and left {file} corrupt ({how}):\n{r.stdout[-2000:]}"
        loads(path)
        assert recorded_md5(work, file, folder) == want
        status = run("dvc", "status", stage)
        assert status.returncode == 0 and "up to date" in status.stdout, status.stdout
    else:  # refused: one line names the file
        assert any(file in line for line in (r.stdout + r.stderr).splitlines()), r.stdout[-2000:] + r.stderr[-2000:]
    assert corrupt_cache_objects(work) == []


@pytest.mark.slow
def test_push_runs_refuses_a_corrupt_cache_object_and_repair_mends_it(repo, tmp_path):
    """A cache object with other bytes under its name (as a write through the old hard links left it): push_runs
    names it and pushes nothing; `--repair` deletes it and `dvc repro` rebuilds the output and its object."""
    work, run = repo
    if corrupt_cache_objects(work):
        mend(work, run)
    file, stage, _ = PARQUET
    want = recorded_md5(work, file, None)
    obj = work / ".dvc" / "cache" / "files" / "md5" / want[:2] / want[2:]
    os.chmod(obj, 0o644)
    change_in_place(obj, "truncate")
    os.chmod(obj, 0o444)  # as DVC leaves it: read-only, so DVC trusts it without hashing
    assert corrupt_cache_objects(work) == [f"{want[:2]}/{want[2:]}"]
    remote = tmp_path / "remote"
    assert run("dvc", "remote", "add", "-d", "store", str(remote)).returncode == 0
    r = run(sys.executable, "-m", "tools.push_runs")
    assert r.returncode != 0
    # its one line (DVC's own warnings about this partly reproduced DAG's unrun stages may come before it)
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("push_runs:")]
    assert len(lines) == 1 and want[2:] in lines[0] and "--repair" in lines[0], lines
    assert not remote.exists() or not any(p.is_file() for p in remote.rglob("*")), "something was pushed"
    r = run(sys.executable, "-m", "tools.push_runs", "--repair")
    assert r.returncode == 0 and want[2:] in r.stdout, r.stdout + r.stderr
    assert corrupt_cache_objects(work) == []
    r = run("dvc", "repro", stage)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert md5(work / file) == want and obj.exists() and md5(obj) == want
    loads(work / file)
    r = run(sys.executable, "-m", "tools.push_runs")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert corrupt_cache_objects(work) == []


@pytest.mark.parametrize("types", ["hardlink", "symlink", "hardlink,copy", "reflink,symlink", ["symlink"]])
def test_a_cache_that_links_outputs_is_refused(types):
    problem = cache_link_problem(types.split(",") if isinstance(types, str) else types)
    assert problem and "links outputs to the cache" in problem and "reflink,copy" in problem


@pytest.mark.parametrize("types", [None, "copy", "reflink", "reflink,copy"])
def test_a_cache_of_copies_is_accepted(types):
    assert cache_link_problem(types.split(",") if types else types) is None


@pytest.mark.slow
@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_every_stage_refuses_a_linked_cache_before_any_work(repo, link):
    """Set in the repo's local config (where DVC reads it after .dvc/config), a linked cache stops the stage DVC runs
    first with one line, and nothing of it is recorded; back to a5's default, the same command passes."""
    work, run = repo
    assert run("dvc", "config", "--local", "cache.type", link).returncode == 0
    try:
        lock = (work / "dvc.lock").read_text()
        r = run("dvc", "repro", "-f", "--single-item", "check_params")
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert r.returncode != 0 and len(errors) == 1 and f"cache.type {link} links outputs" in errors[0], r.stderr
        assert "Traceback" not in r.stderr and (work / "dvc.lock").read_text() == lock
    finally:
        assert run("dvc", "config", "--local", "--unset", "cache.type").returncode == 0
    ok(run("dvc", "repro", "-f", "--single-item", "check_params"))
