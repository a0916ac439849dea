"""The verified reward's rules, unbounded: `grade_inline(response, ground_truth, prompt)` returns a `GradeResult` with
everything the pipeline logs; ground-truth checks; the reward mapping of a custom function's output.

Callers never run `grade_inline` unbounded on model text: the pool runs it in killable workers, and
a5core/grader/single.py's `grade` and the handout's reward functions run one call through the same bound. An item over
the limit scores answer 0 with status `timeout` (its format reward is still computed, by the parent, for the built-in
rules). Nothing here executes model text: answers are normalized, screened and parsed by our own code
(a5core.grader.parse; no eval/sympify).
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import asdict, dataclass
from typing import Literal

from a5core.base.errors import ProjectError
from a5core.grader.bounds import Rejected
from a5core.grader.equivalence import answers_equal
from a5core.grader.extract import EXTRACTORS, MAX_RESPONSE_CHARS, boxed_contents, last_boxed
from a5core.grader.normalize import compact, prepare
from a5core.grader.parse import Unparsable

logger = logging.getLogger(__name__)
Status = Literal[
    "correct",
    "wrong",
    "format_error",
    "multiple_answers",
    "no_answer",
    "unparsable",
    "timeout",
    "rejected_input",
    "custom",
    "error",
]
__all__ = [
    "EXTRACTORS",
    "MAX_RESPONSE_CHARS",
    "GradeResult",
    "GroundTruthError",
    "boxed_contents",
    "check_ground_truth",
    "grade_inline",
]


@dataclass(frozen=True)
class GradeResult:
    """One graded response. `status` separates parse failures from wrong answers."""

    format_reward: float
    answer_reward: float
    reward: float
    status: str
    extracted: str | None = None
    normalized_pred: str | None = None
    normalized_gt: str | None = None
    detail: str = ""

    def rewards(self) -> dict[str, float]:
        return {"format_reward": self.format_reward, "answer_reward": self.answer_reward, "reward": self.reward}

    def to_dict(self) -> dict:
        return asdict(self)


class GroundTruthError(ProjectError, ValueError):
    """A ground truth that cannot be normalized and screened; the message gives the reason."""

    hint = "fix the ground truth in the data"


REWARD_KEYS = ("format_reward", "answer_reward", "reward")


def reward_mapping(out) -> dict[str, float]:
    """What a custom reward function returned, as the three rewards; ValueError unless it is a mapping with each of
    REWARD_KEYS a finite number in [0, 1] (a reward outside it would silently rescale GRPO's advantages)."""
    if not hasattr(out, "keys") or not hasattr(out, "__getitem__"):
        raise ValueError(f"returned {type(out).__name__} {str(out)[:60]!r}, not a mapping of {list(REWARD_KEYS)}")
    missing = [k for k in REWARD_KEYS if k not in out]
    if missing:
        raise ValueError(f"returned a mapping without {missing} (keys: {list(out.keys())[:6]})")
    rewards = {}
    for k in REWARD_KEYS:
        v = out[k]
        if not isinstance(v, numbers.Real) or not 0.0 <= float(v) <= 1.0:  # NaN fails too; numpy scalars are Real
            raise ValueError(f"returned {k}={v!r}; each reward must be a finite number in [0, 1]")
        rewards[k] = float(v)
    return rewards


def check_ground_truth(gt: str) -> str:
    """The normalized ground truth, or GroundTruthError with the reason (data preparation calls this to
    fail on a bad row). Like the handout, a ground truth with `\\boxed{}` is graded by its last box."""
    if isinstance(gt, (int, float)) and not isinstance(gt, bool):
        gt = str(gt)
    if not isinstance(gt, str):
        raise GroundTruthError(f"ground truth must be a string or a number, got {type(gt).__name__}")
    text = last_boxed(gt) if "\\boxed" in gt else gt
    if text is None:
        raise GroundTruthError(f"ground truth {gt[:80]!r}: \\boxed without a balanced {{...}}")
    try:
        norm = prepare(text)
    except Rejected as err:
        raise GroundTruthError(f"ground truth {gt[:80]!r}: {err}") from err
    if not norm:
        raise GroundTruthError(f"ground truth {gt[:80]!r} is empty after normalization")
    return norm


def _gt_candidates(ground_truth) -> list[str]:
    if isinstance(ground_truth, (list, tuple)):
        return [str(g) for g in ground_truth]
    return [ground_truth if isinstance(ground_truth, str) else str(ground_truth)]


def _prepared_gts(ground_truth) -> list[tuple[str, bool]]:
    """(normalized ground truth, screened) per acceptable answer; an unscreenable one is matched by text only."""
    out = []
    for gt in _gt_candidates(ground_truth):
        try:
            out.append((check_ground_truth(gt), True))
        except GroundTruthError:
            out.append((gt.strip(), False))
    return out


def _match_any(pred: str, gts: list[tuple[str, bool]]) -> tuple[bool, Exception | None]:
    """(any ground truth matches, the first error met on the way)."""
    first_err: Exception | None = None
    for g, screened in gts:
        try:
            if answers_equal(pred, g) if screened else compact(pred) == compact(g):
                return True, None
        except (Unparsable, Rejected) as err:
            first_err = first_err or err
        except Exception as err:  # sympy raises many types on odd input; none may escape a reward function
            logger.debug("comparison failed", exc_info=True)
            first_err = first_err or Unparsable(f"{type(err).__name__}: {err}"[:300])
    return False, first_err


def _grade(response: str, ground_truth, prompt: str) -> GradeResult:
    if len(response) > MAX_RESPONSE_CHARS:
        return GradeResult(0.0, 0.0, 0.0, "rejected_input", detail=f"response over {MAX_RESPONSE_CHARS} chars")
    fmt_ok, answer, status = EXTRACTORS[prompt](response)
    fmt = float(fmt_ok)
    if not fmt_ok or answer is None or status:
        return GradeResult(fmt, 0.0, 0.0, status or "no_answer", extracted=answer)
    try:
        pred = prepare(answer)
    except Rejected as err:
        return GradeResult(fmt, 0.0, 0.0, "rejected_input", extracted=answer[:200], detail=str(err))
    if not pred:
        return GradeResult(fmt, 0.0, 0.0, "no_answer", extracted=answer)
    gts = _prepared_gts(ground_truth)
    gt0 = gts[0][0] if gts else None
    correct, err = _match_any(pred, gts)
    if correct:
        return GradeResult(fmt, 1.0, 1.0, "correct", answer, pred, gt0)
    if err is not None:
        status = "rejected_input" if isinstance(err, Rejected) else "unparsable"
        return GradeResult(fmt, 0.0, 0.0, status, answer, pred, gt0, str(err)[:300])
    return GradeResult(fmt, 0.0, 0.0, "wrong", answer, pred, gt0)


def grade_inline(response: str, ground_truth, prompt: str = "r1_zero") -> GradeResult:
    """Grade in this process, without a time bound; never raises on any response/ground truth.

    Only for code already running under a bound (a grader worker); everyone else calls `grade`.
    """
    if not isinstance(response, str):
        response = "" if response is None else str(response)
    try:
        return _grade(response, ground_truth, prompt)
    except Exception as err:  # a reward function must return rewards, whatever the input
        logger.debug("grading failed", exc_info=True)
        return GradeResult(0.0, 0.0, 0.0, "error", detail=f"{type(err).__name__}: {err}"[:300])
