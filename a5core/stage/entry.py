"""What every stage script calls: arguments (paths come from dvc.yaml) with the pre-flight first,
the entry point that turns the project's own errors into one line, torch setup, row I/O.

- `announce()`: when DVC runs a stage (`$DVC_STAGE`), `args` calls it to print one line about the whole pipeline,
  `python -m a5core.checks.forecast --line <stage>`, e.g.
  `[dvc repro] stage 21 of 22: grpo@x | 0:12:03 since dvc started | forecast: this stage 2.1 min, 1 more stage 0.1 min`
  It is computed in a process of its own beside the stage (the stage starts at once, and what the line reads, DVC's
  index and the run records, is no dependency of the stage's outputs) and printed by the stage when ready, or not at
  all if the stage ends first.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import logging
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import torch
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

from a5core.base.errors import ProjectError
from a5core.base.records import read_rows
from a5core.base.typed import ConfigError, check_pinned_params, pin_params
from a5core.run import kept, preflight
from a5core.run.checkpoint import REQUEUE, Preempted
from a5core.run.dvc_stages import model_folder_problem


class _KnownNoise(logging.Filter):
    """Drops the warnings libraries print on every model stage that say nothing about this run, and nothing else:
    - torchao 0.18's compiled kernels (`torchao/_C*.so`: mxfp8 and CUTLASS, GPU kernels a5 does not use) are built for
      torch 2.11, so on the pinned torch they fail to load, which torchao logs at import (transformers imports it
      whenever it loads or saves a model); a5 uses only torchao's Python optimizers (a5core/model/optim.py);
    - torch deprecates `register_constant()` on Enum classes, which torchao calls on two of its own when it loads."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        kernel = text.startswith("Failed to load ") and "/torchao/_C" in text and "Could not load this library" in text
        enum = "is an Enum subclass and is now natively supported by torch.compile" in text
        return not (kernel or enum)


def quiet_known_noise() -> None:
    """Install `_KnownNoise` on the two loggers that print it (idempotent)."""
    for name in ("torchao", "torch.utils._pytree"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownNoise) for f in logger.filters):
            logger.addFilter(_KnownNoise())


def run(main: Callable[[], None]) -> None:
    """Run a stage's `main`: an error the project detected (a `ProjectError`) exits 1 with one line `error: ...`
    naming the file or key and what to do (its `hint`); Ctrl-C exits 130 with one line `interrupted: ...` naming the
    stage, how far it got (a training stage says its optimizer step) and the command that resumes it; a params file
    holding other values than the stage ran with (`pin_params` in `args`) exits 1 after `main` returned; a full disk
    (ENOSPC, EDQUOT) exits 1 with one line naming the file and what to free; any other exception keeps its
    traceback. Under torchrun each error is also written to the rank's error file, for the launcher's last line."""
    try:
        main()
        check_pinned_params()  # params.yaml holds other values than the stage ran with: fail, DVC records nothing
    except ProjectError as err:
        hint = err.hint
        text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
        _fail(f"error: {text} ({hint})")
    except KeyboardInterrupt as err:
        print(interrupted_line(str(err.args[0]) if err.args else ""), file=sys.stderr, flush=True)
        sys.exit(130)
    except Preempted as stop:
        print(preempted_line(str(stop.args[0])), file=sys.stderr, flush=True)
        sys.exit(REQUEUE)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            _record_for_torchrun(err)
            raise
        where = f" writing {err.filename}" if err.filename else ""
        _fail(
            f"error: the disk is full{where} ({os.strerror(err.errno)}). Free space (`dvc gc --workspace` drops cached "
            f"models no branch uses; scratch/ of finished runs) and rerun the same command: a training stage continues "
            "from its last checkpoint"
        )
    except Exception as err:  # its traceback stays; under torchrun its last line names it too
        _record_for_torchrun(err)
        raise


class StageFailed(Exception):
    """A stage's one-line error, as a torchrun rank's error file records it (`_record_for_torchrun`)."""


def _record_for_torchrun(err: BaseException) -> None:
    """Under torchrun, `err` into this rank's error file (TORCHELASTIC_ERROR_FILE, what torch's `@record` writes):
    torchrun's failure summary then shows it, and the launcher's last line names it (a5core.stage.launch)."""
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        with contextlib.suppress(OSError):  # a full disk must not replace the error it is recording
            ErrorHandler().record_exception(err)


def _fail(line: str) -> NoReturn:
    """Exit 1 with the one `line` (recorded for torchrun's summary too: torch writes the exception being handled)."""
    try:
        raise StageFailed(line) from None
    except StageFailed as err:
        _record_for_torchrun(err)
    sys.exit(line)


