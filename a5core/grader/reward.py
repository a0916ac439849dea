"""The verified reward: answer extraction, format checks, and the reward functions of the handout.

`grade(response, ground_truth, prompt)` returns a `GradeResult` with everything the pipeline logs;
`r1_zero_reward_fn` / `question_only_reward_fn` return the handout's three floats. Nothing here executes
model text: answers are screened, normalized and parsed by `a5core.grader.parse` (no eval/sympify).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

from a5core.grader.equivalence import answers_equal
from a5core.grader.normalize import Rejected, normalize, screen
from a5core.grader.parse import Unparsable

MAX_RESPONSE_CHARS = 50_000
Status = Literal["correct", "wrong", "format_error", "multiple_answers", "no_answer", "unparsable", "timeout", "rejected_input", "custom"]
_R1_FORMAT = re.compile(r"^(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*$", re.S)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


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


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}` with balanced braces, in order."""
    out, i = [], 0
    while True:
        m = re.compile(r"\\(?:boxed|fbox)\s*\{").search(text, i)
        if not m:
            return out
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            return out  # unclosed box: ignore the rest
        out.append(text[m.end() : j - 1].strip())
        i = j


def extract_r1_zero(response: str) -> tuple[bool, str | None, str]:
    """(format ok, answer text or None, status if not ok). Exactly one well-formed answer block at the end."""
    m = _R1_FORMAT.match(response)
    if not m or response.count("</think>") != 1 or response.count("<answer>") != 1 or response.count("</answer>") != 1:
        return False, None, "format_error"
    body = m.group("answer")
    if any(t in body for t in _TAGS) or "<think>" in m.group("think").split("</think>")[0][1:]:
        return False, None, "format_error"
    boxes = boxed_contents(body)
    if len(set(b.replace(" ", "") for b in boxes)) > 1:
        return True, body.strip(), "multiple_answers"
    answer = boxes[0] if boxes else body.strip()
    return True, (answer or None), "" if answer else "no_answer"


def extract_question_only(response: str) -> tuple[bool, str | None, str]:
    """The last `\\boxed{}` of the response, else its final number."""
    boxes = boxed_contents(response)
    if boxes:
        return True, boxes[-1], ""
    nums = re.findall(r"-?\d+(?:\.\d+)?(?:/\d+)?", response[-2000:])
    return (True, nums[-1], "") if nums else (False, None, "no_answer")


EXTRACTORS = {"r1_zero": extract_r1_zero, "question_only": extract_question_only}


def _gt_candidates(ground_truth) -> list[str]:
    if isinstance(ground_truth, (list, tuple)):
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def grade(response: str, ground_truth, prompt: str = "r1_zero") -> GradeResult:
    """Grade one response against a ground truth (string, number or list of acceptable strings)."""
    if len(response) > MAX_RESPONSE_CHARS:
        return GradeResult(0.0, 0.0, 0.0, "rejected_input", detail=f"response over {MAX_RESPONSE_CHARS} chars")
    fmt_ok, answer, status = EXTRACTORS[prompt](response)
    fmt = float(fmt_ok)
    if not fmt_ok or answer is None or status:
        return GradeResult(fmt, 0.0, 0.0, status or "no_answer", extracted=answer)
    try:
        pred = normalize(screen(answer))
    except Rejected as err:
        return GradeResult(fmt, 0.0, 0.0, "rejected_input", extracted=answer[:200], detail=str(err))
    norm_gts = []
    for gt in _gt_candidates(ground_truth):
        try:
            norm_gts.append(normalize(screen(gt)))
        except Rejected:
            norm_gts.append(gt.strip())
    try:
        correct = any(answers_equal(pred, g) for g in norm_gts)
    except Unparsable as err:
        return GradeResult(fmt, 0.0, 0.0, "unparsable", answer, pred, norm_gts[0], str(err))
    except Rejected as err:
        return GradeResult(fmt, 0.0, 0.0, "rejected_input", answer, pred, norm_gts[0], str(err))
    except (RecursionError, MemoryError, OverflowError, ValueError, TypeError, ZeroDivisionError, AttributeError) as err:
        return GradeResult(fmt, 0.0, 0.0, "unparsable", answer, pred, norm_gts[0], f"{type(err).__name__}: {err}")
    score = float(correct)
    return GradeResult(fmt, score, score, "correct" if correct else "wrong", answer, pred, norm_gts[0])


def r1_zero_reward_fn(response: str, ground_truth, fast: bool = True) -> dict[str, float]:
    """Handout reward for the r1_zero prompt: format 1 needs `</think> <answer>...</answer>`; reward = answer."""
    return grade(response, ground_truth, "r1_zero").rewards()


def question_only_reward_fn(response: str, ground_truth, fast: bool = True) -> dict[str, float]:
    """Reward for the question_only prompt: the last \\boxed{} (or final number) is the answer."""
    return grade(response, ground_truth, "question_only").rewards()
