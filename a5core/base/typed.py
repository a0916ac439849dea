"""Typed sections: the checks behind every params section, independent of what the sections are.

- `from_dict(cls, data, section)` builds a frozen dataclass from a mapping: unknown keys, types, `Literal[...]`
  choices and ranges (`Annotated[int, Bound(lo=1)]`), then the section's own `problems()`, all reported at once.
- `load_yaml` reads YAML 1.2 floats (`3e-6`, as `dvc exp run -S` writes them) and rejects duplicate keys.
- `read_params` reads a params file; `section_of(params, cls, name)`, `run_of(params, cls, section, runs, run)` and
  `entry_of` type its parts (`load_section`, `load_run`: the same from a path); `with_run` is the one merge of a
  section and a named run's overrides (`every_run`: each run's).
- `pin_params(path)` (a stage's prologue) and `check_pinned_params()`: a stage reads its params file once; if the file
  holds other values at its end (a second `dvc exp run` in the same checkout writes params.yaml before DVC refuses it
  as busy), the stage fails, so DVC never records outputs under params that did not make them.

The project's sections are in a5core/config/sections.py; `check_params`, the whole-file check, in
a5core/checks/params.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from a5core.base.errors import ProjectError


class ConfigError(ProjectError, ValueError):
    """A params value is unknown, of the wrong type, out of range, or inconsistent with another."""

    hint = "fix it in the params file (params.yaml, conf/profile/*.yaml or the -S overrides)"


@dataclass(frozen=True)
class Bound:
    """A numeric range for `Annotated[int | float, Bound(...)]` fields (`lo`/`hi` inclusive unless open)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def problem(self, value: float) -> str | None:
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        if not (low or high):
            return None
        lo = "" if self.lo is None else f"{'>' if self.lo_open else '>='} {self.lo:g}"
        hi = "" if self.hi is None else f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return f"must be {' and '.join(s for s in (lo, hi) if s)}, got {value!r}"


Positive = Annotated[int, Bound(lo=1)]
NonNegative = Annotated[int, Bound(lo=0)]
NonNegativeFloat = Annotated[float, Bound(lo=0)]
PositiveFloat = Annotated[float, Bound(lo=0, lo_open=True)]
Fraction = Annotated[float, Bound(lo=0, hi=1)]
TopP = Annotated[float, Bound(0, 1, lo_open=True)]
ClipEpsilon = Annotated[float, Bound(0, 1, lo_open=True, hi_open=True)]  # a ratio clipped to 1 +- eps: eps in (0, 1)


# Keys renamed since earlier releases -> their name now, in any section that has the new one: the old name is refused
# with a pointer to the new (one name per quantity: the learning rate is `lr` in sft, ei, grpo and every run entry).
RENAMED = {"learning_rate": "lr"}
# The names TRL's GRPOConfig and verl's configs give a5's fields -> (a5's name, whose name it is): refused with a
# pointer to a5's, where a spelling guess would mislead (TRL's `beta` is the KL coefficient, not AdamW's `betas`).
PEER_NAMES = {
    "beta": ("kl_coef", "TRL's GRPOConfig"),
    "kl_loss_coef": ("kl_coef", "verl's actor"),
    "use_kl_in_reward": ("kl_in_reward", "verl's algorithm"),
    "kl_penalty": ("kl_estimator", "verl's"),
    "num_generations": ("group_size", "TRL's GRPOConfig"),
    "num_iterations": ("epochs_per_rollout_batch", "TRL's GRPOConfig"),
    "ppo_epochs": ("epochs_per_rollout_batch", "verl's actor"),
    "epsilon": ("cliprange", "TRL's GRPOConfig"),
    "clip_ratio": ("cliprange", "verl's actor"),
    "clip_ratio_low": ("cliprange", "verl's actor"),
    "epsilon_high": ("cliprange_high", "TRL's GRPOConfig"),
    "clip_ratio_high": ("cliprange_high", "verl's actor"),
    "max_completion_length": ("max_tokens", "TRL's GRPOConfig"),
    "entropy_coeff": ("entropy_coef", "verl's actor"),
    "mask_truncated_completions": ("mask_truncated", "TRL's GRPOConfig"),
    "vllm_importance_sampling_cap": ("tis_cap", "TRL's GRPOConfig"),
    "scale_rewards": ("use_std_normalization", "TRL's GRPOConfig"),
}
# Keys that left params -> where the value comes from now (refused with that pointer).
MOVED_OUT = {
    "hosts": "the environment at launch: A5_HOSTS (docs/scaling-out.md)",
    "rdzv_endpoint": "the environment at launch: A5_RDZV_ENDPOINT (docs/scaling-out.md)",
}


class Section:
    """Base of every params section: `problems()` lists violated rules between fields; `validate()` raises them."""

    def problems(self) -> list[str]:
        return []

    def validate(self) -> None:
        found = self.problems()
        if found:
            raise ConfigError("\n".join(found))