def interrupted_line(where: str) -> str:
    """The one line Ctrl-C ends a stage with: the stage (`where`: how far a training stage got, else the DVC stage or
    the script) and the command that continues it (a training stage from its last resumable checkpoint)."""
    stage = os.environ.get("DVC_STAGE")
    where = where or stage or Path(sys.argv[0]).stem
    again = (
        "`dvc repro` (or the same `dvc exp run`)"
        if stage
        else f"`{shlex.join([Path(sys.executable).name, *sys.argv])}`"
    )
    return f"interrupted: {where}; {again} continues it (a training stage from its last checkpoint)"


def preempted_line(where: str) -> str:
    """The one line a preempted training stage ends with (`where`: how far it got, the signal, the checkpoint's step):
    what continues it, which the sbatch templates run by requeueing the job."""
    again = (
        "`dvc repro` (or the same `dvc exp run`; a requeued job runs it)"
        if os.environ.get("DVC_STAGE")
        else (f"`{shlex.join([Path(sys.executable).name, *sys.argv])}`")
    )
    return f"preempted: {where}; {again} continues from that checkpoint (exit {REQUEUE})"


def args(*names: str, **extra) -> argparse.Namespace:
    """`--name PATH` for each name, plus typed extras; then the pre-flight (a5core/run/preflight.py) and the stage's
    input model folder; first, the outputs kept in scratch/ that DVC's cache now holds are deleted (`kept.prune`).
    The whole params file is checked by the check_params stage, which every stage is downstream of; a stage's own
    sections are checked again as it types them (`section_of`, the training stages' `StageParams`)."""
    quiet_known_noise()
    announce()  # one line on the whole pipeline, from a process of its own (below)
    parser = argparse.ArgumentParser()
    for name in names:
        parser.add_argument(f"--{name}", required=True)
    for name, tp in extra.items():
        parser.add_argument(f"--{name}", type=tp, default=None)
    parser.add_argument("--params", default="params.yaml")
    parsed = parser.parse_args()
    if os.environ.get("RANK", "0") == "0":  # one process of a distributed stage
        kept.prune()  # finished stages' outputs kept in scratch/ that DVC's cache now holds (a5core/run/kept.py)
    pin_params(parsed.params)  # the stage reads these values; other values at its end (a second experiment) fail it
    try:
        # a GPU profile on a machine that cannot run it: the user must hear "no CUDA here" before being sent to fetch
        # its data (check_params checks the data files)
        preflight.check(parsed.params)
    except ConfigError as err:
        refuse(err, parsed.params)
    if getattr(parsed, "model", None):
        _check_model_folder(parsed.model, parsed.params)
    return parsed


def refuse(err: ConfigError, params: str) -> NoReturn:
    """Exit with every problem of the params, before any work."""
    sys.exit(f"error: {err}\nNothing was run. Fix these values in {params} (or the -S overrides) and rerun.")


def _check_model_folder(model: str, params: str) -> None:
    """The stage's input model folder must be there: else which stage of dvc.yaml writes it."""
    problem = model_folder_problem(model, params)
    if problem:
        sys.exit(f"error: {problem}. Nothing was run.")


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: a SLURM or container cgroup's cores, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def setup_torch(seed: int = 0, share=lambda cores: cores) -> torch.device:
    """Seed torch, use every core this process may run on (A5_THREADS to limit; `share` divides them among a node's
    processes), and return the training device (cuda:0 when present)."""
    torch.manual_seed(seed)
    torch.set_num_threads(share(int(os.environ.get("A5_THREADS", usable_cores()))))
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def rows(path: str | Path, required: list[str] | tuple[str, ...]) -> list[dict]:
    """The rows of a Parquet input, checked (columns, their record types, no nulls, unique ids, some rows) before
    any work: a5core.base.records.read_rows."""
    return read_rows(path, required)


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
    """Print the pipeline line for the stage DVC is running (rank 0 only). A process of its own computes it, so the
    stage goes on at once and nothing the line needs (DVC's index, the forecast) becomes a dependency of the stage;
    this process prints it when it is ready, and a line not ready when the stage ends is dropped with its process: it
    is printed during its own stage or not at all, never below a later stage's lines or after DVC has exited."""
    stage = os.environ.get("DVC_STAGE")
    if not stage or os.environ.get("RANK", "0") != "0" or os.environ.get("A5_NO_PIPELINE_LINE"):
        return
    line = [sys.executable, "-m", "a5core.checks.forecast", "--line", stage]
    started = dvc_started()
    line += ["--dvc_started", str(started)] if started else []
    proc = subprocess.Popen(
        line, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )

    def relay() -> None:
        text = proc.stdout.read().strip()
        if text and proc.wait() == 0:
            print(text, flush=True)

    threading.Thread(target=relay, daemon=True).start()
    atexit.register(_drop, proc)


def _drop(proc: subprocess.Popen) -> None:
    """At the stage's exit: the pipeline line's process, if it is still computing, goes with it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
