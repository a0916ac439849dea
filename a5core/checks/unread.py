"""Params a training run does not read, and the changes to them that would rerun its stage for nothing (issue 64).

DVC keys a stage by whole params sections, so a change to a field the run never reads (`grpo.cliprange` under an
unclipped loss, `sft.lr` in an EI round) reruns the stage to the same training. The check_params stage, the first of
every `dvc repro` and `dvc exp run`, compares each run's params with those dvc.lock recorded for its stage and says
so, in one line per run, before anything runs.
- `GRPO_UNREAD`, `SFT_UNREAD`, `EI_SFT_UNREAD`: one small rule per field, each naming the setting that leaves the
  field unread (checked against the code that reads it: a5core/rl/losses.py, advantages.py, rl_options.py and
  grpo_update.py for grpo; a5core/rl/sft.py's `sft_step` and stages/sft.py for sft; a5core/rl/ei.py's
  `round_sft_config` for the `sft` fields an EI round replaces).
- `SECTION_UNREAD`: the same for the shared sections every training stage is keyed by (`generation`'s vLLM-only
  fields under the hf backend, `distributed.strategy` on one process).
- `unread_fields(cfg)`: the fields a GRPO run's `GRPOConfig` leaves unread, with why.
- `unread_notes(params, lock)`: the lines for the runs whose changed fields they do not read; an EI run whose start
  is an SFT model that reads the field is said to rerun through that model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a5core.base.typed import from_dict, with_run
from a5core.checks.forecast import locked_params
from a5core.config.sections import GenerationConfig, SFTRun
from a5core.model.distributed import DistributedConfig
from a5core.rl.ei import EIConfig
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.losses import CLIPPED_LOSSES
from a5core.rl.sft import SFTConfig

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


# field of `grpo` -> when the run leaves it unread (None: it reads it)
GRPO_UNREAD: dict[str, Callable[[GRPOConfig], str | None]] = {
    "cliprange": _cliprange,
    "kl_estimator": _kl,
    "max_refill_rounds": _refill,
    "overlong_penalty": _overlong,
    "normalize_constant": _constant,
    "use_std_normalization": _std_switch,
    "advantage_eps": _std,
    "std_ddof": _std,
}


def _sft_constant(cfg: SFTConfig) -> str | None:
    if cfg.loss_normalization == "per_example":
        return None
    return f"loss_normalization {cfg.loss_normalization} divides by no constant"


def _sft_reward(cfg: SFTConfig, run: SFTRun) -> str | None:
    if run.data == "sft/filtered":
        return None  # it trains on the traces filter_sft_data keeps by this reward
    return f"filter_sft_data keeps sft/filtered's traces by it; this run trains on {run.data}"


# field of `sft` -> when an sft@<run> stage leaves it unread, itself and through its data
SFT_UNREAD: dict[str, Callable[[SFTConfig, SFTRun], str | None]] = {
    "normalize_constant": lambda cfg, run: _sft_constant(cfg),
    "reward_fn": _sft_reward,
}

# field of `sft` -> when an EI round leaves it unread: round_sft_config replaces it, or the round never reaches it
EI_SFT_UNREAD: dict[str, Callable[[EIConfig, SFTConfig], str | None]] = {
    "lr": lambda ei, sft: "a round's learning rate is ei.lr",
    "epochs": lambda ei, sft: "a round's epochs are ei.sft_epochs",
    "seed": lambda ei, sft: "a round's data order is drawn from ei.seed",
    "eval_every": lambda ei, sft: "a round validates only at its end",
    "warmup_ratio": lambda ei, sft: None if ei.rewarm else "ei.rewarm is off: a round starts at the peak",
    "reward_fn": lambda ei, sft: "a round keeps its rollouts by ei.reward_fn",
    "normalize_constant": lambda ei, sft: _sft_constant(sft),
}


def _vllm_only(gen: GenerationConfig) -> str | None:
    return None if gen.facts.own_engine else f"backend {gen.backend} generates with the policy, no engine of its own"


def _sync_tolerance(gen: GenerationConfig) -> str | None:
    return _vllm_only(gen) or (None if gen.verify_weight_sync else "verify_weight_sync is off")


def _hf_only(gen: GenerationConfig) -> str | None:
    return None if not gen.facts.own_engine else f"backend {gen.backend}'s engine batches its requests itself"


def _one_process(dist: DistributedConfig) -> str | None:
    return None if dist.nproc * dist.nnodes > 1 else "one process (nproc 1, nnodes 1): nothing to shard or replicate"


# section -> (its config, field -> when no stage reads it): a5core/generation/vllm.py and __init__.py (make_backend),
# a5core/run/plan.py (CUDA only), a5core/model/distributed.py's shard
SECTION_UNREAD: dict[str, tuple[type, dict[str, Callable[[Any], str | None]]]] = {
    "generation": (
        GenerationConfig,
        {
            "layout": _vllm_only,
            "gpu_memory_utilization": _vllm_only,
            "verify_weight_sync": _vllm_only,
            "sync_tolerance": _sync_tolerance,
            "cuda_graphs": _vllm_only,
            "batch_size": _hf_only,
        },
    ),
    "distributed": (DistributedConfig, {"strategy": _one_process}),
}


def unread_fields(cfg: GRPOConfig) -> dict[str, str]:
    """The fields `cfg`'s run never reads, each with the setting that leaves it unread."""
    return {field: why for field, rule in GRPO_UNREAD.items() if (why := rule(cfg))}


