"""Grading in killable worker processes: the reward is a security boundary, so no item can hang or crash a run.

- `GraderPool.map`: each item gets a wall-clock budget; a worker over it is killed and restarted in the background
  and the item scores 0 (`timeout`; its format reward is still computed by the parent); workers run under an
  address-space limit (a blow-up is `rejected_input`). Requests carry a batch id, and an interrupted `map` kills its
  busy workers, so no old result lands in a new batch.
- Single calls (`grade`, the reward functions) get the same bound through a one-worker pool (a5core.grader.single).
- The reward function is named by import path (`module:function`), so users can plug in their own grader.
- Workers exit when the pipe closes or their parent dies (a watchdog thread), leaving no orphans.
- A worker is a fresh interpreter that imports the grader alone (`python -c ...serve()`): a multiprocessing worker
  also imported its parent's main script, torch and transformers for a stage (reports/grader_pool.md).
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe, wait
from typing import Self

from a5core.base.errors import ProjectError
from a5core.base.progress import bar as progress_bar
from a5core.grader.audit import AUDIT_PATH, audit_inline
from a5core.grader.extract import EXTRACTORS, MAX_RESPONSE_CHARS
from a5core.grader.reward import grade_inline, reward_mapping

STARTUP_TIMEOUT_S = 120
SINGLE_CALL_PATH = "a5core.grader.reward:grade_inline"  # items carry (ground_truth, prompt)
PARENT_POLL_S = 0.5
BUILTIN = {
    "a5core.grader:r1_zero_reward_fn": "r1_zero",
    "a5core.grader.single:r1_zero_reward_fn": "r1_zero",
    "a5core.grader:r1_zero_strict_reward_fn": "r1_zero_strict",
    "a5core.grader.single:r1_zero_strict_reward_fn": "r1_zero_strict",
    "a5core.grader:question_only_reward_fn": "question_only",
    "a5core.grader.single:question_only_reward_fn": "question_only",
}
_in_worker = False  # set in grader worker processes
logger = logging.getLogger(__name__)


class RewardFnError(ProjectError, ValueError):
    """A reward-function path that does not name a callable `module:function`."""

    hint = "fix validation.reward_fn / eval.reward_fn (module:function)"


class GraderStartError(ProjectError, RuntimeError):
    """A grader worker died or hung while starting (importing the reward function, warming up)."""

    hint = "check that the reward function imports in a fresh process"


def load_reward_fn(path: str) -> Callable:
    """Import `module:function`; a clear error when it is not there."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise RewardFnError(f"reward function must be 'module:function', got {path!r}")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise RewardFnError(f"{path!r}: {name} is not a callable in {module}")
    return fn


def detailed_grader(path: str) -> Callable[[str, object], dict]:
    """(response, ground_truth) -> dict with the three rewards plus status/extracted/normalized columns (the audit's
    path: (response, (ground_truth, prompt)) -> its verdicts, a5core.grader.audit)."""

    if path == AUDIT_PATH:
        return audit_inline
    if path == SINGLE_CALL_PATH:

        def any_rule(response, packed):
            ground_truth, prompt = packed
            return grade_inline(response, ground_truth, prompt).to_dict()

        return any_rule
    if path in BUILTIN:
        prompt = BUILTIN[path]
        return lambda r, g: grade_inline(r, g, prompt).to_dict()
    fn = load_reward_fn(path)

    def custom(r, g):
        return {
            **reward_mapping(fn(r, g)),
            "status": "custom",
            "extracted": None,
            "normalized_pred": None,
            "normalized_gt": None,
            "detail": "",
        }

    return custom


def failed(status: str, detail: str) -> dict:
    return {
        "format_reward": 0.0,
        "answer_reward": 0.0,
        "reward": 0.0,
        "status": status,
        "extracted": None,
        "normalized_pred": None,
        "normalized_gt": None,
        "detail": detail,
    }


