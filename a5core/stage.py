"""Small helpers shared by the stage scripts: arguments (paths come from dvc.yaml) with every params section
validated first, the entry point that turns the project's own errors into one line, torch setup, row I/O."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from a5core.config import ConfigError, check_params
from a5core.progress import announce
from a5core.records import read_rows

# The errors the project raises itself, each with what to do: a stage ends on one of them with one line, no
# traceback (anything else keeps its traceback). Named, not imported: importing vLLM's or EI's module here would
# make every stage depend on it (tools/stage_deps.py).
PROJECT_ERRORS = {
    "a5core.typed.ConfigError": "fix it in the params file (params.yaml, conf/profile/*.yaml or the -S overrides)",
    "a5core.records.DataError": "fix the data file or the data params, then rerun",
    "a5core.grader.pool.RewardFnError": "fix validation.reward_fn / eval.reward_fn (module:function)",
    "a5core.grader.pool.GraderStartError": "check that the reward function imports in a fresh process",
    "a5core.grader.reward.GroundTruthError": "fix the ground truth in the data",
    "a5core.generation.vllm.WeightSyncError": "generation.backend: hf trains without the vLLM engine",
    "a5core.ei.NoCorrectSamples": "or set ei.if_no_correct: skip to pass the policy on untrained",
}


class _KnownNoise(logging.Filter):
    """Drops the warnings libraries print on every model stage that say nothing about this run, and nothing else:
    - torchao 0.18's compiled kernels (`torchao/_C*.so`: mxfp8 and CUTLASS, GPU kernels a5 does not use) are built for
      torch 2.11, so on the pinned torch they fail to load, which torchao logs at import (transformers imports it
      whenever it loads or saves a model); a5 uses only torchao's Python optimizers (a5core/optim.py);
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


def _hint(err: BaseException) -> str | None:
    for cls in type(err).__mro__:
        hint = PROJECT_ERRORS.get(f"{cls.__module__}.{cls.__qualname__}")
        if hint is not None:
            return hint
    return None


def run(main: Callable[[], None]) -> None:
    """Run a stage's `main`: an error the project detected (PROJECT_ERRORS) exits 1 with one line `error: ...`
    naming the file or key and what to do; any other exception keeps its traceback."""
    try:
        main()
    except Exception as err:
        hint = _hint(err)
        if hint is None:
            raise
        text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
        sys.exit(f"error: {text} ({hint})")


def args(*names: str, **extra) -> argparse.Namespace:
    """`--name PATH` for each name, plus typed extras; then the whole params file is checked, so that a bad value in
    any section stops the first stage that runs, with every problem listed, before any work."""
    quiet_known_noise()
    announce()  # one line on the whole pipeline, from a process of its own (a5core/progress.py)
    parser = argparse.ArgumentParser()
    for name in names:
        parser.add_argument(f"--{name}", required=True)
    for name, tp in extra.items():
        parser.add_argument(f"--{name}", type=tp, default=None)
    parser.add_argument("--params", default="params.yaml")
    parsed = parser.parse_args()
    try:
        # first, a GPU profile on a machine that cannot run it: the user must hear "no CUDA here" before being sent
        # to fetch its data (check_params checks the data files). Imported by name: a refusal changes no output, so
        # editing the checks reruns no stage (tools/stage_deps.py)
        importlib.import_module("a5core.preflight").check(parsed.params)
        check_params(parsed.params)
    except ConfigError as err:
        sys.exit(f"error: {err}\nNothing was run. Fix these values in {parsed.params} (or the -S overrides) and rerun.")
    if getattr(parsed, "model", None):
        _check_model_folder(parsed.model, parsed.params)
    return parsed


def _check_model_folder(model: str, params: str) -> None:
    """The stage's input model folder must be there: else which stage of dvc.yaml writes it (checked by name, as
    check_params checks: a refusal changes no output)."""
    problem = importlib.import_module("a5core.inputs").model_folder_problem(model, params)
    if problem:
        sys.exit(f"error: {problem}. Nothing was run.")


def setup_torch(seed: int = 0, share=lambda cores: cores) -> torch.device:
    """Seed torch, use every core (A5_THREADS to limit; `share` divides them among a node's processes), and return
    the training device (cuda:0 when present)."""
    torch.manual_seed(seed)
    torch.set_num_threads(share(int(os.environ.get("A5_THREADS", os.cpu_count() or 1))))
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def rows(path: str | Path, required: list[str] | tuple[str, ...]) -> list[dict]:
    """The rows of a Parquet input, checked (columns, their record types, no nulls, unique ids, some rows) before
    any work: a5core.records.read_rows."""
    return read_rows(path, required)
