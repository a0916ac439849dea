"""`evaluate`: prompts -> generation (any backend) -> batch grading -> graded samples -> metrics with intervals.

The handout's `evaluate_vllm`, generalised to any `Backend`. One `GradedSample` per (question, sample). Metrics hold
accuracy with its 95% interval (questions are the unit, see `a5core.base.stats`), the format rate, the handout's three
categories (format 1 & answer 1, format 1 & answer 0, format 0 & answer 0), response lengths and entropy;
the per-subject, per-level and grading-status breakdowns are kept apart (`Evaluation.breakdown`), so that the
metrics files DVC shows stay a few columns wide.
- With n > 1 samples per question, beside avg@n (`eval/accuracy`): `eval/pass@k` for k = 2, 4, ... and n (Chen et
  al.'s unbiased estimator from the n samples) and `eval/maj@n` (majority vote over the extracted answers: every
  answer the grader judged correct is one class, the others are grouped by the grader's equivalence too,
  `answer_classes`; a tie goes to the answer sampled first; a sample without an answer does not vote), each with a
  bootstrap interval over questions, and per question in `Evaluation.at_k` for paired changes. Nothing is added at
  n = 1.
- The grader audit (a5core.grader.audit), when the pool runs one: each sample's strict and math-verify verdicts,
  `eval/audit_*` shares, and the top-reward completions beside the first ones in the completions log.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable

from a5core.base.progress import Clock
from a5core.base.records import GradedSample
from a5core.base.stats import accuracy_interval, bootstrap_mean, majority_index, mean, pass_at_k, per_question
from a5core.config.prompts import build_prompt
from a5core.config.sections import EvalConfig, SamplingConfig
from a5core.generation.base import Backend
from a5core.grader.audit import audit_metrics, top_rewarded, verdicts
from a5core.grader.bounds import Rejected
from a5core.grader.normalize import normalize
from a5core.grader.pool import GraderPool
from a5core.model import distributed
from a5core.model.microbatch import Cut

ENTROPY_SAMPLE = 64  # responses whose entropy is computed by a forward pass when the backend did not record it


@dataclass
class Evaluation:
    """The result of evaluating one policy on a set of questions."""

    samples: list[GradedSample]
    metrics: dict  # headline numbers (see the module docstring)
    breakdown: dict  # by subject, by level, grading-status counts
    per_question: dict[str, float]  # mean answer reward per question (for paired differences)
    entropies: list[float | None]  # mean token entropy per sample, where computed
    at_k: dict[str, dict[str, float]] = field(default_factory=dict)  # "pass@k"/"maj@n" -> per-question score (n > 1)


@dataclass
class RunResult:
    """What every training loop returns (SFT, an EI round, GRPO): the final full validation and the run's details."""

    final: Evaluation
    details: dict = field(default_factory=dict)  # scalars for details.json (GRPO: steps, best point; EI: round report)
    rollouts: list = field(default_factory=list)  # an EI round's graded rollouts (RoundRollout); empty elsewhere


def generate_and_grade(
    backend: Backend,
    rows: list[dict],
    prompt: str,
    sampling: SamplingConfig,
    pool: GraderPool,
    progress: bool = True,
    gather: bool = True,
) -> list[GradedSample]:
    """One GradedSample per (row, sample), in row order. On N ranks each generates and grades its block of rows
    (seeded by global index) and every rank returns them all (a5core.model.distributed); with `gather` False its own
    block alone, with no collective (a thread beside the learner's)."""
    mine, progress = distributed.block(len(rows)), progress and distributed.is_main()  # rank 0's bars only
    rows, sampling = rows[mine.start : mine.stop], replace(sampling, index_offset=sampling.index_offset + mine.start)
    prompts = [build_prompt(r["problem"], prompt) for r in rows]
    completions = backend.generate(prompts, sampling, progress=progress) if rows else []
    flat = [(r, p, j, c) for r, p, cs in zip(rows, prompts, completions) for j, c in enumerate(cs)]
    texts, truths = [c.text for *_, c in flat], [r["answer"] for r, *_ in flat]
    grades = pool.map(texts, truths, progress=progress)
    audits = pool.audit(texts, truths, prompt)  # the grader audit's verdicts (None each when the pool has none)
    graded = [
        GradedSample(
            unique_id=r["unique_id"],
            sample_index=j,
            prompt=p,
            response=c.text,
            ground_truth=r["answer"],
            extracted=g["extracted"],
            status=g["status"],
            format_reward=g["format_reward"],
            answer_reward=g["answer_reward"],
            reward=g["reward"],
            output_tokens=len(c.token_ids),
            finish_reason=c.finish_reason,
            subject=r.get("subject", ""),
            level=r.get("level", ""),
            token_ids=tuple(c.token_ids),
            token_entropies=c.token_entropies,
            token_logprobs=c.token_logprobs,
            **verdicts(a),
        )
        for (r, p, j, c), g, a in zip(flat, grades, audits)
    ]
    return distributed.gather(graded) if gather else graded


