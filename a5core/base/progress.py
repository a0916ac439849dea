"""Progress bars that end cleanly in log files: `bar(...)` is tqdm that redraws in place on a terminal (and clears
itself), and in a log file (`dvc repro > log`) redraws at most every 30 s and ends with a newline, so the next message
starts on a line of its own. (The one line per stage about the whole pipeline is a5core/stage/entry.py's `announce`.)
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def bar(total: int, desc: str, unit: str = "it", disable: bool = False) -> tqdm:
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, leave=not tty, mininterval=0.1 if tty else 30)
