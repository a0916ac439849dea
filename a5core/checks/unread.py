"""GRPO params a run does not read, and the changes to them that would rerun its stage for nothing (issue 64).

DVC keys a stage by whole params sections, so a change to a field the run never reads (`grpo.cliprange` under an
unclipped loss) reruns the stage to the same training. The check_params stage, the first of every `dvc repro` and
`dvc exp run`, compares each GRPO run's params with those dvc.lock recorded for its stage and says so, in one line
per run, before anything runs.
- `UNREAD`: one small rule per field, each naming the setting that leaves the field unread (checked against the
  code that reads it: a5core/rl/losses.py, advantages.py, rl_options.py, grpo_update.py).
- `unread_fields(cfg)`: the fields a run's `GRPOConfig` leaves unread, with why.
- `unread_notes(params, lock)`: the lines for the runs whose changed fields it does not read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from a5core.base.typed import from_dict
from a5core.checks.forecast import locked_params
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.losses import CLIPPED_LOSSES

# the built-in losses that ignore `cliprange` (a5core/rl/losses.py's PG_LOSSES less CLIPPED_LOSSES); a loss added
# with register_pg_loss receives it and may read it
UNCLIPPED_LOSSES = {"no_baseline", "reinforce_with_baseline", "grpo_no_clip"}


def _cliprange(cfg: GRPOConfig) -> str | None:
    if cfg.loss_type not in UNCLIPPED_LOSSES:
        return None
    return f"loss_type {cfg.loss_type} does not clip (only {', '.join(sorted(CLIPPED_LOSSES))})"


def _kl(cfg: GRPOConfig) -> str | None:
    return None if cfg.kl_coef else "kl_coef is 0: no KL term"


def _refill(cfg: GRPOConfig) -> str | None:
    return None if cfg.dynamic_sampling else "dynamic_sampling is off"


def _overlong(cfg: GRPOConfig) -> str | None:
    return None if cfg.overlong_buffer else "overlong_buffer is 0: no overlong penalty"


def _constant(cfg: GRPOConfig) -> str | None:
    if cfg.length_normalization == "masked_normalize":
        return None
    return f"length_normalization {cfg.length_normalization} divides by no constant"


def _std_switch(cfg: GRPOConfig) -> str | None:
    if cfg.advantage_estimator == "grpo":
        return None
    return f"advantage_estimator {cfg.advantage_estimator} has no group std normalization"


def _std(cfg: GRPOConfig) -> str | None:
    return _std_switch(cfg) or (None if cfg.use_std_normalization else "use_std_normalization is off")


# field -> when the run leaves it unread (None: it reads it)
UNREAD: dict[str, Callable[[GRPOConfig], str | None]] = {
    "cliprange": _cliprange,
    "kl_estimator": _kl,
    "max_refill_rounds": _refill,
    "overlong_penalty": _overlong,
    "normalize_constant": _constant,
    "use_std_normalization": _std_switch,
    "advantage_eps": _std,
    "std_ddof": _std,
}


def unread_fields(cfg: GRPOConfig) -> dict[str, str]:
    """The fields `cfg`'s run never reads, each with the setting that leaves it unread."""
    return {field: why for field, rule in UNREAD.items() if (why := rule(cfg))}


def _show(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def unread_notes(params: dict[str, Any], lock: dict[str, Any]) -> list[str]:
    """One line per GRPO run whose changed `grpo` fields (from what dvc.lock recorded for its stage) include some it
    does not read; it says whether the stage reruns for them alone. `params` has passed the checker."""
    notes = []
    for run, overrides in (params.get("grpo_runs") or {}).items():
        stage = f"grpo@{run}"
        if stage not in (lock.get("stages") or {}):
            continue
        last = locked_params(lock, stage, params)  # the params it last ran with, as dvc.lock recorded them
        old = {**(last.get("grpo") or {}), **((last.get("grpo_runs") or {}).get(run) or {})}
        new = {**params["grpo"], **(overrides or {})}
        unread = unread_fields(from_dict(GRPOConfig, new))
        changed = sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k))
        idle = [k for k in changed if k in unread]
        if not idle:
            continue
        others = [k for k in last if not k.startswith("grpo") and last[k] != params.get(k)]
        what = "; ".join(f"grpo.{k} ({_show(old.get(k))} -> {_show(new.get(k))}: {unread[k]})" for k in idle)
        alone = len(idle) == len(changed) and not others
        tail = (
            "so, its code and data unchanged, it reruns to the same training" if alone else "its other changes rerun it"
        )
        notes.append(f"note: {stage} does not read {what}; {tail}")
    return notes
