"""The grader audit: every graded response judged again, by the strict format rule and by an independent checker.

- `audit_inline(response, (ground_truth, prompt))`, run in a grader worker (`GraderPool(AUDIT_PATH)`, killable and
  time-bounded like the reward itself): `strict_reward`, the `r1_zero_strict` rule's reward (one answer block, nothing
  after it; None for the question_only prompt, which has no stricter rule), and `verified`, math-verify's verdict on
  the answer the prompt's extractor reads, against the ground truth (both in `\\boxed{}`; None without an answer).
  math-verify shares only the extraction with our grader, not its normalization, parser or equivalence, so where the
  two disagree one of them is wrong, and where the training reward pays what the strict rule or math-verify refuses,
  the policy may be learning the grader rather than the math.
- `audit_metrics(samples, namespace)`: the shares `<ns>/audit_*` a rollout batch or a validation logs
  (`rollout/…` in GRPO's and EI's rows, `eval/…` in every evaluation's), `count/audit_unjudged` the items whose audit
  ran out of time.
- `top_rewarded(samples, n)`: the n highest-reward responses, disagreements first: what to read when the curves move.
"""

from __future__ import annotations

import logging

from a5core.grader.extract import EXTRACTORS, MAX_RESPONSE_CHARS
from a5core.grader.reward import grade_inline

AUDIT_PATH = "a5core.grader.audit:audit_inline"  # the pool path of the audit (a5core.grader.pool knows it)
AUDIT_NAMES = ("audit_vs_strict", "audit_vs_math_verify", "audit_unconfirmed", "audit_format_only")  # audit_metrics
STRICT_RULE = {"r1_zero": "r1_zero_strict", "r1_zero_strict": "r1_zero_strict"}  # prompt -> its strict rule
logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call that the caller bounds time


def _boxed(text: str) -> str:
    return text if "\\boxed" in text else "\\boxed{" + text + "}"


def math_verify_verdict(answer: str, ground_truth) -> float:
    """1.0 when math-verify finds `answer` equal to the ground truth (any of them, for a list), else 0.0. Unbounded
    in time (math-verify's own signal timers are off): call it where the caller bounds it (a grader worker)."""
    from math_verify import parse, verify

    pred = parse(_boxed(answer), parsing_timeout=None)
    truths = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    for gt in truths:
        if pred and verify(parse(_boxed(str(gt)), parsing_timeout=None), pred, timeout_seconds=None):
            return 1.0
    return 0.0


def audit_inline(response, packed) -> dict:
    """The audit's verdicts on one response (`packed`: (ground truth, prompt)); in a grader worker, which bounds it."""
    ground_truth, prompt = packed
    if not isinstance(response, str) or len(response) > MAX_RESPONSE_CHARS:
        return {"strict_reward": 0.0 if prompt in STRICT_RULE else None, "verified": None}
    strict = STRICT_RULE.get(prompt)
    strict_reward = grade_inline(response, ground_truth, strict).reward if strict else None
    _, answer, _ = EXTRACTORS[prompt](response)
    verified = math_verify_verdict(answer, ground_truth) if answer and answer.strip() else None
    return {"strict_reward": strict_reward, "verified": verified}


def verdicts(result: dict | None) -> dict:
    """A pool's reply for one item as GradedSample's audit fields; a timeout or error reply (no verdict keys), or no
    audit at all (None), is unaudited."""
    if not result or "verified" not in result:
        return {"strict_reward": None, "verified": None, "audited": False}
    return {"strict_reward": result["strict_reward"], "verified": result["verified"], "audited": True}


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def audit_metrics(samples: list, namespace: str) -> dict:
    """The audit's shares over `samples` (GradedSample with their verdicts), as `<namespace>/<AUDIT_NAMES>`; {} when
    the samples were not audited. Each share's denominator is the samples its judge applies to."""
    audited = [s for s in samples if s.audited]
    if not audited:
        return {}
    strict = [s for s in audited if s.strict_reward is not None]
    verified = [s for s in audited if s.verified is not None]
    shares = {
        # the training (or validation) reward and the strict rule pay differently (the format is being gamed)
        "audit_vs_strict": _share([s.reward != s.strict_reward for s in strict]),
        # our grader and math-verify judge the same extracted answer differently (one of them is wrong)
        "audit_vs_math_verify": _share([s.answer_reward != s.verified for s in verified]),
        # paid by the reward, refused by the strict rule or by math-verify: the signature of a gamed reward
        "audit_unconfirmed": _share([s.reward > 0 and (s.strict_reward == 0 or s.verified == 0) for s in audited]),
        # the handout's "format 1, answer 0": well-formed but wrong
        "audit_format_only": _share([s.format_reward == 1 and s.answer_reward == 0 for s in audited]),
    }
    return {f"{namespace}/{k}": v for k, v in shares.items()} | {"count/audit_unjudged": len(samples) - len(audited)}


def disagrees(s) -> bool:
    """The strict rule or math-verify disagrees with the reward paid for `s`."""
    return (s.strict_reward is not None and s.strict_reward != s.reward) or (
        s.verified is not None and s.verified != s.answer_reward
    )


def top_rewarded(samples: list, n: int) -> list:
    """The n highest-reward samples; among equal rewards, those the audit disagrees with first, then in sample
    order (deterministic)."""
    order = sorted(range(len(samples)), key=lambda i: (-samples[i].reward, not disagrees(samples[i]), i))
    return [samples[i] for i in order[:n]]