def _sft_unread(params: dict[str, Any], run: str) -> dict[str, str]:
    cfg = from_dict(SFTConfig, params["sft"])
    spec = from_dict(SFTRun, (params.get("sft_runs") or {}).get(run) or {})
    return {field: why for field, rule in SFT_UNREAD.items() if (why := rule(cfg, spec))}


def _grpo_unread(params: dict[str, Any], run: str) -> dict[str, str]:
    return unread_fields(from_dict(GRPOConfig, with_run(params, "grpo", "grpo_runs", run)))


def _ei(params: dict[str, Any], run: str) -> EIConfig:
    return from_dict(EIConfig, with_run(params, "ei", "ei_runs", run))


def _ei_unread(params: dict[str, Any], run: str) -> dict[str, str]:
    ei, sft = _ei(params, run), from_dict(SFTConfig, params["sft"])
    return {field: why for field, rule in EI_SFT_UNREAD.items() if (why := rule(ei, sft))}


def _ei_start(params: dict[str, Any], run: str, fields: list[str]) -> str | None:
    """How an EI run reruns through its start when that start is an SFT model whose run reads `fields`."""
    start = _ei(params, run).init_policy
    sft_run = start.removeprefix("sft_")
    if sft_run == start or sft_run not in (params.get("sft_runs") or {}):
        return None
    read = [f"sft.{k}" for k in fields if k not in _sft_unread(params, sft_run)]
    return f"its start, models/{start}, is retrained with {', '.join(read)}" if read else None


@dataclass(frozen=True)
class Family:
    """How one family's runs are keyed: the section the rules name, its runs, and the stage dvc.lock records."""

    section: str  # the params section whose fields the rules name
    runs: str  # the table of the family's runs
    stage: str  # the stage whose recorded params are compared ("{run}" for the run's name)
    label: str  # how the note names the run's stages
    unread: Callable[[dict[str, Any], str], dict[str, str]]  # (params, run) -> field -> why it is unread
    overrides: bool = False  # whether a run's entry overrides the section's fields (grpo_runs)
    through: Callable[[dict[str, Any], str, list[str]], str | None] = lambda params, run, fields: None


FAMILIES = (
    Family("grpo", "grpo_runs", "grpo@{run}", "grpo@{run}", _grpo_unread, overrides=True),
    Family("sft", "sft_runs", "sft@{run}", "sft@{run}", _sft_unread),
    Family("sft", "ei_runs", "ei_round_1@{run}", "ei_round_*@{run}", _ei_unread, through=_ei_start),
)


def _show(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _values(family: Family, params: dict[str, Any], run: str) -> dict[str, Any]:
    return with_run(params, family.section, family.runs, run) if family.overrides else params.get(family.section) or {}


def _unread_changes(
    section: str, old: dict[str, Any], new: dict[str, Any], unread: dict[str, str]
) -> tuple[list[str], list[str], str]:
    """(the fields changed from `old` to `new`, those of them in `unread`, their line text with the reason each is
    unread)."""
    changed = sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k))
    idle = [k for k in changed if k in unread]
    what = "; ".join(f"{section}.{k} ({_show(old.get(k))} -> {_show(new.get(k))}: {unread[k]})" for k in idle)
    return changed, idle, what


def _note(family: Family, params: dict[str, Any], lock: dict[str, Any], run: str) -> str | None:
    last = locked_params(lock, family.stage.format(run=run), params)  # its params as dvc.lock recorded them
    old, new = _values(family, last, run), _values(family, params, run)
    changed, idle, what = _unread_changes(family.section, old, new, family.unread(params, run))
    if not idle:
        return None
    keyed = {family.section, family.runs} if family.overrides else {family.section}
    others = [k for k in last if k not in keyed and last[k] != params.get(k)]
    through = family.through(params, run, idle)
    if through:
        tail = through
    elif len(idle) == len(changed) and not others:
        tail = "so, its code and data unchanged, it reruns to the same training"
    else:
        tail = "its other changes rerun it"
    return f"note: {family.label.format(run=run)} does not read {what}; {tail}"


def _section_note(section: str, params: dict[str, Any], lock: dict[str, Any]) -> str | None:
    """The line for a shared section whose changed fields no stage reads (against the first stage dvc.lock recorded
    it for), naming how many stages DVC reruns for them, since it keys them by the whole section."""
    recorded = [  # check_params records the whole file: it reruns on any change
        entry["params"]["params.yaml"][section]
        for name, entry in (lock.get("stages") or {}).items()
        if name != "check_params" and section in ((entry.get("params") or {}).get("params.yaml") or {})
    ]
    if not recorded or section not in params:
        return None
    cls, rules = SECTION_UNREAD[section]
    old, new = recorded[0], params[section]
    unread = {field: why for field, rule in rules.items() if (why := rule(from_dict(cls, new)))}
    changed, idle, what = _unread_changes(section, old, new, unread)
    if not idle:
        return None
    tail = "its other changes rerun them" if len(idle) < len(changed) else "they rerun for it alone"
    return f"note: no stage reads {what}; DVC keys {len(recorded)} stage(s) by the {section} section, so {tail}"


def unread_notes(params: dict[str, Any], lock: dict[str, Any]) -> list[str]:
    """One line per run whose changed fields (from what dvc.lock recorded for its stage) include some it does not
    read, saying whether the stage reruns for them alone; one line per shared section (generation, distributed)
    whose changed fields no stage reads. `params` has passed the checker."""
    recorded = set(lock.get("stages") or {})
    notes = []
    for family in FAMILIES:
        for run in params.get(family.runs) or {}:
            if family.stage.format(run=run) in recorded and (line := _note(family, params, lock, run)):
                notes.append(line)
    return notes + [line for section in SECTION_UNREAD if (line := _section_note(section, params, lock))]
