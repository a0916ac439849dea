"""Artifacts: Parquet and JSON written atomically (temp file + rename) with provenance, and checked readers.

- Provenance = the stage name, its resolved params and SHA-256 hashes of its inputs: a pure function of what the
  stage ran on, so a rerun on the same inputs writes the same bytes and DVC invalidates nothing downstream. It is
  stored in the Parquet schema metadata under `a5.provenance`, and in model folders as `provenance.json`.
- What varies between two runs of the same inputs (commit, time, host, CPU, autocast in force, durations) is not
  here: it goes to the stage's `run_record.json` (a5core/base/run_record.py), which DVC ignores.
- `content_hash`: a hash of rows' values (not of a file's bytes), for protocol fingerprints.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

PROVENANCE_KEY = b"a5.provenance"


def hash_path(path: str | Path) -> str:
    """SHA-256 of a file, or of a folder's files (names and contents, sorted).

    A stage hashes its input model twice (resume fingerprint, provenance); the second time is served from a
    cache keyed by every file's size and modification time.
    """
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return _hash_files(str(path), tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=64)
def _hash_files(root: str, files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    is_dir = Path(root).is_dir()
    for name, _, _ in files:
        f = Path(name)
        h.update(str(f.relative_to(root) if is_dir else f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, (tuple, set)):
        return list(obj)
    return str(obj)


def provenance(stage: str, params: Any, inputs: dict[str, str | Path] | None = None) -> dict[str, Any]:
    """The provenance record of one stage's outputs: deterministic (no time, commit or host; see run_record.py)."""
    return {
        "stage": stage,
        "params": json.loads(json.dumps(params, default=_jsonable)),
        "inputs": {name: hash_path(p) for name, p in (inputs or {}).items() if Path(p).exists()},
    }


def content_hash(rows: list[dict], columns: list[str]) -> str:
    """SHA-256 of the values of `columns` in `rows`, in order: what the rows say, whatever file metadata held them."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps([row.get(c) for c in columns], default=str).encode() + b"\n")
    return h.hexdigest()


def umask() -> int:
    """This process's umask (Linux reports it; elsewhere read by setting it back at once)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_target(path: Path):
    """A temporary file beside `path` (renamed onto it once written), with the mode a plain open() would give it:
    mkstemp's 0600 would leave a shared workspace's outputs, and DVC's cache copies of them, unreadable to the group."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.fchmod(fd, 0o666 & ~umask())
    os.close(fd)
    return Path(tmp)


def default_modes(folder: Path) -> None:
    """Give every file and folder under `folder` the mode a plain open() or mkdir() would (some writers, safetensors'
    among them, write through 0600 temporary files)."""
    mask = umask()
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def fresh_dir(beside: Path) -> Path:
    """A temporary folder beside `beside` (renamed onto it once filled), with the mode a plain mkdir would give it
    (not mkdtemp's 0700)."""
    beside.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{beside.name}.", dir=beside.parent))
    tmp.chmod(0o777 & ~umask())
    return tmp


def write_parquet(
    table: pa.Table | list[dict], path: str | Path, prov: dict | None = None, schema: pa.Schema | None = None
) -> Path:
    """Write rows or a table atomically; provenance goes into the schema metadata."""
    path = Path(path)
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pylist(list(table), schema=schema)
    meta = dict(table.schema.metadata or {})
    if prov is not None:
        meta[PROVENANCE_KEY] = json.dumps(prov).encode()
    table = table.replace_schema_metadata(meta)
    tmp = _atomic_target(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_parquet(path: str | Path, required: list[str] | pa.Schema | None = None) -> pa.Table:
    """Read a Parquet file and check that it has the required columns (and types, for a schema)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (did the stage that writes it run?)")
    table = pq.read_table(path)
    if isinstance(required, pa.Schema):
        for fld in required:
            if fld.name not in table.schema.names:
                raise ValueError(f"{path}: missing column {fld.name!r}; has {table.schema.names}")
            if not table.schema.field(fld.name).type.equals(fld.type) and table.num_rows:
                raise ValueError(
                    f"{path}: column {fld.name!r} is {table.schema.field(fld.name).type}, expected {fld.type}"
                )
    elif required:
        missing = [c for c in required if c not in table.schema.names]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}; has {table.schema.names}")
    return table


def read_provenance(path: str | Path) -> dict[str, Any]:
    """Provenance of a Parquet file or a folder; raises if absent."""
    path = Path(path)
    if path.is_dir():
        f = path / "provenance.json"
        if not f.exists():
            raise ValueError(f"{path}: no provenance.json")
        return json.loads(f.read_text())
    meta = pq.read_schema(path).metadata or {}
    if PROVENANCE_KEY not in meta:
        raise ValueError(f"{path}: no a5 provenance in the Parquet metadata")
    return json.loads(meta[PROVENANCE_KEY])


def strict_json(obj: Any) -> Any:
    """`obj` with NaN and infinities as null (JSON has no such numbers; strict parsers reject `NaN`)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def write_json(obj: Any, path: str | Path) -> Path:
    """JSON written atomically; dataclasses as dicts, NaN/inf as null (valid JSON for strict parsers)."""
    path = Path(path)
    tmp = _atomic_target(path)
    try:
        plain = json.loads(json.dumps(obj, default=_jsonable))
        tmp.write_text(json.dumps(strict_json(plain), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(text: str, path: str | Path) -> Path:
    path = Path(path)
    tmp = _atomic_target(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
