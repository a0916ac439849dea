"""Expert Iteration (Algorithm 2 of the handout), one round per call.

One round (`ei_round`): sample a batch D_b of training questions (seeded by the round) -> G rollouts each with the
current policy through the shared backend, with the `ei` section's own sampling settings -> grade -> keep correct
rollouts (all of them, as the handout and the full profile do; or, as options that deviate from it, dedup by response
text and at most `max_kept_per_question` per question so easy questions do not take over) -> the SFT loop of
`a5core.rl.sft` on the kept (prompt, response) pairs, starting from the current policy (fresh optimizer; no warm-up
unless `rewarm`) -> validation of the trained policy on the whole validation set.
The pipeline runs round k as its own DVC stage, `ei_round_k@<run>`, which starts from round k-1's saved model
(round 1: `ei.init_policy`), so DVC skips every round whose inputs did not change. Within a round, `scratch`
keeps the graded rollouts (a crash during SFT does not generate again) and the SFT checkpoints.
Each round appends one row to the run's history (`history_row`); row 0 is the initial policy.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Literal

from a5core.base.errors import ProjectError
from a5core.base.progress import Clock
from a5core.base.records import GradedSample, RoundRollout
from a5core.base.seeds import derive_seed
from a5core.base.stats import mean
from a5core.config.sections import (
    NonNegative,
    Positive,
    PositiveFloat,
    SamplingConfig,
    SamplingFields,
    init_policy_problem,
)
from a5core.grader.audit import AUDIT_NAMES, audit_metrics
from a5core.model import distributed
from a5core.model.compute import Compute
from a5core.rl.sft import SFTConfig, train_sft
from a5core.rl.train_reward import reward_problems, training_reward
from a5core.run.checkpoint import Checkpointer
from a5core.run.evaluation import RunResult, generate_and_grade, response_entropies, validate_and_log
from a5core.run.history import RunHistory

# The round report's scalars that go into the history table (rounds.csv) next to the validation metrics.
ROUND_SCALARS = (
    "count/rollouts",
    "count/correct",
    "count/kept",
    "rollout/retention",
    "rollout/share_zero_correct",
    "rollout/share_all_correct",
    "count/duplicates_removed",
    "count/removed_by_cap",
    "rollout/response_tokens_kept",
    "rollout/entropy",
    "trained",
    *(f"rollout/{name}" for name in AUDIT_NAMES),  # the grader audit of the round's rollouts, when it ran
    "count/audit_unjudged",
)


class NoCorrectSamples(ProjectError, RuntimeError):
    """An EI round produced no correct rollout: there is nothing to train on."""

    hint = "or set ei.if_no_correct: skip to pass the policy on untrained"


@dataclass(frozen=True)
class EIConfig(SamplingFields):  # prompt, temperature, top_p, max/min_tokens, seed: the rollouts' (SamplingFields)
    init_policy: str = "sft_filtered"  # model folder under models/ that round 1 starts from (base = the fetched model)
    n_questions: Positive = 512  # D_b: questions sampled per round
    rollouts_per_question: Positive = 4  # G: samples per question
    max_kept_per_question: NonNegative = 2  # correct samples kept per question; 0 = all (the handout); a cap deviates
    dedup: bool = True  # drop identical responses to a question (a deviation: the handout keeps every correct one)
    sft_epochs: Positive = 1  # SFT epochs over the kept data per round
    lr: PositiveFloat = 5e-5  # SFT learning rate within a round
    rewarm: bool = False  # warm the learning rate up again in every round (sft.warmup_ratio); off: start at the peak
    reward_fn: str | None = None  # the reward rollouts are kept by (module:function); None = the prompt's (REWARD_FNS)
    if_no_correct: Literal["fail", "skip"] = "fail"  # a round without correct rollouts: raise, or pass the policy on

    def problems(self) -> list[str]:
        found = [init_policy_problem(self.init_policy), *reward_problems(self.reward_fn, self.prompt)]
        return [p for p in found if p] + super().problems()

    @property
    def train_reward(self) -> str:
        return training_reward(self.reward_fn, self.prompt)

    def sampling(self, round_idx: int) -> SamplingConfig:
        return self.sampling_config(self.rollouts_per_question, derive_seed(self.seed, "ei_rollouts", round_idx))


def select_kept(samples: list[GradedSample], max_per_question: int, dedup: bool) -> tuple[list[GradedSample], dict]:
    """Correct rollouts after dedup and the per-question cap; returns (kept, counts)."""
    by_q: dict[str, list[GradedSample]] = defaultdict(list)
    dup = 0
    for s in samples:
        if s.reward != 1.0:
            continue
        if dedup and any(k.response.strip() == s.response.strip() for k in by_q[s.unique_id]):
            dup += 1
            continue
        by_q[s.unique_id].append(s)
    capped, kept = 0, []
    for group in by_q.values():
        take = group[:max_per_question] if max_per_question else group
        capped += len(group) - len(take)
        kept.extend(take)
    return kept, {"count/duplicates_removed": dup, "count/removed_by_cap": capped}


def round_report(samples: list[GradedSample], kept: list[GradedSample], counts: dict, g: int) -> dict:
    per_q = Counter(s.unique_id for s in samples if s.reward == 1.0)
    questions = {s.unique_id for s in samples}

    return {
        "count/questions": len(questions),
        "count/rollouts": len(samples),
        "count/correct": sum(per_q.values()),
        "count/kept": len(kept),
        "rollout/retention": len(kept) / max(len(samples), 1),
        "rollout/share_zero_correct": mean([per_q.get(q, 0) == 0 for q in questions]),
        "rollout/share_all_correct": mean([per_q.get(q, 0) == g for q in questions]),
        "rollout/response_tokens_kept": mean([s.output_tokens for s in kept]),
        "rollout/response_tokens": mean([s.output_tokens for s in samples]),
        "kept_by_subject": dict(Counter(s.subject for s in kept)),
        "kept_by_level": dict(Counter(s.level for s in kept)),
        "success_counts": dict(Counter(per_q.get(q, 0) for q in questions)),
        **audit_metrics(samples, "rollout"),  # the grader audit (a5core.grader.audit)
        **counts,
    }


def graded_rollouts(
    policy,
    tokenizer,
    backend,
    *,
    train_rows: list[dict],
    round_idx: int,
    cfg: EIConfig,
    pool,
    ckpt: Checkpointer | None = None,
    compute: Compute,
) -> tuple[list[GradedSample], list[float]]:
    """G graded samples for each of D_b questions from `policy`, with each response's mean token entropy (a forward
    with the stage's `compute.cut` where the backend did not record it).

    With `ckpt`, a previous attempt's result is returned instead of generating again, and a new one is saved (as
    plain dicts, which a weights_only load accepts).
    """
    saved = ckpt.load(distributed.is_sharded(policy)) if ckpt else None  # fsdp2: rank 0 reads, the others get it
    if saved:
        return [GradedSample(**s) for s in saved["samples"]], saved["entropies"]
    questions = random.Random(derive_seed(cfg.seed, "ei_questions", round_idx)).sample(
        train_rows, min(cfg.n_questions, len(train_rows))
    )
    backend.sync_weights(policy)  # on vLLM: push (and verify) the policy this round starts from
    samples = generate_and_grade(backend, questions, cfg.prompt, cfg.sampling(round_idx), pool)
    entropies = response_entropies(policy, tokenizer, samples, cut=compute.cut)
    if ckpt:
        ckpt.save({"samples": [dataclasses.asdict(s) for s in samples], "entropies": entropies})
    return samples, entropies


def round_sft_config(cfg: EIConfig, sft_cfg: SFTConfig, round_idx: int) -> SFTConfig:
    """The `sft` settings as a round uses them: its epochs and learning rate, no mid-run validation, and no warm-up
    unless `ei.rewarm` (a round continues from the previous round's policy)."""
    return replace(
        sft_cfg,
        epochs=cfg.sft_epochs,
        lr=cfg.lr,
        seed=derive_seed(cfg.seed, "ei_sft", round_idx),
        eval_every=0,
        warmup_ratio=sft_cfg.warmup_ratio if cfg.rewarm else 0.0,
    )


def kept_rollouts(
    samples: list[GradedSample], entropies: list[float], cfg: EIConfig, round_idx: int
) -> tuple[list[GradedSample], list[RoundRollout], dict]:
    """(kept samples, every rollout as a RoundRollout, the round report)."""
    kept, counts = select_kept(samples, cfg.max_kept_per_question, cfg.dedup)
    report = {
        **round_report(samples, kept, counts, cfg.rollouts_per_question),
        "cap": cfg.max_kept_per_question,
        "dedup": cfg.dedup,
        "rollout/entropy": mean(entropies),  # mean next-token entropy of the round's rollouts, nats
    }
    kept_ids = {id(s) for s in kept}
    rollouts = [RoundRollout.of(s, e, id(s) in kept_ids, round_idx) for s, e in zip(samples, entropies)]
    return kept, rollouts, report


def _nothing_kept(n_samples: int, round_idx: int, cfg: EIConfig) -> str:
    """A round with no correct rollout: NoCorrectSamples (ei.if_no_correct=fail), or a warning and its message."""
    msg = (
        f"EI round {round_idx}: 0 of {n_samples} rollouts were correct, so there is nothing to train on. "
        "Start EI from a stronger policy (ei.init_policy, e.g. an SFT checkpoint) or raise rollouts_per_question."
    )
    if cfg.if_no_correct == "fail":
        raise NoCorrectSamples(msg)
    print(f"WARNING: {msg} The policy is passed on untrained (ei.if_no_correct=skip).")
    return msg


def _scratch_checkpointer(scratch: str | None, name: str, fp: str, every: int) -> Checkpointer | None:
    """The checkpointer of `scratch/name` (None without a scratch folder: nothing resumes)."""
    return Checkpointer(f"{scratch}/{name}", fp, every) if scratch else None


def ei_round(
    policy,
    tokenizer,
    backend,
    *,
    train_rows: list[dict],
    round_idx: int,
    cfg: EIConfig,
    sft_cfg: SFTConfig,
    pool,
    validate: Callable,
    history: RunHistory,
    scratch: str | None = None,
    fp: str = "",
    n_completions: int = 8,
    compute: Compute,
) -> RunResult:
    """One EI round; trains `policy` in place (see the module docstring) with the stage's `compute` settings.
    `scratch` (with fingerprint `fp` of everything the round depends on) keeps the graded rollouts and the SFT
    checkpoints, so that a killed round resumes. Its SFT steps and validation (and its clock) go to `history`."""
    clock = Clock()
    samples, entropies = graded_rollouts(
        policy,
        tokenizer,
        backend,
        train_rows=train_rows,
        round_idx=round_idx,
        cfg=cfg,
        pool=pool,
        ckpt=_scratch_checkpointer(scratch, "rollouts", fp, 1),
        compute=compute,
    )
    kept, rollouts, report = kept_rollouts(samples, entropies, cfg, round_idx)
    if not kept:
        msg = _nothing_kept(len(samples), round_idx, cfg)  # raises under ei.if_no_correct=fail
        final = validate_and_log(history, 0, validate, policy, full=True, clock=clock, n_completions=n_completions)
        return RunResult(final, {**report, "trained": False, "message": msg}, rollouts)
    trained = train_sft(
        policy,
        tokenizer,
        rows=[{"unique_id": s.unique_id, "prompt": s.prompt, "response": s.response} for s in kept],
        cfg=round_sft_config(cfg, sft_cfg, round_idx),
        validate=validate,
        history=history,
        ckpt=_scratch_checkpointer(scratch, "sft", fp, sft_cfg.checkpoint_every),
        n_completions=n_completions,
        compute=compute,
        clock=clock,
    )
    return RunResult(trained.final, {**report, "trained": True}, rollouts)


def history_row(round_idx: int, metrics: dict, report: dict | None = None) -> dict:
    """One row of a run's history (rounds.csv): validation metrics after round `round_idx` (0 = the initial
    policy, which has no round report) and the round report's scalars."""
    return {"round": round_idx, **metrics, **{s: report[s] for s in ROUND_SCALARS if s in (report or {})}}