def _counts(samples: list[GradedSample]) -> dict:
    return {
        "count/samples": len(samples),  # graded samples (questions x samples per question)
        "eval/accuracy": mean([s.answer_reward for s in samples]),  # mean answer reward, in [0, 1]
        "eval/format_rate": mean([s.format_reward for s in samples]),  # share with the prompt's format
        "eval/format1_answer1": sum(s.format_reward == 1 and s.answer_reward == 1 for s in samples),  # samples
        "eval/format1_answer0": sum(s.format_reward == 1 and s.answer_reward == 0 for s in samples),  # samples
        "eval/format0_answer0": sum(s.format_reward == 0 for s in samples),  # samples
    }


CORRECT_CLASS = "\x00correct"  # the vote of every answer the grader judged equal to the ground truth
SameAnswers = Callable[[list[tuple[str, str]]], list[bool]]  # (answer, other) pairs -> judged equal (GraderPool's)


def _key(s: GradedSample) -> str | None:
    """A wrong answer's normalized text (None: no answer, no vote)."""
    try:
        return normalize(s.extracted) if s.extracted else None
    except Rejected:
        return None


def _wrong_answers(group: list[GradedSample]) -> list[tuple[str, str]]:
    """(normalized key, extracted text) of each distinct wrong answer of a question, in sample order."""
    seen: dict[str, str] = {}
    for s in group:
        key = _key(s) if s.answer_reward != 1 else None
        if key is not None and key not in seen:
            seen[key] = s.extracted
    return list(seen.items())


def answer_classes(groups: dict[str, list[GradedSample]], same: SameAnswers | None) -> dict[tuple[str, int], str]:
    """Each voting sample's class, by (question, sample index). Every answer the grader judged equal to the ground
    truth is one class (CORRECT_CLASS); the wrong ones are grouped by the grader's own equivalence (`same`, e.g.
    `GraderPool.same_answers`: `0.5`, `1/2` and `\\frac{1}{2}` are one class against 2, as Qwen2.5-Math's evaluation
    groups answers by its equivalence check), or by normalized text when `same` is None. Exact and deterministic: a
    question's distinct wrong answers, in sample order, each join the first earlier class whose first answer the
    grader judges it equal to (the later one graded against the earlier one as the ground truth), else start a class;
    at most d (d - 1) / 2 grader calls for d distinct wrong answers, all questions' in one batch."""
    wrong = {uid: _wrong_answers(group) for uid, group in groups.items()}
    pairs = [(uid, j, i) for uid, ans in wrong.items() for j in range(len(ans)) for i in range(j)] if same else []
    judged = same([(wrong[uid][j][1], wrong[uid][i][1]) for uid, j, i in pairs]) if pairs else []
    equal = {pair for pair, ok in zip(pairs, judged) if ok}
    out: dict[tuple[str, int], str] = {}
    for uid, group in groups.items():
        first: dict[str, str] = {}  # each distinct wrong answer's class: the key of the class's first answer
        for j, (key, _) in enumerate(wrong[uid]):
            reps = [i for i in range(j) if first[wrong[uid][i][0]] == wrong[uid][i][0]]  # earlier class firsts
            first[key] = next((wrong[uid][i][0] for i in reps if (uid, j, i) in equal), key)
        for s in group:
            key = None if s.answer_reward == 1 else _key(s)
            vote = CORRECT_CLASS if s.answer_reward == 1 else None if key is None else first[key]
            if vote is not None:
                out[(uid, s.sample_index)] = vote
    return out


