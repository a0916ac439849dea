"""Expert Iteration (Algorithm 2 of the handout), one round per call.

One round (`ei_round`): sample a batch D_b of training questions (seeded by the round) -> G rollouts each with
the current policy through the shared backend -> grade -> keep correct rollouts (dedup by response text when
enabled, at most `max_kept_per_question` per question so easy questions do not take over) -> the SFT loop of
`a5core.sft` on the kept (prompt, response) pairs, starting from the current policy (fresh optimizer) ->
validation of the trained policy.
The pipeline runs round k as its own DVC stage, `ei_round_k@<run>`, which starts from round k-1's saved model
(round 1: `ei.init_policy`), so DVC skips every round whose inputs did not change. Within a round, `scratch`
keeps the graded rollouts (a crash during SFT does not generate again) and the SFT checkpoints.
Each round appends one row to the run's history (`history_row`); row 0 is the initial policy.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa

from a5core.checkpoint import Checkpointer
from a5core.config import ConfigError, EvalConfig
from a5core.evaluation import generate_and_grade, response_entropies
from a5core.sft import SFTConfig, train_sft

ROLLOUT_SCHEMA = pa.schema([
    ("unique_id", pa.string()), ("sample_index", pa.int32()), ("response", pa.string()), ("format_reward", pa.float64()),
    ("answer_reward", pa.float64()), ("reward", pa.float64()), ("status", pa.string()), ("output_tokens", pa.int32()),
    ("mean_token_entropy", pa.float64()), ("kept", pa.bool_()), ("round", pa.int32()),
])
# The round report's scalars that go into the history table (rounds.csv) next to the validation metrics.
ROUND_SCALARS = ("rollouts", "correct", "kept", "retention", "share_zero_correct", "share_all_correct", "duplicates_removed",
                 "removed_by_cap", "mean_length_kept", "mean_token_entropy_rollouts", "trained")


class NoCorrectSamples(RuntimeError):
    """An EI round produced no correct rollout: there is nothing to train on."""


@dataclass(frozen=True)
class EIConfig:
    init_policy: str = "sft_filtered"  # model folder under models/ that round 1 starts from (base = the fetched model)
    n_questions: int = 512  # D_b: questions sampled per round
    rollouts_per_question: int = 4  # G: samples per question
    max_kept_per_question: int = 2  # cap on correct samples kept per question (0 = no cap)
    dedup: bool = True  # drop repeated identical responses to the same question
    sft_epochs: int = 1  # SFT epochs over the kept data per round
    learning_rate: float = 5e-5  # SFT learning rate within a round
    seed: int = 0  # question sampling seed (offset by the round number)
    if_no_correct: Literal["fail", "skip"] = "fail"  # a round without correct rollouts: raise, or pass the policy on untrained

    def validate(self) -> None:
        if self.n_questions < 1 or self.rollouts_per_question < 1 or self.max_kept_per_question < 0 or self.sft_epochs < 1:
            raise ConfigError("ei: n_questions, rollouts_per_question and sft_epochs must be >= 1, max_kept_per_question >= 0")


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


def graded_rollouts(policy, tokenizer, backend, train_rows: list[dict], round_idx: int, cfg: EIConfig, ev: EvalConfig, pool,
                    ckpt: Checkpointer | None = None) -> tuple[list[dict], list[float]]:
    """G graded samples for each of D_b questions from `policy`, with each response's mean token entropy.

    With `ckpt`, a previous attempt's result is returned instead of generating again, and a new one is saved.
    """
    saved = ckpt.load() if ckpt else None
    if saved:
        return saved["records"], saved["entropies"]
    questions = random.Random(cfg.seed * 1000 + round_idx).sample(train_rows, min(cfg.n_questions, len(train_rows)))
    backend.sync_weights(policy)  # on vLLM: push (and verify) the policy this round starts from
    sampling = replace(ev.sampling(cfg.rollouts_per_question), seed=ev.seed * 1000 + round_idx)
    records = generate_and_grade(backend, questions, ev.prompt, sampling, pool)
    entropies = response_entropies(policy, tokenizer, records)
    if ckpt:
        ckpt.save({"records": records, "entropies": entropies})
    return records, entropies


def ei_round(policy, tokenizer, backend, train_rows: list[dict], round_idx: int, cfg: EIConfig, sft_cfg: SFTConfig,
             ev: EvalConfig, pool, evaluate_fn, scratch: str | None = None, fp: str = "",
             log=lambda kind, row: None) -> tuple[list[dict], dict, dict]:
    """One EI round; trains `policy` in place. Returns (rollout rows, round report, validation metrics after it).

    `scratch` (with fingerprint `fp` of everything the round depends on): where the graded rollouts and the SFT
    checkpoints are kept so that a killed round resumes. The SFT rows go to `log` tagged with the round.
    """
    gen_ckpt = Checkpointer(f"{scratch}/rollouts", fp, 1) if scratch else None
    records, entropies = graded_rollouts(policy, tokenizer, backend, train_rows, round_idx, cfg, ev, pool, gen_ckpt)
    kept, counts = select_kept(records, cfg.max_kept_per_question, cfg.dedup)
    report = {**round_report(records, kept, counts, cfg.rollouts_per_question), "cap": cfg.max_kept_per_question, "dedup": cfg.dedup}
    kept_ids = {id(r) for r in kept}
    rollouts = [{**{k: r[k] for k in ROLLOUT_SCHEMA.names if k in r}, "mean_token_entropy": e, "kept": id(r) in kept_ids, "round": round_idx}
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
    sft_ckpt = Checkpointer(f"{scratch}/sft", fp, sft_cfg.checkpoint_every) if scratch else None
    final = train_sft(policy, tokenizer, sft_rows, round_sft, evaluate_fn, sft_ckpt, lambda kind, row: log(kind, {"round": round_idx, **row}))
    return rollouts, {**report, "trained": True}, final


def history_row(round_idx: int, metrics: dict, report: dict | None = None) -> dict:
    """One row of a run's history (rounds.csv): validation metrics after round `round_idx` (0 = the initial
    policy, which has no round report) and the round report's scalars."""
    return {"round": round_idx, **metrics, **({s: report[s] for s in ROUND_SCALARS} if report else {})}


def round_metrics(history: list[dict]) -> dict:
    """The metrics.json of the last round in `history`: where it ended, where the run started, its best round."""
    last, best = history[-1], max(history, key=lambda r: r["accuracy"])
    keys = ("accuracy", "format_rate", "mean_token_entropy", "mean_response_length", "kept")
    return {"round": int(last["round"]), **{k: last[k] for k in keys if k in last}, "initial_accuracy": history[0]["accuracy"],
            "best_accuracy": best["accuracy"], "best_round": int(best["round"])}
