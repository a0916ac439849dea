"""What the params and a stage's arguments point at, checked before any work: the data files named by `data.*source`
can be read, each `init_policy` is a model folder that exists or that a stage of dvc.yaml writes, a stage's input
model folder is there (else: which stage to run first), and a custom `reward_fn` keeps the reward contract.

a5core/checks/params.py runs these after the sections' own checks. The reward contract: `reward_fn(response,
ground_truth)` returns a mapping with `format_reward`, `answer_reward` and `reward`, each a finite number in [0, 1]; it
is called on a fixed correct and a fixed wrong pair in a grader worker (the sandbox it grades in: its own process, a
memory limit, a time limit).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from a5core.config.sections import (
    BACKEND_FACTS,
    ConfigError,
    EvalConfig,
    engine_gpu,
    every_run,
    from_dict,
    reward_fn_problem,
)
from a5core.run.dvc_stages import dag_outputs, writer_of

CONTRACT_PAIRS = (("</think> <answer>4</answer>", "4"), ("</think> <answer>5</answer>", "4"))  # correct, wrong


def init_policy_problems(params: dict, root: Path) -> list[str]:
    """An init_policy folder must exist under models/ or be written by a stage of dvc.yaml (which then runs first)."""
    found = []
    for section in ("ei", "grpo"):
        name = (params.get(section) or {}).get("init_policy") if isinstance(params.get(section), dict) else None
        if not isinstance(name, str) or (root / "models" / name).is_dir() or writer_of(f"models/{name}", params, root):
            continue
        models = sorted(p for p in dag_outputs(params, root) if p.startswith("models/"))
        found.append(
            f"{section}.init_policy {name!r}: models/{name} does not exist and no stage of dvc.yaml writes it; "
            f"name one that a stage writes ({', '.join(m[7:] for m in models[:8])}, ...) or put a model folder there"
        )
    return found


def data_source_problems(data: Any) -> list[str]:
    """Every jsonl:/parquet: file the data section names must be a readable file (paths are from the repo root)."""
    found = []
    for field in ("source", "sft_source", "validation_source"):
        spec = data.get(field) if isinstance(data, dict) else None
        kind, _, ref = spec.partition(":") if isinstance(spec, str) else ("", "", "")
        if kind not in ("jsonl", "parquet") or not ref:
            continue
        path = Path(ref)
        if not path.exists():
            found.append(f"data.{field} {spec!r}: {path} does not exist (a relative path is from the repo root)")
        elif not path.is_file():
            found.append(f"data.{field} {spec!r}: {path} is not a file; give the data file itself")
        elif not os.access(path, os.R_OK):
            found.append(f"data.{field} {spec!r}: {path} cannot be read (permissions)")
    return found


@functools.lru_cache(maxsize=8)
def reward_contract_problem(path: str, timeout_s: float) -> str | None:
    """Why `path` breaks the reward contract (see the module docstring), or None; built-in rules are not called."""
    from a5core.grader.pool import BUILTIN, GraderPool

    if path in BUILTIN:  # the project's own rules, tested in tests/test_grader.py
        return None
    contract = "it must be f(response, ground_truth) -> {format_reward, answer_reward, reward}, each in [0, 1]"
    try:
        with GraderPool(path, workers=1, timeout_s=timeout_s) as pool:
            results = pool.map([r for r, _ in CONTRACT_PAIRS], [g for _, g in CONTRACT_PAIRS])
    except Exception as err:  # the function's module fails in a fresh process: the stage's workers would too
        return f"reward_fn {path!r}: its grader worker does not start ({type(err).__name__}: {err}); {contract}"
    for (response, truth), result in zip(CONTRACT_PAIRS, results):
        if result["status"] in ("error", "timeout", "rejected_input"):
            detail = result["detail"] or result["status"]
            return f"reward_fn {path!r} on ({response!r}, {truth!r}): {detail}; {contract}"
    return None


def stage_rewards(params: dict) -> list[tuple[str, str]]:
    """(where, module:function) of each training stage's own reward_fn (sft, ei, grpo and their runs' overrides)
    that imports; one that does not is reported by its section's checks."""
    found = []
    for section, runs in (("sft", None), ("ei", "ei_runs"), ("grpo", "grpo_runs")):
        entries = params.get(runs) if runs and isinstance(params.get(runs), dict) else {}
        places = [(section, params.get(section))] + [(f"{runs}.{name}", o) for name, o in entries.items()]
        for where, values in places:
            path = values.get("reward_fn") if isinstance(values, dict) else None
            if isinstance(path, str) and reward_fn_problem(path) is None:
                found.append((where, path))
    return found