def at_k_scores(samples: list[GradedSample], n: int, same: SameAnswers | None = None) -> dict[str, dict[str, float]]:
    """{"pass@k": {question: score}, ..., "maj@n": {...}} over each question's samples in sample order; {} at n = 1.
    maj@n votes over `answer_classes` (`same`: the grader's equivalence of two answers; None: normalized text)."""
    if n <= 1:
        return {}
    groups: dict[str, list[GradedSample]] = defaultdict(list)
    for s in samples:
        groups[s.unique_id].append(s)
    groups = {uid: sorted(group, key=lambda s: s.sample_index) for uid, group in groups.items()}
    # two samples: the wrong answers' classes cannot change the vote (both wrong: 0; one of each: a tie, which the
    # first sampled wins), so no grader call is made for them
    classes = answer_classes(groups, same if n > 2 else None)
    ks = sorted({2**i for i in range(1, n.bit_length()) if 2**i < n} | {n})
    out: dict[str, dict[str, float]] = {f"pass@{k}": {} for k in ks} | {f"maj@{n}": {}}
    for uid, group in groups.items():
        correct = sum(s.answer_reward == 1 for s in group)
        for k in ks:
            out[f"pass@{k}"][uid] = pass_at_k(len(group), correct, min(k, len(group)))
        winner = majority_index([classes.get((uid, s.sample_index)) for s in group])
        out[f"maj@{n}"][uid] = 0.0 if winner is None else float(group[winner].answer_reward == 1)
    return out


def at_k_metrics(at_k: dict[str, dict[str, float]]) -> dict:
    """`eval/<name>` (mean over questions) with its 95% bootstrap interval over questions, for each pass@k / maj@n."""
    out = {}
    for name, scores in at_k.items():
        lo, hi = bootstrap_mean(list(scores.values()))
        out |= {f"eval/{name}": mean(scores.values()), f"eval/{name}_lo": lo, f"eval/{name}_hi": hi}
    return out


def summarize(
    samples: list[GradedSample], samples_per_question: int, at_k: dict[str, dict[str, float]] | None = None
) -> tuple[dict, dict, dict[str, float]]:
    """(headline metrics, breakdown, per-question scores) of a set of graded samples (`at_k`: their at_k_scores, when
    the caller has them). Metric names are namespaced (`eval/`, `count/`: bookkeeping, not plotted; a5core.run.history)
    and mean the same in every row and file."""
    scores = per_question([(s.unique_id, s.answer_reward) for s in samples])
    lo, hi = accuracy_interval(scores, samples_per_question)
    correct = [s.output_tokens for s in samples if s.answer_reward == 1]
    wrong = [s.output_tokens for s in samples if s.answer_reward != 1]
    metrics = {
        "count/questions": len(scores),
        "count/samples_per_question": samples_per_question,
        **_counts(samples),
        "eval/accuracy_lo": lo,  # 95% interval of eval/accuracy, questions as the unit (a5core.base.stats)
        "eval/accuracy_hi": hi,
        "eval/response_tokens": mean([s.output_tokens for s in samples]),  # mean response length, tokens
        "eval/response_tokens_correct": mean(correct),  # of answer-correct samples (NaN: none)
        "eval/response_tokens_incorrect": mean(wrong),
        "eval/truncation_rate": mean([s.finish_reason == "length" for s in samples]),  # cut at max_tokens
        **at_k_metrics(at_k_scores(samples, samples_per_question) if at_k is None else at_k),  # pass@k, maj@n (n > 1)
        **audit_metrics(samples, "eval"),  # the grader audit (a5core.grader.audit), when the pool ran it
    }
    by_subject, by_level, status = defaultdict(list), defaultdict(list), defaultdict(int)
    for s in samples:
        by_subject[s.subject].append(s)
        by_level[s.level].append(s)
        status[s.status] += 1
    breakdown = {
        "status_counts": dict(status),
        "by_subject": {k: _counts(v) for k, v in sorted(by_subject.items())},
        "by_level": {k: _counts(v) for k, v in sorted(by_level.items())},
    }
    return metrics, breakdown, scores


def evaluate_policy(
    policy,
    tokenizer,
    backend: Backend,
    rows: list[dict],
    cfg: EvalConfig,
    pool: GraderPool,
    progress: bool = True,
    prompt: str | None = None,
    *,
    cut: Cut,
) -> Evaluation:
    """Generate cfg.samples_per_example samples per row with the eval sampling settings, grade, summarize.

    `prompt` overrides cfg.prompt (a GRPO run validates with its own prompt). Mean token entropy is over every
    response when the backend recorded it while sampling (hf), else over the first ENTROPY_SAMPLE responses, by a
    forward with the stage's `cut` (its LM-head chunking).
    """
    prompt = prompt or cfg.prompt
    sampling = cfg.sampling(cfg.samples_per_example, prompt)
    samples = generate_and_grade(backend, rows, prompt, sampling, pool, progress)
    at_k = at_k_scores(samples, cfg.samples_per_example, pool.same_answers)
    metrics, breakdown, scores = summarize(samples, cfg.samples_per_example, at_k)
    entropies = response_entropies(policy, tokenizer, samples, limit=ENTROPY_SAMPLE, cut=cut)
    metrics["eval/entropy"] = mean([e for e in entropies if e is not None])  # mean next-token entropy, nats
    return Evaluation(samples, metrics, breakdown, scores, entropies, at_k)


