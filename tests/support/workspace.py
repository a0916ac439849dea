"""A stage's real command in a smoke-profile copy of the repo, on inputs that pass every check (tests/test_errors.py,
bench/hostile_sweep.py spoil one input at a time):

- `workspace(root)`: the copy (tests/support/repos.py's scratch_repo) with valid prepared Parquet inputs and
  placeholder model folders; returns (folder, run).
- `command(work, name, params)`: stage `name`'s cmd from dvc.yaml, foreach entries resolved, reading `params`.
- `replaced(path, content)`: a context in which `path` holds other bytes (or a table).

May import: the standard library, a5core, PyArrow and tests/support. Test modules and bench import this; it imports no
test module.
"""

import shlex
import sys
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from a5core.base.records import PROBLEM_SCHEMA, SFT_SCHEMA
from a5core.config.sections import read_params
from a5core.run.dvc_stages import dag_stages
from tests.support.repos import scratch_repo

PROBLEM = {"unique_id": "a", "problem": "What is 1+1?", "answer": "2", "solution": "", "subject": "", "level": ""}
TRACE = {"unique_id": "a", "prompt": "Q", "response": "</think> <answer>2</answer>", "ground_truth": "2"}


def _table(row: dict, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{**{n: "" for n in schema.names}, **row}], schema=schema)


def workspace(root: Path):
    """A smoke-profile copy of the repo with valid prepared inputs and placeholder model folders (a config.json:
    enough to pass the folder check; a stage that got as far as loading one would fail with a traceback)."""
    work, run = scratch_repo(root, "smoke")
    for name in ("train", "validation"):
        pq.write_table(_table(PROBLEM, PROBLEM_SCHEMA), work / f"data/prepared/{name}.parquet")
    pq.write_table(_table(TRACE, SFT_SCHEMA), work / "data/prepared/sft.parquet")
    for model in ("base", "sft_filtered"):
        (work / "models" / model).mkdir(parents=True, exist_ok=True)
        (work / "models" / model / "config.json").write_text("{}")
    return work, run


def command(work: Path, name: str, params: str = "params.yaml") -> list[str]:
    """Stage `name`'s cmd from dvc.yaml (foreach entries resolved), reading `params`."""
    for stage_name, body, resolve in dag_stages(read_params(work / "params.yaml"), work):
        if stage_name == name:
            return [sys.executable, *shlex.split(resolve(body["cmd"]))[1:], "--params", params]
    raise KeyError(name)


@contextmanager
def replaced(path: Path, content):
    """`path` holds `content` (bytes, or a table as columns -> values) inside the block, its old bytes after."""
    old = path.read_bytes()
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        pq.write_table(pa.table(content), path)
    try:
        yield
    finally:
        path.write_bytes(old)