def timeout_result(path: str, response, ground_truth, detail: str) -> dict:
    """Status `timeout`, answer 0; for a built-in rule the format reward is kept (a bounded string scan)."""
    out = failed("timeout", detail)
    prompt = BUILTIN.get(path)
    if path == SINGLE_CALL_PATH and isinstance(ground_truth, tuple) and len(ground_truth) == 2:
        prompt = ground_truth[1]
    if prompt in EXTRACTORS and isinstance(response, str) and len(response) <= MAX_RESPONSE_CHARS:
        out["format_reward"] = float(EXTRACTORS[prompt](response)[0])
    return out


def in_worker() -> bool:
    """True in a grader worker process, whose calls its pool already bounds."""
    return _in_worker


def in_grader_worker() -> bool:
    """True in a grader worker process, and in any daemonic multiprocessing child (which grades inline under an alarm,
    a5core/grader/single.py, as it did when workers were multiprocessing children, which it could not start)."""
    return _in_worker or mp.current_process().daemon


def _limit_memory(memory_mb: int) -> None:
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass


def _watch_parent(parent_pid: int) -> None:
    """Exit at once (no traceback, no cleanup) when the parent is gone, even in the middle of an item."""

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="grader-parent-watch", daemon=True).start()


def _warm_up(path: str, grader: Callable) -> None:
    """Import everything (sympy, math-verify's parser) before the first timed item."""

    grade_inline("</think> <answer>\\sin(\\frac{1}{2})</answer>", "\\sin(0.5)")
    if path == AUDIT_PATH:
        _grade_item(grader, "</think> <answer>\\frac{1}{2}</answer>", ("0.5", "r1_zero"))
    elif path not in BUILTIN and path != SINGLE_CALL_PATH:
        _grade_item(grader, "</think> <answer>1</answer>", "1")


def _grade_item(grader: Callable, response, ground_truth) -> dict:
    try:
        return grader(response, ground_truth)
    except MemoryError:
        return failed("rejected_input", "memory limit")
    except Exception as err:  # a custom grader's bug must not take the worker (and a traceback) with it
        logger.debug("grader raised", exc_info=True)
        return failed("error", f"{type(err).__name__}: {err}"[:300])


def serve() -> None:
    """A worker process's main (`_Slot` starts it with the pipe's file descriptor and the worker's settings)."""
    fd, path, memory_mb, parent_pid = sys.argv[1:]
    _worker(Connection(int(fd)), path, int(memory_mb), int(parent_pid))


def _worker(conn: Connection, path: str, memory_mb: int, parent_pid: int) -> None:
    global _in_worker
    _in_worker = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the pool
    _watch_parent(parent_pid)
    _limit_memory(memory_mb)
    try:
        grader = detailed_grader(path)
        _warm_up(path, grader)
        conn.send("ready")
        while True:
            msg = conn.recv()
            if msg is None:
                return
            batch, idx, response, gt = msg
            conn.send((batch, idx, _grade_item(grader, response, gt)))
    except (EOFError, OSError):
        os._exit(0)  # the parent closed the pipe or died: leave quietly