def completions(evaluation: Evaluation, n: int) -> list[dict]:
    """The first n samples (`"shown": "first"`) as a completions table (prompt, response, reward, entropy), as TRL
    logs them, then the n highest-reward ones (`"top_reward"`, grader.audit.top_rewarded), with the audit's verdicts."""
    entropy = {id(s): e for s, e in zip(evaluation.samples, evaluation.entropies)}
    first = [("first", s) for s in evaluation.samples[:n]]
    top = [("top_reward", s) for s in top_rewarded(evaluation.samples, n)]
    return [
        {
            "shown": shown,
            "unique_id": s.unique_id,
            "prompt": s.prompt,
            "response": s.response,
            "ground_truth": s.ground_truth,
            "reward": s.reward,
            "format_reward": s.format_reward,
            "strict_reward": s.strict_reward,
            "verified": s.verified,
            "entropy": entropy.get(id(s)),
        }
        for shown, s in first + top
    ]


def first_completions(evaluation: Evaluation, n: int) -> list[dict]:
    """`completions`' first n samples only (`"shown": "first"`): what a validation record keeps, so that a run
    starting from it shows its start's responses (GRPO's step 0)."""
    return [c for c in completions(evaluation, n) if c["shown"] == "first"]


def log_evaluation(history, step: int, evaluation: Evaluation, n_completions: int, extra: dict | None = None) -> None:
    """One eval row (headline metrics, and `extra` namespaced fields) and its completions table into a RunHistory."""
    history.log("eval", {"step": step, **evaluation.metrics, **(extra or {})})
    history.log_completions(step, completions(evaluation, n_completions))


def validate_and_log(
    history, step: int, validate: Callable, policy, *, full: bool, clock: Clock, n_completions: int, extra=None
) -> Evaluation:
    """`validate(policy, full=full)` with the run's `clock` stopped (validation is not training), logged at `step`
    with `extra` and the clock's reading (`perf/wall_s`); returns the evaluation."""
    with clock.paused():
        evaluation = validate(policy, full=full)
    log_evaluation(history, step, evaluation, n_completions, {**(extra or {}), "perf/wall_s": clock.seconds()})
    return evaluation


def response_entropies(
    policy, tokenizer, samples: list[GradedSample], limit: int | None = None, *, cut: Cut
) -> list[float | None]:
    """Mean next-token entropy over each sample's response tokens under `policy`, the policy that generated them.

    From generation where the backend recorded it (hf: the very distributions the tokens were sampled from);
    otherwise one teacher-forced forward pass (with the stage's `cut`), for the first `limit` samples lacking it (the
    rest stay None).
    """
    out = [mean(s.token_entropies) if s.token_entropies else None for s in samples]
    missing = [i for i, e in enumerate(out) if e is None][:limit]
    for i, e in zip(missing, forward_entropies(policy, tokenizer, [samples[i] for i in missing], cut=cut)):
        out[i] = e
    return out


def forward_entropies(policy, tokenizer, samples: list[GradedSample], batch_size: int = 16, *, cut: Cut) -> list[float]:
    """Mean next-token entropy over each sample's response tokens, by a teacher-forced forward pass (its LM head
    `cut.logits_chunk` positions at a time)."""
    from a5core.model.logprobs import get_response_log_probs
    from a5core.model.tokenization import pad_token_id, tokenize_ids

    device = next(policy.parameters()).device
    pad = pad_token_id(tokenizer)
    out: list[float] = []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i : i + batch_size]
        prompt_ids = [tokenizer(s.prompt, add_special_tokens=False)["input_ids"] for s in chunk]
        batch = tokenize_ids(prompt_ids, [list(s.token_ids) or [pad] for s in chunk], pad)
        with distributed.inference(policy):
            ent = get_response_log_probs(
                policy,
                batch["input_ids"].to(device),
                batch["labels"].to(device),
                return_token_entropy=True,
                share_prefix=True,
                cut=Cut(logits_chunk=cut.logits_chunk),  # rows padded, not packed (no `lengths`)
            )["token_entropy"]  # (b, T)
        mask = batch["response_mask"].to(device).float()  # (b, T)
        out.extend(((ent * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist())
    return out
