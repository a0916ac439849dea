"""Progress bars that end cleanly in log files: `bar(...)` is tqdm that redraws in place on a terminal (and clears
itself), and in a log file (`dvc repro > log`) redraws at most every 30 s and ends with a newline, so the next message
starts on a line of its own. (The one line per stage about the whole pipeline is a5core/stage/entry.py's `announce`.)
`Clock` is a run's training wall-clock, validation left out.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tqdm.auto import tqdm


def bar(total: int, desc: str, unit: str = "it", disable: bool = False) -> tqdm:
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, leave=not tty, mininterval=0.1 if tty else 30)


@dataclass
class Clock:
    """A run's training wall-clock: monotonic seconds since its start, validation left out (`paused`). What a
    run's `perf/wall_s` records and a time budget (`grpo.time_budget_s`) counts, so that runs that validate more
    often are not charged for it (the leaderboard, a5core/report/leaderboard.py, compares methods on it)."""

    start: float = field(default_factory=time.monotonic)

    @classmethod
    def resumed(cls, seconds: float) -> Clock:
        """A clock that already shows `seconds` (a resumed run continues its clock)."""
        return cls(time.monotonic() - seconds)

    def seconds(self) -> float:
        return time.monotonic() - self.start

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count (a validation: a measurement, not training)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.start += time.monotonic() - t0
