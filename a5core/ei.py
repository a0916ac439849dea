"""Expert Iteration, one round (Algorithm 2 of the handout).

Sample a batch D_b of training questions (seeded per round) -> G rollouts each with the current policy
through the shared backend -> grade -> keep correct rollouts (dedup by response text when enabled, at
most `max_kept_per_question` per question so easy questions do not take over) -> the SFT loop of
`a5core.sft` on the kept (prompt, response) pairs, starting from the current policy.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa

from a5core.config import EvalConfig
from a5core.evaluation import generate_and_grade, response_entropies
from a5core.sft import SFTConfig, train_sft

ROLLOUT_SCHEMA = pa.schema([
    ("unique_id", pa.string()), ("sample_index", pa.int32()), ("response", pa.string()), ("format_reward", pa.float64()),
    ("answer_reward", pa.float64()), ("reward", pa.float64()), ("status", pa.string()), ("output_tokens", pa.int32()),
    ("mean_token_entropy", pa.float64()), ("kept", pa.bool_()),
])


class NoCorrectSamples(RuntimeError):
    """An EI round produced no correct rollout: there is nothing to train on."""


@dataclass(frozen=True)
class EIConfig:
    init_policy: str = "sft_filtered"  # model folder under models/ to start round 1 from (base = the fetched model)
    n_questions: int = 512  # D_b: questions sampled per round
    rollouts_per_question: int = 4  # G: samples per question
    max_kept_per_question: int = 2  # cap on correct samples kept per question (0 = no cap)
    dedup: bool = True  # drop repeated identical responses to the same question
    sft_epochs: int = 1  # SFT epochs over the kept data per round
    learning_rate: float = 5e-5  # SFT learning rate within a round
    seed: int = 0  # question sampling seed (offset by the round number)
    if_no_correct: Literal["fail", "skip"] = "fail"  # a round without correct rollouts: raise, or pass the policy on untrained


def select_kept(records: list[dict], max_per_question: int, dedup: bool) -> tuple[list[dict], dict]:
    """Correct rollouts after dedup and the per-question cap; returns (kept, counts)."""
    by_q: dict[str, list[dict]] = defaultdict(list)
    dup = 0
    for r in records:
        if r["reward"] != 1.0:
            continue
        if dedup and any(k["response"].strip() == r["response"].strip() for k in by_q[r["unique_id"]]):
            dup += 1
            continue
        by_q[r["unique_id"]].append(r)
    capped = 0
    kept = []
    for rs in by_q.values():
        take = rs[:max_per_question] if max_per_question else rs
        capped += len(rs) - len(take)
        kept.extend(take)
    return kept, {"duplicates_removed": dup, "removed_by_cap": capped}


def round_report(records: list[dict], kept: list[dict], counts: dict, g: int) -> dict:
    per_q = Counter(r["unique_id"] for r in records if r["reward"] == 1.0)
    questions = {r["unique_id"] for r in records}
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return {"questions": len(questions), "rollouts": len(records), "correct": sum(per_q.values()), "kept": len(kept),
            "retention": len(kept) / max(len(records), 1),
            "share_zero_correct": mean([per_q.get(q, 0) == 0 for q in questions]),
            "share_all_correct": mean([per_q.get(q, 0) == g for q in questions]),
            "mean_length_kept": mean([r["output_tokens"] for r in kept]), "mean_length_all": mean([r["output_tokens"] for r in records]),
            "kept_by_subject": dict(Counter(r["subject"] for r in kept)), "kept_by_level": dict(Counter(r["level"] for r in kept)),
            "success_counts": dict(Counter(per_q.get(q, 0) for q in questions)), **counts}


def ei_round(policy, tokenizer, backend, train_rows: list[dict], round_idx: int, cfg: EIConfig, sft_cfg: SFTConfig,
             ev: EvalConfig, pool, evaluate_fn, ckpt=None, log=lambda kind, row: None) -> tuple[list[dict], dict, dict]:
    """One EI round; trains `policy` in place. Returns (rollout rows, round report, final eval metrics)."""
    questions = random.Random(cfg.seed * 1000 + round_idx).sample(train_rows, min(cfg.n_questions, len(train_rows)))
    backend.sync_weights(policy)
    sampling = replace(ev.sampling(cfg.rollouts_per_question), seed=ev.seed * 1000 + round_idx)
    records = generate_and_grade(backend, questions, ev.prompt, sampling, pool)
    entropies = response_entropies(policy, tokenizer, records)
    kept, counts = select_kept(records, cfg.max_kept_per_question, cfg.dedup)
    report = round_report(records, kept, counts, cfg.rollouts_per_question)
    kept_ids = {id(r) for r in kept}
    rollouts = [{**{k: r[k] for k in ROLLOUT_SCHEMA.names if k in r}, "mean_token_entropy": e, "kept": id(r) in kept_ids}
                for r, e in zip(records, entropies)]
    report["mean_token_entropy_rollouts"] = sum(entropies) / max(len(entropies), 1)
    if not kept:
        msg = (f"EI round {round_idx}: 0 of {len(records)} rollouts were correct, so there is nothing to train on. "
               "Start EI from a stronger policy (ei.init_policy, e.g. an SFT checkpoint) or raise rollouts_per_question.")
        if cfg.if_no_correct == "fail":
            raise NoCorrectSamples(msg)
        print(f"WARNING: {msg} The policy is passed on untrained (ei.if_no_correct=skip).")
        return rollouts, {**report, "trained": False, "message": msg}, evaluate_fn(policy, 0)
    sft_rows = [{"unique_id": r["unique_id"], "prompt": r["prompt"], "response": r["response"]} for r in kept]
    round_sft = replace(sft_cfg, epochs=cfg.sft_epochs, learning_rate=cfg.learning_rate, seed=cfg.seed + round_idx, eval_every=0)
    final = train_sft(policy, tokenizer, sft_rows, round_sft, evaluate_fn, ckpt, log)
    return rollouts, {**report, "trained": True}, final
