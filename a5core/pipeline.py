"""Glue shared by the training stages: their common start (configs, policy, backend, validation rows), the
periodic evaluation closure, and saving a policy folder together with its validation metrics so that the
next stage can start its curve (EI round 0, GRPO step 0) without evaluating the same weights again."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a5core import stage
from a5core.artifacts import write_json
from a5core.checkpoint import fingerprint
from a5core.config import EvalConfig, GenerationConfig, load_section
from a5core.evaluation import evaluate_policy
from a5core.generation import make_backend
from a5core.grader.pool import GraderPool
from a5core.model_io import load_policy

SCALAR_METRICS = ("accuracy", "format_rate", "mean_response_length", "mean_token_entropy", "mean_length_correct", "mean_length_incorrect")
VALIDATION_FILE = "validation.json"


@dataclass
class TrainingStart:
    """What every training stage starts from."""

    ev: EvalConfig  # the `validation` section
    policy: Any
    tokenizer: Any
    backend: Any  # generation backend bound to the policy
    val: list[dict]  # validation rows


def training_start(a: argparse.Namespace, seed: int) -> TrainingStart:
    """Seed torch, load the policy in `a.model` and its backend, read `a.validation` (paths from `stage.args`)."""
    ev = load_section(EvalConfig, "validation", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    policy, tokenizer = load_policy(a.model, stage.setup_torch(seed))
    return TrainingStart(ev, policy, tokenizer, make_backend(gen, a.model, policy, tokenizer, seed=seed),
                         stage.rows(a.validation, ["unique_id", "problem", "answer"]))


def make_eval_fn(tokenizer, backend, val_rows: list[dict], cfg: EvalConfig, pool: GraderPool):
    """evaluate_fn(policy, n) -> scalar metrics on the first n validation rows (0 = cfg.n_examples)."""
    def evaluate_fn(policy, n: int = 0) -> dict:
        backend.sync_weights(policy)
        rows = val_rows[: n or cfg.n_examples or len(val_rows)]
        _, metrics = evaluate_policy(policy, tokenizer, backend, rows, cfg, pool, progress=True)
        return {k: metrics[k] for k in SCALAR_METRICS}

    return evaluate_fn


def validation_protocol(cfg: EvalConfig, validation_path: str) -> str:
    """Hash of what a full validation measurement depends on besides the weights: protocol and data."""
    return fingerprint({"validation": cfg}, {"validation": validation_path})


def saved_validation(model_dir: str | Path, protocol: str) -> dict | None:
    """The metrics stored with a policy folder, if they were measured under `protocol` (else None).

    Evaluation is seeded and batch order is fixed, so these equal what evaluating the folder again would give.
    """
    path = Path(model_dir) / VALIDATION_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved["metrics"] if saved.get("protocol") == protocol else None


def save_policy(policy, tokenizer, out: str | Path, prov: dict, validation: tuple[str, dict] | None = None) -> None:
    """Model + tokenizer + provenance.json, and (protocol, final validation metrics) as validation.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(prov, out / "provenance.json")
    if validation:
        protocol, metrics = validation
        write_json({"protocol": protocol, "metrics": {k: metrics[k] for k in SCALAR_METRICS}}, out / VALIDATION_FILE)
