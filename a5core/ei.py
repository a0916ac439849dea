"""Expert Iteration (Algorithm 2 of the handout): `n_rounds` rounds, each trained from the previous one.

One round (`ei_round`): sample a batch D_b of training questions (seeded per round) -> G rollouts each with
the current policy through the shared backend -> grade -> keep correct rollouts (dedup by response text when
enabled, at most `max_kept_per_question` per question so easy questions do not take over) -> the SFT loop of
`a5core.sft` on the kept (prompt, response) pairs, starting from the current policy (fresh optimizer).
`expert_iteration` evaluates the initial policy (round 0), runs the rounds, and checkpoints after each one.
Deviation: the handout's rounds are separate runs of one script; here they are one loop (one DVC stage per
EI configuration) whose per-round checkpoint lets a killed run continue from its last finished round.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa

from a5core.checkpoint import Checkpointer, rng_state, set_rng_state
from a5core.config import ConfigError, EvalConfig
from a5core.evaluation import generate_and_grade, response_entropies
from a5core.sft import SFTConfig, train_sft

ROLLOUT_SCHEMA = pa.schema([
    ("unique_id", pa.string()), ("sample_index", pa.int32()), ("response", pa.string()), ("format_reward", pa.float64()),
    ("answer_reward", pa.float64()), ("reward", pa.float64()), ("status", pa.string()), ("output_tokens", pa.int32()),
    ("mean_token_entropy", pa.float64()), ("kept", pa.bool_()), ("round", pa.int32()),
])


class NoCorrectSamples(RuntimeError):
    """An EI round produced no correct rollout: there is nothing to train on."""


@dataclass(frozen=True)
class EIConfig:
    init_policy: str = "sft_filtered"  # model folder under models/ to start round 1 from (base = the fetched model)
    n_rounds: int = 5  # n_ei: Expert Iteration rounds
    n_questions: int = 512  # D_b: questions sampled per round
    rollouts_per_question: int = 4  # G: samples per question
    max_kept_per_question: int = 2  # cap on correct samples kept per question (0 = no cap)
    dedup: bool = True  # drop repeated identical responses to the same question
    sft_epochs: int = 1  # SFT epochs over the kept data per round
    learning_rate: float = 5e-5  # SFT learning rate within a round
    seed: int = 0  # question sampling seed (offset by the round number)
    if_no_correct: Literal["fail", "skip"] = "fail"  # a round without correct rollouts: raise, or pass the policy on untrained

    def validate(self) -> None:
        if self.n_rounds < 1 or self.n_questions < 1 or self.rollouts_per_question < 1:
            raise ConfigError("ei: n_rounds, n_questions and rollouts_per_question must be >= 1")


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
    final = train_sft(policy, tokenizer, sft_rows, round_sft, evaluate_fn, ckpt, log)
    return rollouts, {**report, "trained": True}, final


ROUND_SCALARS = ("correct", "kept", "retention", "share_zero_correct", "share_all_correct", "duplicates_removed", "removed_by_cap",
                 "mean_length_kept", "mean_token_entropy_rollouts", "trained")


def expert_iteration(policy, tokenizer, backend, train_rows: list[dict], cfg: EIConfig, sft_cfg: SFTConfig, ev: EvalConfig, pool,
                     evaluate_fn, scratch: str | None = None, fp: str = "", log=lambda kind, row: None,
                     initial: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Rounds 1..n_rounds on `policy` in place. Returns (rollouts of every round, one report per round, round 0 first).

    `log("rounds", row)` gets round 0 (the initial policy's validation metrics) and then each round's metrics
    and report scalars; the rounds' SFT rows go to `log("train"/"eval", {"round": k, ...})`. With `scratch`, the state after
    each round lives in `scratch/rounds` under fingerprint `fp` (which must not include n_rounds) and a
    round's SFT steps in `scratch/round_sft`, so a killed run resumes where it stopped. `initial`: the initial
    policy's metrics when already measured under the same protocol (round 0 is then not evaluated again).
    """
    rounds_ckpt = Checkpointer(f"{scratch}/rounds", fp, 1) if scratch else None
    state = rounds_ckpt.load() if rounds_ckpt else None
    if state and state["round"] > cfg.n_rounds:  # n_rounds was lowered: the saved run went past it, start over
        state = None
    logs, rollouts, reports = (state["logs"], state["rollouts"], state["reports"]) if state else ([], [], [])
    for kind, row in logs:
        log(kind, row)
    if state:
        policy.load_state_dict(state["model"])
        set_rng_state(state["rng"])
    record = lambda kind, row: (logs.append((kind, row)), log(kind, row))  # noqa: E731

    def save(k: int) -> None:
        if rounds_ckpt:
            rounds_ckpt.save({"model": policy.state_dict(), "round": k, "logs": logs, "rollouts": rollouts, "reports": reports, "rng": rng_state()})

    start = state["round"] if state else 0
    if not state:  # round 0: where the rounds start from, on the same validation protocol
        init = initial or evaluate_fn(policy, 0)
        reports.append({"round": 0, **init})
        record("rounds", {"round": 0, **init})
        save(0)
    for k in range(start + 1, cfg.n_rounds + 1):
        sft_ckpt = Checkpointer(f"{scratch}/round_sft", f"{fp}:{k}", sft_cfg.checkpoint_every) if scratch else None
        round_log = lambda kind, row, k=k: record(kind, {"round": k, **row})  # noqa: E731  (kept in logs, so a resume replays them)
        rows, report, final = ei_round(policy, tokenizer, backend, train_rows, k, cfg, sft_cfg, ev, pool, evaluate_fn, sft_ckpt, round_log)
        rollouts.extend(rows)
        reports.append({"round": k, **final, **report})
        record("rounds", {"round": k, **final, **{s: report[s] for s in ROUND_SCALARS}})
        save(k)
        print(f"EI round {k}/{cfg.n_rounds}: kept {report['kept']}/{report['rollouts']}, validation accuracy {final['accuracy']:.3f}")
    return rollouts, reports
