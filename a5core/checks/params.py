"""The whole params file checked: every section and named run (types, ranges, rules, unknown keys), then what the
values point at (a5core/checks/inputs.py). The check_params stage runs it, and every other stage is downstream
of that stage, so a typo in `grpo` fails before any work, not after an hour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from a5core.base.typed import ConfigError, Section, closest, from_dict, read_params, with_run
from a5core.checks import inputs
from a5core.config.sections import (
    RUN_NAME,
    DataConfig,
    EvalConfig,
    GenerationConfig,
    LoggingConfig,
    ModelConfig,
    ReplicatesConfig,
    SFTRun,
)
from a5core.model.distributed import DistributedConfig
from a5core.rl.ei import EIConfig
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.sft import SFTConfig

# Every section of a params file and its class. `*_runs` sections are dicts of named overrides on the section they
# name (None: the entries are complete SFTRun records).
SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "generation": GenerationConfig,
    "logging": LoggingConfig,
    "distributed": DistributedConfig,
    "eval": EvalConfig,
    "validation": EvalConfig,
    "sft": SFTConfig,
    "ei": EIConfig,
    "grpo": GRPOConfig,
    "replicates": ReplicatesConfig,
}
RUN_SECTIONS = {"sft_runs": None, "ei_runs": "ei", "grpo_runs": "grpo"}


def _section_class(name: str) -> type[Section]:
    return SECTIONS[name]


def _problems(cls, data: Any, name: str) -> list[str]:
    """from_dict's problems as lines ([] when valid)."""
    try:
        from_dict(cls, data, name)
    except ConfigError as err:
        return str(err).splitlines()
    return []


def _run_problems(params: dict, runs: str, base: str | None) -> list[str]:
    """Problems of every entry of a `*_runs` dict; a problem the shared section already has is not repeated per run."""
    entries = params.get(runs)
    if entries is None:
        return []
    if not isinstance(entries, dict):
        return [f"{runs}: expected a mapping of named runs, got {entries!r}"]
    shared = params.get(base) if base and isinstance(params.get(base), dict) else {}
    inherited = {p.split(":", 1)[1] for p in _problems(_section_class(base), shared, base)} if base else set()
    found = []
    for run, overrides in entries.items():
        name = f"{runs}.{run}"
        if not isinstance(run, str) or not RUN_NAME.fullmatch(run) or ".." in run:
            found.append(f"{runs}: run name {run!r} must match {RUN_NAME.pattern} (it becomes a path)")
        elif overrides is not None and not isinstance(overrides, dict):
            found.append(f"{name}: expected a mapping, got {overrides!r}")
        elif base is not None and "init_policy" in (overrides or {}):
            found.append(f"{name}: init_policy cannot differ per run; set {base}.init_policy")
        elif base is None:
            found += _problems(SFTRun, overrides or {}, name)
        else:
            merged = _problems(_section_class(base), with_run(params, base, runs, run), name)
            found += [p for p in merged if p.split(":", 1)[1] not in inherited]
    return found


def _unknown_section(name: str, known: list[str]) -> str:
    guess = closest(str(name), known)
    return f"unknown section {name!r}; " + (f"did you mean {guess!r}?" if guess else f"known sections: {known}")


def section_problems(params: dict[str, Any], path: str | Path = "params.yaml") -> list[str]:
    """Every problem of the sections and named runs of a params mapping (types, ranges, rules, unknown keys)."""
    known = list(SECTIONS) + list(RUN_SECTIONS)
    if not params:
        return [f"{path}: empty; it needs the sections {known} (python -m tools.profile <profile> writes it)"]
    found = [_unknown_section(name, known) for name in params if name not in known]
    found += [
        f"missing section {name!r} (every profile in conf/profile/ has it)" for name in known if name not in params
    ]
    for name in SECTIONS:
        if name in params:
            found += _problems(_section_class(name), params[name], name)
    for runs, base in RUN_SECTIONS.items():
        found += _run_problems(params, runs, base)
    return found


def check_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Validate every section and named run of a params file; raise one ConfigError listing every problem."""
    params = read_params(path)
    found = section_problems(params, path)
    if params:
        # what the values point at (data files, init_policy folders, the reward contract)
        found += inputs.problems(params, path)
    if found:
        raise ConfigError(f"{path}: {len(found)} problem(s):\n  - " + "\n  - ".join(found))
    return params
