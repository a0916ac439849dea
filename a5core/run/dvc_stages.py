"""The stages of dvc.yaml as DVC expands them (foreach entries, matrix combinations, `${...}` filled from params),
and which stage writes which output: what a stage that misses its input model folder names as the one to run first.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml

from a5core.base.typed import read_params

_REF = re.compile(r"\$\{([^}]+)\}")


def _lookup(ref: str, params: dict, key: Any, item: Any) -> str:
    """The value of one `${...}` of dvc.yaml: the foreach key, a field of its item, or a params value."""
    if ref == "key":
        return str(key)
    head, *rest = ref.split(".")
    value = item if head == "item" else params.get(head)
    for part in rest:
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _param(ref, params: dict):
    """The params value a `${a.b}` string names (None when it names none)."""
    if not (isinstance(ref, str) and ref.startswith("${") and ref.endswith("}")):
        return None
    return functools.reduce(lambda v, part: v.get(part) if isinstance(v, dict) else None, ref[2:-1].split("."), params)


def _matrix(name: str, matrix: dict, params: dict) -> list[tuple[str, None, dict]]:
    """A matrix stage's instances as DVC names them (`name@<v1>-<v2>`; a dict's values are its keys)."""
    axes = {k: list(_param(v, params) or []) for k, v in matrix.items()}
    combos = [[]]
    for values in axes.values():
        combos = [c + [v] for c in combos for v in values]
    return [(f"{name}@{'-'.join(map(str, c))}", None, dict(zip(axes, c))) for c in combos]


def dag_stages(params: dict, root: Path):
    """(stage name, its dvc.yaml body, a function resolving `${...}` in it) for every stage of `root`/dvc.yaml, each
    foreach stage expanded over its entries in `params`, each matrix stage over its combinations."""
    stages = (yaml.safe_load((root / "dvc.yaml").read_text()) or {}).get("stages") or {}
    for name, stage in stages.items():
        body, each = stage.get("do", stage), stage.get("foreach")
        entries = _param(each, params)
        instances = [(f"{name}@{k}", k, v) for k, v in entries.items()] if isinstance(entries, dict) else []
        if "matrix" in stage:
            each, instances = stage["matrix"], _matrix(name, stage["matrix"], params)
        for stage_name, key, item in instances or ([(name, None, None)] if each is None else []):
            yield (
                stage_name,
                body,
                lambda text, k=key, i=item: _REF.sub(lambda m: _lookup(m.group(1), params, k, i), text),
            )


def dag_outputs(params: dict, root: Path) -> dict[str, str]:
    """Every output path of `root`/dvc.yaml -> the stage that writes it."""
    found = {}
    for stage_name, body, resolve in dag_stages(params, root):
        for kind in ("outs", "metrics", "plots"):
            for out in body.get(kind) or []:
                found[resolve(next(iter(out)) if isinstance(out, dict) else out)] = stage_name
    return found


def writer_of(folder: str, params: dict, root: Path) -> str | None:
    """The stage of `root`/dvc.yaml that writes `folder`, or None."""
    if not (root / "dvc.yaml").is_file():
        return None
    return dag_outputs(params, root).get(folder.rstrip("/"))


def model_folder_problem(model: str, params_path: str) -> str | None:
    """Why a stage cannot start from model folder `model` (no config.json there), or None."""
    if (Path(model) / "config.json").is_file():
        return None
    stage = writer_of(os.path.relpath(model), read_params(params_path), Path.cwd())
    if stage:
        return f"{model}: no model there yet; run `dvc repro {stage}` first (the stage that writes it)"
    return f"{model}: no model folder there (no config.json) and no stage of dvc.yaml writes it"