def _check_type(name: str, value: Any, tp: Any) -> Any:
    """`value` converted to `tp` (list -> tuple, int -> float), or ConfigError naming `name`."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *marks = typing.get_args(tp)
        value = _check_type(name, value, inner)
        for mark in marks:
            problem = mark.problem(value) if isinstance(mark, Bound) else None
            if problem:
                raise ConfigError(f"{name}: {problem}")
        return value
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{name}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (typing.Union, types.UnionType):
        return _check_union(name, value, typing.get_args(tp))
    if origin in (list, tuple):
        return _check_sequence(name, value, tp)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number, got {value!r}")
        return float(value)
    if tp is Any or (isinstance(tp, type) and isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    raise ConfigError(f"{name}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def _check_union(name: str, value: Any, args: tuple) -> Any:
    if value is None and type(None) in args:
        return None
    errors = []
    for option in args:
        if option is type(None):
            continue
        try:
            return _check_type(name, value, option)
        except ConfigError as err:
            errors.append(err)
    if len(errors) == 1:  # `X | None`: X's own reason (its range, its type), and that null is allowed too
        raise ConfigError(f"{errors[0]} (or null)" if type(None) in args else str(errors[0]))
    raise ConfigError(f"{name}: {value!r} matches none of {args}")


def _check_sequence(name: str, value: Any, tp: Any) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}: expected a list, got {value!r}")
    args = typing.get_args(tp) or (Any,)
    if typing.get_origin(tp) is tuple and Ellipsis not in args:  # a fixed-length tuple, e.g. AdamW betas
        if len(value) != len(args):
            raise ConfigError(f"{name}: expected {len(args)} values, got {len(value)} ({value!r})")
        return tuple(_check_type(f"{name}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    return tuple(_check_type(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value))


def closest(name: str, known: list[str] | tuple[str, ...]) -> str | None:
    """The known name most like `name` (difflib's ratio >= 0.6), or what an old name like it was renamed to; or None."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if found:
        return found[0]
    old = difflib.get_close_matches(name, [k for k, new in RENAMED.items() if new in known], n=1, cutoff=0.6)
    return RENAMED[old[0]] if old else None


def unknown_key(section: str, key: Any, known: list[str]) -> str:
    """One line for a key a section does not have: what it was renamed to, or the closest known key."""
    if RENAMED.get(key) in known:
        return f"{section}: key {key!r} was renamed to {RENAMED[key]!r}"
    if key in MOVED_OUT:
        return f"{section}: key {key!r} is no longer a param (it would key DVC's cache); it comes from {MOVED_OUT[key]}"
    ours, whose = PEER_NAMES.get(key, (None, ""))
    if ours in known:
        return f"{section}: unknown key {key!r}; {whose} {key!r} is {section}.{ours} here"
    guess = closest(str(key), known)
    hint = f"did you mean {section}.{guess}?" if guess else f"known keys: {', '.join(known)}"
    return f"{section}: unknown key {key!r}; {hint}"


def from_dict(cls, data: dict[str, Any] | None, section: str = ""):
    """Build dataclass `cls` from a mapping; every unknown key, bad type, range or rule is reported at once."""
    section = section or cls.__name__
    if not isinstance(data, dict):
        raise ConfigError(f"{section}: expected a mapping of settings, got {data!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    errors = [unknown_key(section, k, names) for k in data if k not in names]
    kwargs = {}
    for key, value in data.items():
        if key in names:
            try:
                kwargs[key] = _check_type(f"{section}.{key}", value, hints[key])
            except ConfigError as err:
                errors.append(str(err))
    if errors:
        raise ConfigError("\n".join(errors))
    obj = cls(**kwargs)
    if isinstance(obj, Section):
        found = obj.problems()
        if found:
            raise ConfigError("\n".join(f"{section}: {p}" for p in found))
    return obj


class _Loader(yaml.SafeLoader):
    """YAML 1.2 floats and no duplicate keys.

    PyYAML follows YAML 1.1, where `3e-6` (no dot) is a string; DVC writes floats that way
    (`dvc exp run -S grpo.lr=3e-6`), so they are read as YAML 1.2 reads them. A key given twice
    would silently keep the last value, so it is an error.
    """

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1}): give each key once")
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
        r"|\.inf|\.Inf|\.INF|\.nan|\.NaN|\.NAN)$"
    ),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """yaml.safe_load with YAML 1.2 floats (`1e-5`, `3E+2`) and duplicate keys rejected."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise ConfigError(f"not valid YAML: {err}") from None


class ParamsChanged(ProjectError):
    """The params file a stage started with holds other values at its end."""

    hint = (
        "DVC recorded nothing of this stage; its outputs in the workspace are unrecorded (`dvc checkout` puts back the "
        "recorded ones). Run one experiment at a time per checkout (`dvc exp run --queue` the others, or use a second "
        "clone), then rerun"
    )


_PINNED: dict[Path, tuple[str, Any]] = {}  # the params files this process's stage started with: path -> (text, values)
GRACE_S = 30.0  # how long the end check waits for pinned values to come back (`dvc exp run --queue` stashes them)


def _values(text: str) -> Any:
    try:
        return load_yaml(text)
    except ConfigError:
        return None


def pin_params(path: str | Path) -> None:
    """This stage's params are `path`'s values now: every later `read_params(path)` in this process returns them
    (one set of params for the whole stage, whatever happens to the file), and `check_pinned_params` requires the file
    to hold them again at the stage's end. A missing or unreadable file is left to the first read to report."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return
    _PINNED[Path(path).resolve()] = (text, _values(text))


