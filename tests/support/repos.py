"""Helpers the slow tests share: a scratch copy of the working tree as a fresh git repo, and what to check of it.

- `scratch_repo(tmp_path, profile)`: tracked and untracked files copied, `profile` selected, one commit; returns the
  folder and a `run(*cmd)` that runs there with `repo_env`'s environment.
- `tree_digest`, `ran_stages`, `ok`: a folder's files by sha256 (volatile run records left out), the stages a
  `dvc repro` ran, and an assertion that a command succeeded with its output.

May import: the standard library and tools/ (`repo_env`, shared with bench/grid_check.py). Test modules import
this; it imports no test module.
"""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tools.repo_env import repo_env

ROOT = Path(__file__).resolve().parents[2]


def scratch_repo(tmp_path: Path, profile: str) -> tuple[Path, callable]:
    """A copy of the working tree (tracked and untracked files) as a fresh git repo with `profile` selected."""
    work = tmp_path / "repo"
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
    env = repo_env(work)

    def run(*cmd):
        return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)

    assert run(sys.executable, "-m", "tools.profile", profile).returncode == 0
    assert run("git", "init", "-q").returncode == 0
    assert run("git", "add", "-A").returncode == 0 and run("git", "commit", "-qm", "smoke").returncode == 0
    return work, run


VOLATILE = ("run_record.json", "timing_")  # a5core/base/run_record.py, history.py: the only files allowed to differ


def tree_digest(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `root` but the volatile records (and bytecode)."""
    return {
        str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(root.rglob("*"))
        if f.is_file() and not f.name.startswith(VOLATILE) and "__pycache__" not in f.parts
    }


def ran_stages(r) -> set[str]:
    return {line.split("'")[1] for line in r.stdout.splitlines() if line.startswith("Running stage")}


def ok(r) -> None:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
