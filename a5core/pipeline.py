"""Glue shared by the training stages: the periodic evaluation closure and saving a policy folder."""
from __future__ import annotations

from pathlib import Path

from a5core.artifacts import write_json
from a5core.config import EvalConfig
from a5core.evaluation import evaluate_policy
from a5core.grader.pool import GraderPool

SCALAR_METRICS = ("accuracy", "format_rate", "mean_response_length", "mean_token_entropy", "mean_length_correct", "mean_length_incorrect")


def make_eval_fn(tokenizer, backend, val_rows: list[dict], cfg: EvalConfig, pool: GraderPool):
    """evaluate_fn(policy, n) -> scalar metrics on the first n validation rows (0 = cfg.n_examples)."""
    def evaluate_fn(policy, n: int = 0) -> dict:
        backend.sync_weights(policy)
        rows = val_rows[: n or cfg.n_examples or len(val_rows)]
        _, metrics = evaluate_policy(policy, tokenizer, backend, rows, cfg, pool, progress=False)
        return {k: metrics[k] for k in SCALAR_METRICS}

    return evaluate_fn


def save_policy(policy, tokenizer, out: str | Path, prov: dict) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(prov, out / "provenance.json")