def reward_fn_problems(params: dict) -> list[str]:
    """The reward contract of each section's reward_fn (sections with other problems are reported by the checker),
    the training stages' own included (their pools use validation's time limit)."""
    found, timeout = [], 5.0
    for section in ("eval", "validation"):
        try:
            cfg = from_dict(EvalConfig, params.get(section), section)
        except ConfigError:
            continue
        timeout = cfg.grader_timeout_s
        problem = reward_contract_problem(cfg.reward_fn, cfg.grader_timeout_s)
        if problem:
            found.append(f"{section}.{problem}")
    for where, path in stage_rewards(params):
        problem = reward_contract_problem(path, timeout)
        if problem:
            found.append(f"{where}.{problem}")
    return list(dict.fromkeys(found))


def distributed_problems(params: dict) -> list[str]:
    """What N ranks cannot run (a5core/model/distributed.py): a second engine GPU per rank, and under fsdp2 what needs
    whole tensors on the policy itself (LoRA, the KL reference copy)."""
    cfg, model, gen = params.get("distributed") or {}, params.get("model") or {}, params.get("generation") or {}
    world = cfg.get("nproc", 1) * cfg.get("nnodes", 1)
    if world == 1:
        return []
    found = []
    if engine_gpu(gen.get("backend", "hf"), gen.get("layout")):
        found.append("distributed: on N ranks each rank's vLLM engine shares its GPU; set generation.layout: one_gpu")
    if cfg.get("strategy") == "fsdp2":
        runs = every_run(params, "grpo", "grpo_runs").values()
        blocked = {"model.lora_rank": model.get("lora_rank"), "grpo kl_coef": any(r.get("kl_coef") for r in runs)}
        found += [f"distributed.strategy fsdp2 runs without {name} (use ddp)" for name, on in blocked.items() if on]
    return found


def staleness_problems(params: dict) -> list[str]:
    """grpo.max_staleness 1 where nothing would overlap: a vLLM engine colocated with the learner sleeps while it
    trains (generation.layout one_gpu), so the rollouts would only be staler."""
    gen = params.get("generation") or {}
    backend = gen.get("backend", "hf")
    if not BACKEND_FACTS[backend].own_engine or engine_gpu(backend, gen.get("layout")):
        return []  # the policy generates itself, or its engine has a GPU of its own
    runs = {"grpo": params.get("grpo") or {}}
    runs |= {f"grpo_runs.{n}": values for n, values in every_run(params, "grpo", "grpo_runs").items()}
    return [
        f"{name}.max_staleness 1 with generation.layout one_gpu: the colocated engine sleeps while the policy trains, "
        "so nothing overlaps and the rollouts are only staler; use layout two_gpu or max_staleness 0"
        for name, run in runs.items()
        if run.get("max_staleness")
    ][:1]


def problems(params: dict, path: str | Path) -> list[str]:
    """Every problem of what `params` (read from `path`) points at. Files and folders are checked only for a
    project's params file (a dvc.yaml beside it): a profile in conf/profile/ may name data not fetched yet."""
    root = Path(path).resolve().parent
    in_project = (root / "dvc.yaml").is_file()
    return [
        *(data_source_problems(params.get("data")) if in_project else []),
        *(init_policy_problems(params, root) if in_project else []),
        *reward_fn_problems(params),
        *distributed_problems(params),
        *staleness_problems(params),
        *replicate_problems(params),
    ]


def replicate_problems(params: dict) -> list[str]:
    """Seed replicates of runs that sft_runs / ei_runs / grpo_runs do not have (a5core/report/replicates.py)."""
    out = []
    for section in ("sft_runs", "ei_runs", "grpo_runs"):
        runs = params.get(section) or {}
        wanted = (params.get("replicates") or {}).get(section) or []
        out += [
            f"replicates.{section}: {r!r} is not a {section} entry ({sorted(runs)})" for r in wanted if r not in runs
        ]
    return out
