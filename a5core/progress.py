"""Where a run stands: progress bars that end cleanly in log files, and one line per stage about the whole pipeline.

- `bar(...)`: tqdm that redraws in place on a terminal (and clears itself), and in a log file (`dvc repro > log`)
  redraws at most every 30 s and ends with a newline, so the next message starts on a line of its own.
- `announce()`: when DVC runs a stage (`$DVC_STAGE`), `stage.args` calls it to print one line about the whole
  pipeline, `python -m a5core.forecast --line <stage>`, e.g.
  `[dvc repro] stage 21 of 22: grpo@x | 0:12:03 since dvc started | forecast: this stage 2.1 min, 1 more stage 0.1 min`
  It runs in a process of its own beside the stage: the stage starts at once, and what the line reads (DVC's index,
  the run records) is no dependency of the stage's outputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tqdm.auto import tqdm


def bar(total: int, desc: str, unit: str = "it", disable: bool = False) -> tqdm:
    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, leave=not tty, mininterval=0.1 if tty else 30)


def dvc_started() -> float | None:
    """When the `dvc` process that runs this stage started (the nearest ancestor whose command is dvc)."""
    import psutil

    for proc in psutil.Process().parents():
        try:
            words = [os.path.basename(w) for w in proc.cmdline()[:2]]
        except psutil.Error:
            continue
        if "dvc" in words:
            return proc.create_time()
    return None


def announce() -> None:
    """Print the pipeline line for the stage DVC is running (rank 0 only), from a process of its own: the stage goes
    on at once, and nothing the line needs (DVC's index, the forecast) becomes a dependency of the stage."""
    stage = os.environ.get("DVC_STAGE")
    if not stage or os.environ.get("RANK", "0") != "0" or os.environ.get("A5_NO_PIPELINE_LINE"):
        return
    line = [sys.executable, "-m", "a5core.forecast", "--line", stage]
    started = dvc_started()
    line += ["--dvc_started", str(started)] if started else []
    proc = subprocess.Popen(line, stdin=subprocess.DEVNULL)
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it ends; never waited for
