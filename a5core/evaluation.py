"""`evaluate`: prompts -> generation (any backend) -> batch grading -> per-example records + metrics.

The handout's `evaluate_vllm`, generalised to any `Backend`. Records follow `GENERATION_SCHEMA`, one row
per (example, sample). Metrics hold accuracy, format rate, and the handout's three categories
(format 1 & answer 1, format 1 & answer 0, format 0 & answer 0), overall and per subject and level.
"""
from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import torch

from a5core.config import SamplingConfig
from a5core.generation.base import Backend
from a5core.grader.pool import GraderPool
from a5core.prompts import build_prompt

GENERATION_SCHEMA = pa.schema([
    ("unique_id", pa.string()), ("sample_index", pa.int32()), ("prompt", pa.string()), ("response", pa.string()),
    ("ground_truth", pa.string()), ("extracted", pa.string()), ("status", pa.string()), ("format_reward", pa.float64()),
    ("answer_reward", pa.float64()), ("reward", pa.float64()), ("output_tokens", pa.int32()), ("finish_reason", pa.string()),
    ("subject", pa.string()), ("level", pa.string()),
])


def generate_and_grade(backend: Backend, rows: list[dict], prompt: str, sampling: SamplingConfig, pool: GraderPool,
                       progress: bool = True) -> list[dict]:
    """One record per (row, sample) in GENERATION_SCHEMA, plus `token_ids` (not stored)."""
    prompts = [build_prompt(r["problem"], prompt) for r in rows]
    completions = backend.generate(prompts, sampling, progress=progress)
    flat = [(r, p, j, c) for r, p, cs in zip(rows, prompts, completions) for j, c in enumerate(cs)]
    grades = pool.map([c.text for *_, c in flat], [r["answer"] for r, *_ in flat], progress=progress)
    return [
        {"unique_id": r["unique_id"], "sample_index": j, "prompt": p, "response": c.text, "ground_truth": r["answer"],
         "extracted": g["extracted"], "status": g["status"], "format_reward": g["format_reward"],
         "answer_reward": g["answer_reward"], "reward": g["reward"], "output_tokens": len(c.token_ids),
         "finish_reason": c.finish_reason, "subject": r.get("subject", ""), "level": r.get("level", ""), "token_ids": c.token_ids,
         "token_entropies": c.token_entropies}
        for (r, p, j, c), g in zip(flat, grades)
    ]


def _counts(recs: list[dict]) -> dict:
    n = len(recs) or 1
    return {
        "n": len(recs),
        "accuracy": sum(r["answer_reward"] for r in recs) / n,
        "format_rate": sum(r["format_reward"] for r in recs) / n,
        "format1_answer1": sum(1 for r in recs if r["format_reward"] == 1 and r["answer_reward"] == 1),
        "format1_answer0": sum(1 for r in recs if r["format_reward"] == 1 and r["answer_reward"] == 0),
        "format0_answer0": sum(1 for r in recs if r["format_reward"] == 0),
        "mean_output_tokens": sum(r["output_tokens"] for r in recs) / n,
    }


def summarize(records: list[dict]) -> dict:
    """Metrics over records: overall, by subject, by level, and grading-status counts."""
    by_subject, by_level, status = defaultdict(list), defaultdict(list), defaultdict(int)
    for r in records:
        by_subject[r["subject"]].append(r)
        by_level[r["level"]].append(r)
        status[r["status"]] += 1
    return {**_counts(records), "status_counts": dict(status),
            "by_subject": {k: _counts(v) for k, v in sorted(by_subject.items())},
            "by_level": {k: _counts(v) for k, v in sorted(by_level.items())}}


def evaluate(backend: Backend, rows: list[dict], prompt: str, sampling: SamplingConfig, pool: GraderPool,
             progress: bool = True) -> tuple[list[dict], dict]:
    """Generate for every row, grade, and summarize. Returns (records, metrics)."""
    records = generate_and_grade(backend, rows, prompt, sampling, pool, progress)
    return records, summarize(records)


def response_entropies(policy, tokenizer, records: list[dict], batch_size: int = 16) -> list[float]:
    """Mean next-token entropy over each record's response tokens under `policy`, the policy that generated them.

    Taken from generation where the backend recorded it (hf: the very distributions the tokens were sampled
    from); otherwise (vLLM, empty responses) one teacher-forced forward pass computes it.
    """
    out = [sum(r["token_entropies"]) / len(r["token_entropies"]) if r.get("token_entropies") else None for r in records]
    missing = [i for i, e in enumerate(out) if e is None]
    for i, e in zip(missing, forward_entropies(policy, tokenizer, [records[i] for i in missing], batch_size)):
        out[i] = e
    return out


@torch.inference_mode()
def forward_entropies(policy, tokenizer, records: list[dict], batch_size: int = 16) -> list[float]:
    """Mean next-token entropy over each record's response tokens, by a teacher-forced forward pass."""
    from a5core.logprobs import get_response_log_probs
    from a5core.tokenization import pad_token_id, tokenize_ids

    device = next(policy.parameters()).device
    out: list[float] = []
    for i in range(0, len(records), batch_size):
        chunk = records[i : i + batch_size]
        prompt_ids = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in chunk]
        resp_ids = [list(r["token_ids"]) or [pad_token_id(tokenizer)] for r in chunk]
        batch = tokenize_ids(prompt_ids, resp_ids, pad_token_id(tokenizer))
        ent = get_response_log_probs(policy, batch["input_ids"].to(device), batch["labels"].to(device), True, share_prefix=True)["token_entropy"]
        mask = batch["response_mask"].to(device).float()  # (b, T)
        out.extend(((ent * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist())
    return out


def log_generations(policy, tokenizer, records: list[dict], n: int = 8) -> tuple[list[dict], dict]:
    """The handout's log_generations: sample rows with entropy, and length stats overall/correct/incorrect."""
    sample = records[:n]
    entropies = response_entropies(policy, tokenizer, sample)
    rows = [{"prompt": r["prompt"], "response": r["response"], "ground_truth": r["ground_truth"],
             "format_reward": r["format_reward"], "answer_reward": r["answer_reward"], "reward": r["reward"],
             "mean_token_entropy": e, "output_tokens": r["output_tokens"]} for r, e in zip(sample, entropies)]
    correct = [r["output_tokens"] for r in records if r["answer_reward"] == 1]
    wrong = [r["output_tokens"] for r in records if r["answer_reward"] != 1]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    stats = {"mean_response_length": mean([r["output_tokens"] for r in records]), "mean_length_correct": mean(correct),
             "mean_length_incorrect": mean(wrong), "mean_token_entropy": mean(entropies)}
    return rows, stats


def evaluate_policy(policy, tokenizer, backend: Backend, rows: list[dict], cfg, pool: GraderPool, progress: bool = True) -> tuple[list[dict], dict]:
    """evaluate() with an EvalConfig, plus log_generations stats (entropy, lengths) merged into the metrics."""
    records, metrics = evaluate(backend, rows, cfg.prompt, cfg.sampling(cfg.samples_per_example), pool, progress)
    _, gen_stats = log_generations(policy, tokenizer, records, n=min(len(records), 8))
    return records, {**metrics, **gen_stats}


def storable(records: list[dict]) -> list[dict]:
    """Records without the in-memory-only token ids and entropies."""
    return [{k: v for k, v in r.items() if k not in ("token_ids", "token_entropies")} for r in records]
