"""tools/recache.py through real DVC (issue 58, item 6): an output whose cache object was lost while the workspace
holds it intact goes back into the cache, so `dvc repro` trains nothing; a lost output the workspace changed is left
to `dvc repro`."""

import hashlib
import subprocess
import sys
from pathlib import Path

from tools import recache

TRAIN = "import pathlib as p; p.Path('model').mkdir(); p.Path('model/w.bin').write_text('weights'); " + (
    "p.Path('model/cfg.json').write_text('{}'); p.Path('metrics.json').write_text('{}'); "
    "open('runs.log', 'a').write('train\\n')"
)
USE = "import pathlib as p; p.Path('used.txt').write_text('used ' + p.Path('model/w.bin').read_text())"
DVC_YAML = f"""stages:
  train:
    cmd: {sys.executable} -c "{TRAIN}"
    outs:
      - model
      - metrics.json:
          cache: false
  use:
    cmd: {sys.executable} -c "{USE}"
    deps:
      - model
    outs:
      - used.txt
"""


def dvc(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "dvc", *args], capture_output=True, text=True, check=True)
    return out.stdout


def lose(path: str) -> Path:
    """Delete the cache object of the workspace file `path` (its md5, as DVC's cache names it); returns it."""
    from dvc.repo import Repo

    md5 = hashlib.md5(Path(path).read_bytes()).hexdigest()
    with Repo(".") as repo:
        obj = Path(repo.cache.local.path) / md5[:2] / md5[2:]  # .dvc/cache/files/md5/ab/cdef...
    obj.unlink()
    return obj


def test_an_intact_workspace_output_goes_back_into_the_cache_and_nothing_retrains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    dvc("init", "-q")
    Path(".gitignore").write_text("runs.log\n")
    Path("dvc.yaml").write_text(DVC_YAML)
    dvc("repro", "-q")
    lock = Path("dvc.lock").read_text()
    obj = lose("model/w.bin")
    assert "not in cache" in dvc("status")

    assert recache.main(["--dry"]) == 0
    assert "train: model can be put back" in capsys.readouterr().out and not obj.exists()

    assert recache.main([]) == 0
    assert "train: model put back from the workspace" in capsys.readouterr().out
    assert obj.read_text() == "weights" and Path("dvc.lock").read_text() == lock
    assert "up to date" in dvc("status")
    dvc("repro", "-q")
    assert Path("runs.log").read_text() == "train\n"  # trained once: the repro ran nothing

    obj = lose("model/w.bin")
    Path("model/w.bin").write_text("other bytes")  # the workspace no longer holds what the stage made
    assert recache.main([]) == 1
    assert "train: model not put back (model is modified in the workspace; dvc repro)" in capsys.readouterr().out
    assert not obj.exists() and Path("dvc.lock").read_text() == lock
    dvc("repro", "-q")
    assert Path("runs.log").read_text() == "train\ntrain\n" and obj.read_text() == "weights"
