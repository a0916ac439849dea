"""reports/README.md's date column, checked against git: a row's date is the last change of its files, as its header
says (`git log -1 --format=%ad --date=short -- <file>`; a file the working tree changes: today).

    python -m tools.report_dates            # the rows whose date differs (exit 1 when there are any)
    python -m tools.report_dates --write    # rewrite those dates

tests/test_reports.py runs the check, so an index date cannot go stale silently.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "reports" / "README.md"
DATE = re.compile(r"\d{4}-\d\d-\d\d")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def last_change(path: str) -> str | None:
    """The date of `path`'s last change: today if the working tree changes it, else its last commit's (None: git
    knows nothing of it)."""
    if _git("status", "--porcelain", "--", path):
        return time.strftime("%Y-%m-%d")
    return _git("log", "-1", "--format=%ad", "--date=short", "--", path) or None


def rows(text: str) -> list[tuple[int, list[str], str]]:
    """(line number, the files its first cell links, its date cell) of every table row that links a file."""
    found = []
    for i, line in enumerate(text.splitlines()):
        cells = line.split("|")
        if line.startswith("| [") and len(cells) >= 6:
            found.append((i, re.findall(r"\]\(([^)#]+)\)", cells[1]), cells[4]))
    return found


def stale(text: str) -> list[tuple[int, str, str]]:
    """(line number, the date cell, the date git gives) of each row whose latest date is not its files' last change."""
    out = []
    for i, files, cell in rows(text):
        dates = [d for f in files if (d := last_change(f"reports/{f}"))]
        if dates and max(DATE.findall(cell), default="") != max(dates):
            out.append((i, cell.strip(), max(dates)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the stale dates")
    args = ap.parse_args()
    text = INDEX.read_text()
    found = stale(text)
    if args.write and found:
        lines = text.splitlines(keepends=True)
        for i, _, date in found:
            cells = lines[i].split("|")
            cells[4] = f" {date} "
            lines[i] = "|".join(cells)
        INDEX.write_text("".join(lines))
    for i, cell, date in found:
        print(f"reports/README.md:{i + 1}: {cell} -> {date}{' (rewritten)' if args.write else ''}")
    sys.exit(1 if found and not args.write else 0)


if __name__ == "__main__":
    main()