def _worker_env() -> dict[str, str]:
    """The parent's environment with its module search path, so a reward function imports in a worker as it does in
    the parent (a multiprocessing child gets the parent's sys.path the same way)."""
    paths = [p or os.getcwd() for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class _Slot:
    """One worker process and its pipe; `state` is "starting", "idle" or "busy". The worker runs in a process group
    of its own, so a terminal's Ctrl-C reaches only the parent, which closes the pool."""

    def __init__(self, path: str, memory_mb: int):
        parent, child = Pipe()
        args = [str(child.fileno()), path, str(memory_mb), str(os.getpid())]
        try:  # -P: the parent's sys.path (PYTHONPATH) first, not the working directory
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c", "from a5core.grader.pool import serve; serve()", *args],
                stdin=subprocess.DEVNULL,
                pass_fds=(child.fileno(),),
                env=_worker_env(),
                process_group=0,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.conn, self.state, self.item, self.payload = parent, "starting", -1, ("", None)
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S

    def stop(self, wait_s: float) -> None:
        """Wait up to `wait_s` for the worker to leave, then kill it; close the pipe."""
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # stuck in the kernel: never raise from cleanup (Ctrl-C, close)
                logger.warning("grader worker %s did not exit after SIGKILL", self.proc.pid)
        self.conn.close()

    def kill(self) -> None:
        self.proc.kill()
        self.stop(5)


def _kill_left(slots: list[_Slot]) -> None:
    """At exit, the workers of a pool never closed (an error before its `with` block): killed, as multiprocessing
    killed its daemonic children, rather than left to notice their parent is gone."""
    for slot in slots:
        slot.kill()


class GraderPool:
    """A reusable pool: `with GraderPool(path, workers=2) as pool: pool.map(responses, gts)`.

    `audit=True` gives it an auditor, a second pool of as many workers running the grader audit
    (`pool.audit(...)`, a5core.grader.audit): its own processes and time bound, so a slow audit never costs a
    response its reward."""

    def __init__(
        self,
        reward_fn: str = "a5core.grader:r1_zero_reward_fn",
        workers: int = 2,
        timeout_s: float = 5.0,
        memory_mb: int = 2048,
        audit: bool = False,
    ):

        load_reward_fn(reward_fn)  # fail fast in the parent on a bad path
        self.path, self.n, self.timeout_s, self.memory_mb = reward_fn, max(1, workers), timeout_s, memory_mb
        self.slots: list[_Slot] = []
        weakref.finalize(self, _kill_left, self.slots)
        self.batch = 0  # id of the current `map`, carried by every request and reply
        self.auditor = GraderPool(AUDIT_PATH, workers, timeout_s, memory_mb) if audit else None
        self.mapping_s = 0.0  # wall-clock seconds spent in `map` so far (`seconds`)
        self.comparer: GraderPool | None = None  # `same_answers`' pool of the built-in rules, started on first use

    def start(self) -> Self:
        """Start the workers now, without waiting for them: their imports overlap what the caller does next
        (loading a model, generating); `map` waits for the ones it needs."""
        while len(self.slots) < self.n:
            self.slots.append(_Slot(self.path, self.memory_mb))
        if self.auditor:
            self.auditor.start()
        return self

    def audit(self, responses: list[str], ground_truths: list, prompt: str) -> list[dict | None]:
        """The audit's reply for each response (a5core.grader.audit.verdicts reads it); None each without an auditor."""
        if self.auditor is None:
            return [None] * len(responses)
        return self.auditor.map(responses, [(g, prompt) for g in ground_truths])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for sibling in (self.auditor, self.comparer):
            if sibling is not None:
                sibling.close()
        for slot in self.slots:
            try:
                slot.conn.send(None)
            except (OSError, ValueError):
                pass
            slot.stop(1)
        self.slots.clear()  # in place: the exit finalizer holds this list

    def seconds(self) -> float:
        """Wall-clock seconds this pool and its sibling pools have spent grading (in `map`) since they were made."""
        return self.mapping_s + sum(p.seconds() for p in (self.auditor, self.comparer) if p is not None)

    def same_answers(self, pairs: list[tuple[str, str]]) -> list[bool]:
        """For each (answer, other) pair of extracted answers: whether the grader's built-in rules judge `answer`
        equal to `other` taken as the ground truth (maj@k's answer classes, a5core.run.evaluation.answer_classes),
        each under this pool's time and memory bounds in a sibling pool of workers started on first use."""
        if not pairs:
            return []
        if self.comparer is None:
            self.comparer = GraderPool(SINGLE_CALL_PATH, self.n, self.timeout_s, self.memory_mb)
        responses = [f"</think> <answer>{answer}</answer>" for answer, _ in pairs]
        graded = self.comparer.map(responses, [(other, "r1_zero") for _, other in pairs])
        return [g["answer_reward"] == 1.0 for g in graded]

    def map(self, responses: list[str], ground_truths: list, progress: bool = False) -> list[dict]:
        """Grade every pair; never hangs: each item has `timeout_s` of wall-clock time once a worker has it."""
        if len(responses) != len(ground_truths):
            raise ValueError("responses and ground_truths differ in length")
        t0 = time.monotonic()
        try:
            return self._map(responses, ground_truths, progress)
        finally:
            self.mapping_s += time.monotonic() - t0

    def _map(self, responses: list[str], ground_truths: list, progress: bool) -> list[dict]:
        while len(self.slots) < min(self.n, max(1, len(responses))):
            self.slots.append(_Slot(self.path, self.memory_mb))
        self.batch += 1
        results: list[dict | None] = [None] * len(responses)
        pending = deque(range(len(responses)))
        bar = progress_bar(len(responses), "grading", disable=not progress)
        try:
            while pending or any(s.state == "busy" for s in self.slots):
                self._dispatch(pending, responses, ground_truths, results, bar)
                self._collect(results, bar)
        except BaseException:  # Ctrl-C, a failed start-up, ...: no busy worker may answer into a later batch
            self._drop_unfinished()
            raise
        finally:
            bar.close()
        return results  # type: ignore[return-value]

    def _drop_unfinished(self) -> None:
        """Kill and forget every busy or starting worker (the next `map` starts fresh ones)."""
        for slot in [s for s in self.slots if s.state != "idle"]:
            slot.kill()
            self.slots.remove(slot)

    def _dispatch(self, pending: deque, responses, ground_truths, results, bar) -> None:
        for slot in self.slots:
            if slot.state != "idle" or not pending:
                continue
            idx = pending.popleft()
            try:
                slot.conn.send((self.batch, idx, responses[idx], ground_truths[idx]))
            except (OSError, ValueError, EOFError):  # the worker died between items: retry on a fresh one
                pending.appendleft(idx)
                self._restart(slot)
                continue
            except Exception as err:  # e.g. an unpicklable ground truth
                logger.debug("cannot send item %d", idx, exc_info=True)
                results[idx] = failed("error", f"cannot send item: {type(err).__name__}: {err}"[:300])
                bar.update(1)
                continue
            slot.state, slot.item, slot.deadline = "busy", idx, time.monotonic() + self.timeout_s
            slot.payload = (responses[idx], ground_truths[idx])

    def _collect(self, results: list, bar) -> None:
        """Wait for the first result, start-up message or deadline, and handle everything that is due."""
        active = [s for s in self.slots if s.state in ("busy", "starting")]
        if not active:
            return
        ready = wait([s.conn for s in active], timeout=max(0.0, min(s.deadline for s in active) - time.monotonic()))
        for slot in active:
            if slot.conn in ready or slot.conn.poll():
                self._receive(slot, results, bar)
            elif time.monotonic() >= slot.deadline:
                self._expire(slot, results, bar)

    def _receive(self, slot: _Slot, results: list, bar) -> None:
        try:
            msg = slot.conn.recv()
        except (EOFError, OSError):
            if slot.state == "starting":
                raise GraderStartError(f"grader worker for {self.path} died during start-up") from None
            results[slot.item] = failed("rejected_input", "grader worker died (memory limit?)")
            bar.update(1)
            self._restart(slot)
            return
        if slot.state == "starting":
            slot.state = "idle"
            return
        batch, idx, result = msg
        if batch != self.batch or slot.state != "busy" or idx != slot.item:
            logger.warning("dropped a stale grader reply (batch %s, item %s)", batch, idx)
            return
        results[idx] = result
        slot.state = "idle"
        bar.update(1)

    def _expire(self, slot: _Slot, results: list, bar) -> None:
        if slot.state == "starting":
            raise GraderStartError(f"grader worker for {self.path} did not start within {STARTUP_TIMEOUT_S}s")
        results[slot.item] = timeout_result(self.path, *slot.payload, f"over {self.timeout_s}s")
        bar.update(1)
        self._restart(slot)

    def _restart(self, slot: _Slot) -> None:
        """Kill the worker and start its replacement without waiting for it (it reports "ready" later)."""
        slot.kill()
        self.slots[self.slots.index(slot)] = _Slot(self.path, self.memory_mb)


def grade_batch(
    responses: list[str],
    ground_truths: list,
    reward_fn: str = "a5core.grader:r1_zero_reward_fn",
    workers: int = 2,
    timeout_s: float = 5.0,
    progress: bool = False,
) -> list[dict]:
    """One-shot batch grading through a temporary `GraderPool`."""
    with GraderPool(reward_fn, workers=workers, timeout_s=timeout_s) as pool:
        return pool.map(responses, ground_truths, progress=progress)
