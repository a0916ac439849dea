"""Single grading calls, outside a batch, each bounded in time: `grade` and the handout's reward functions
(`r1_zero_reward_fn`, `r1_zero_strict_reward_fn`, `question_only_reward_fn`, the three floats).

- `bounded_grade`: through a lazily started one-worker `GraderPool` (a5core.grader.pool), under
  SINGLE_CALL_TIMEOUT_S; inline inside a grader worker (the worker itself is bounded); in other daemonic processes
  (which may not start children) under SIGALRM (main thread only, weaker) or, off the main thread, unbounded after a
  one-time warning.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time

from a5core.grader import pool as _pool
from a5core.grader.extract import EXTRACTORS
from a5core.grader.pool import SINGLE_CALL_PATH, GraderPool, failed, in_grader_worker, timeout_result
from a5core.grader.reward import GradeResult, grade_inline

SINGLE_CALL_TIMEOUT_S = 5.0  # time limit of one `grade` / reward-function call (read at each call)
_single: dict = {"pool": None, "pid": None}  # the single-call pool and the pid that owns its pipes
_single_lock = threading.Lock()
_warned_unbounded = False
logger = logging.getLogger(__name__)


def _single_pool() -> GraderPool:
    """The process-wide one-worker pool (a fresh one after a fork: pipes are not shared across processes)."""
    if _single["pool"] is None or _single["pid"] != os.getpid():
        _single["pool"], _single["pid"] = GraderPool(SINGLE_CALL_PATH, workers=1), os.getpid()
    return _single["pool"]


def close_single_pool() -> None:
    """Stop the single-call worker (also run at interpreter exit)."""
    with _single_lock:
        if _single["pool"] is not None and _single["pid"] == os.getpid():
            _single["pool"].close()
        _single["pool"] = None


atexit.register(close_single_pool)


class _AlarmTimeout(BaseException):
    """Raised by the SIGALRM handler; a BaseException, so grading code that catches Exception lets it through."""


def _on_alarm(signum, frame) -> None:
    raise _AlarmTimeout


def _grade_inline_bounded(response, ground_truth, prompt: str) -> dict:
    """grade_inline in a daemonic process (no children allowed): under SIGALRM on the main thread, else
    unbounded after a one-time warning (see the module docstring)."""
    global _warned_unbounded
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        if not _warned_unbounded:
            _warned_unbounded = True
            logger.warning(
                "grading inline without a time limit: a daemonic process off the main thread cannot "
                "start a grader worker or set a SIGALRM timer"
            )
        return grade_inline(response, ground_truth, prompt).to_dict()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    outer = signal.setitimer(signal.ITIMER_REAL, SINGLE_CALL_TIMEOUT_S)[0]
    start = time.monotonic()
    try:
        try:
            result = grade_inline(response, ground_truth, prompt).to_dict()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm before this line is caught just below
    except _AlarmTimeout:
        result = timeout_result(SINGLE_CALL_PATH, response, (ground_truth, prompt), f"over {SINGLE_CALL_TIMEOUT_S}s")
    finally:
        signal.signal(signal.SIGALRM, previous)
        if outer:  # an outer timer was running: give it back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer - (time.monotonic() - start)))
    return result


def bounded_grade(response, ground_truth, prompt: str) -> dict:
    """grade_inline(...).to_dict() under SINGLE_CALL_TIMEOUT_S (see the module docstring)."""
    if _pool.in_worker():  # a grader worker: already bounded
        return grade_inline(response, ground_truth, prompt).to_dict()
    if in_grader_worker():
        return _grade_inline_bounded(response, ground_truth, prompt)
    with _single_lock:
        pool = _single_pool()
        pool.timeout_s = SINGLE_CALL_TIMEOUT_S
        try:
            return pool.map([response], [(ground_truth, prompt)])[0]
        except RuntimeError as err:  # the worker could not start: score 0 (never grade unbounded), retry next call
            logger.warning("single-call grader worker failed: %s", err)
            pool.close()
            _single["pool"] = None
            return failed("error", str(err)[:300])


def grade(response: str, ground_truth, prompt: str = "r1_zero") -> GradeResult:
    """Grade one response against a ground truth (string, number or list of acceptable strings).

    `prompt` selects the extraction rule: "r1_zero" (handout), "r1_zero_strict" or "question_only".
    Time-bounded (see the module docstring): an item over the limit returns status `timeout`, reward 0.
    """
    if prompt not in EXTRACTORS:
        raise ValueError(f"unknown prompt {prompt!r}; choose one of {sorted(EXTRACTORS)}")
    return GradeResult(**bounded_grade(response, ground_truth, prompt))


def r1_zero_reward_fn(response: str, ground_truth, fast: bool = True) -> dict[str, float]:
    """The handout's reward for the r1_zero prompt (its format rule, exactly); `fast` is accepted and unused."""
    return grade(response, ground_truth, "r1_zero").rewards()


def r1_zero_strict_reward_fn(response: str, ground_truth, fast: bool = True) -> dict[str, float]:
    """r1_zero with the strict anti-hack format rule (one answer block, nothing after it)."""
    return grade(response, ground_truth, "r1_zero_strict").rewards()


def question_only_reward_fn(response: str, ground_truth, fast: bool = True) -> dict[str, float]:
    """The handout's reward for the question_only prompt: the last \\boxed{} is the answer; none -> 0, 0, 0."""
    return grade(response, ground_truth, "question_only").rewards()