def check_pinned_params(grace_s: float | None = None) -> None:
    """Raise `ParamsChanged` if a pinned params file holds other values than its stage started with (a comment or
    formatting edit is no change: DVC records values) and they do not come back within `grace_s` seconds (GRACE_S)."""
    deadline = time.monotonic() + (GRACE_S if grace_s is None else grace_s)
    for path, (_, values) in _PINNED.items():
        while True:
            try:
                now = _values(path.read_text())
            except (OSError, UnicodeDecodeError):
                now = None  # deleted or unreadable: not the stage's params
            if now == values:
                break
            if time.monotonic() >= deadline:
                raise ParamsChanged(
                    f"{path} changed while this stage ran (a second `dvc exp run` or `dvc repro` in this checkout "
                    "writes it before DVC refuses that run as busy); this stage ran with the params it started with, "
                    "so it stops before DVC can record its outputs under the new ones"
                )
            time.sleep(0.5)


def read_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """The params file as a mapping; a file this process's stage pinned (`pin_params`) as it was then."""
    pinned = _PINNED.get(Path(path).resolve())
    try:
        text = pinned[0] if pinned else Path(path).read_text()
        data = load_yaml(text) or {}
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    except (OSError, UnicodeDecodeError) as err:  # missing, a folder, unreadable, not text
        raise ConfigError(f"{path}: cannot read the params file ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(data).__name__}")
    return data


def section_of(params: dict[str, Any], cls, name: str, path: str | Path = "params.yaml"):
    """Section `name` of the params `params` (read from `path`) as `cls`."""
    if name not in params:
        raise ConfigError(f"{path}: no section {name!r}")
    return from_dict(cls, params[name] or {}, name)


def load_section(cls, name: str, path: str | Path = "params.yaml"):
    """Read section `name` of params file `path` into `cls`."""
    return section_of(read_params(path), cls, name, path)


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def with_run(params: dict[str, Any], section: str, runs: str, run: str) -> dict[str, Any]:
    """Run `run`'s values: `section`'s with entry `run` of the `runs` table (its overrides) over them. The one merge of
    a section and a run's overrides (the stages through `load_run`, the checks, the plans); a value that is not a
    mapping counts as empty (the checks report it)."""
    return {**_mapping(params.get(section)), **_mapping(_mapping(params.get(runs)).get(run))}


def every_run(params: dict[str, Any], section: str, runs: str) -> dict[str, dict[str, Any]]:
    """Each entry of the `runs` table with its values (`with_run`)."""
    return {run: with_run(params, section, runs, run) for run in _mapping(params.get(runs))}


def _entry(params: dict[str, Any], runs: str, run: str, path: str | Path) -> dict[str, Any]:
    """Entry `run` of the `runs` table of a params file, which must exist and be a mapping (or empty)."""
    entries = _mapping(params.get(runs))
    if run not in entries:
        raise ConfigError(f"{path}: {runs} has no entry {run!r}; entries: {sorted(entries)}")
    if entries[run] is not None and not isinstance(entries[run], dict):
        raise ConfigError(f"{runs}.{run}: expected a mapping, got {entries[run]!r}")
    return entries[run] or {}


def run_of(params: dict[str, Any], cls, section: str, runs: str, run: str, path: str | Path = "params.yaml"):
    """`section` with the overrides of entry `run` of the `runs` dict (one DVC foreach stage per entry) as `cls`.

    The initial policy is shared by every run: it is a dependency path in dvc.yaml (`models/${section.init_policy}`),
    so a per-run override would train from one model while DVC tracked another.
    """
    if "init_policy" in _entry(params, runs, run, path):
        raise ConfigError(f"{runs}.{run}: init_policy cannot differ per run; set {section}.init_policy")
    if section not in params:
        raise ConfigError(f"{path}: no section {section!r}")
    return from_dict(cls, with_run(params, section, runs, run), section)


def load_run(cls, section: str, runs: str, run: str, path: str | Path = "params.yaml"):
    """`run_of` on params file `path`."""
    return run_of(read_params(path), cls, section, runs, run, path)


def entry_of(params: dict[str, Any], cls, runs: str, run: str, path: str | Path = "params.yaml"):
    """Entry `run` of the `runs` dict as a whole record of `cls` (sft_runs: each entry is its own SFTRun)."""
    return from_dict(cls, _entry(params, runs, run, path), f"{runs}.{run}")
