"""Per-step and per-eval logs as CSV files that `dvc plots` draws (rewritten atomically on each write), and
their reader."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from a5core.artifacts import write_text


class RunLog:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rows: dict[str, list[dict]] = {}

    def __call__(self, kind: str, row: dict) -> None:
        flat = {k: v for k, v in row.items() if isinstance(v, (int, float, str, bool)) or v is None}
        self.rows.setdefault(kind, []).append(flat)
        fields = list(dict.fromkeys(k for r in self.rows[kind] for k in r))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fields)
        w.writeheader()
        w.writerows(self.rows[kind])
        write_text(buf.getvalue(), self.folder / f"{kind}.csv")


def read_log(path: str | Path) -> list[dict]:
    """The rows of a RunLog CSV, numbers as int or float (other values stay strings); [] when there is no file."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [{k: _num(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _num(v: str):
    for tp in (int, float):
        try:
            return tp(v)
        except (TypeError, ValueError):
            pass
    return v
