"""Batch grading in a pool of killable worker processes.

Each item gets a wall-clock budget; a worker that overruns it (e.g. C-level big-integer work that no
signal can interrupt) is killed and replaced, and the item scores 0 with status `timeout`. Workers run
under an address-space limit, so a memory blow-up kills only that worker (status `rejected_input`). The
reward function is named by import path (`module:function`), so users can plug in their own grader.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import time
from multiprocessing.connection import Connection, wait
from typing import Callable

from tqdm.auto import tqdm

STARTUP_TIMEOUT_S = 120
BUILTIN = {
    "a5core.grader:r1_zero_reward_fn": "r1_zero",
    "a5core.grader.reward:r1_zero_reward_fn": "r1_zero",
    "a5core.grader:question_only_reward_fn": "question_only",
    "a5core.grader.reward:question_only_reward_fn": "question_only",
}


def load_reward_fn(path: str) -> Callable:
    """Import `module:function`; a clear error when it is not there."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"reward function must be 'module:function', got {path!r}")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"{path!r}: {name} is not a callable in {module}")
    return fn


def detailed_grader(path: str) -> Callable[[str, object], dict]:
    """(response, ground_truth) -> dict with the three rewards plus status/extracted/normalized columns."""
    from a5core.grader.reward import grade

    if path in BUILTIN:
        prompt = BUILTIN[path]
        return lambda r, g: grade(r, g, prompt).to_dict()
    fn = load_reward_fn(path)

    def custom(r, g):
        out = {k: float(v) for k, v in fn(r, g).items()}
        return {**out, "status": "custom", "extracted": None, "normalized_pred": None, "normalized_gt": None, "detail": ""}

    return custom


def failed(status: str, detail: str) -> dict:
    return {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0, "status": status, "extracted": None,
            "normalized_pred": None, "normalized_gt": None, "detail": detail}


def _worker(conn: Connection, path: str, memory_mb: int) -> None:
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    grader = detailed_grader(path)
    grader("</think> <answer>1</answer>", "1")  # warm up imports before the first timed item
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        idx, response, gt = msg
        try:
            conn.send((idx, grader(response, gt)))
        except MemoryError:
            conn.send((idx, failed("rejected_input", "memory limit")))


class GraderPool:
    """A reusable pool: `with GraderPool(path, workers=2) as pool: pool.map(responses, gts)`."""

    def __init__(self, reward_fn: str = "a5core.grader:r1_zero_reward_fn", workers: int = 2, timeout_s: float = 5.0, memory_mb: int = 2048):
        load_reward_fn(reward_fn)  # fail fast in the parent on a bad path
        self.path, self.n, self.timeout_s, self.memory_mb = reward_fn, max(1, workers), timeout_s, memory_mb
        self.ctx = mp.get_context("spawn")
        self.procs: list[tuple[mp.Process, Connection]] = []

    def _spawn(self) -> tuple[mp.Process, Connection]:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.path, self.memory_mb), daemon=True)
        proc.start()
        child.close()
        # Item budgets start only once the worker has imported everything (spawn start-up is seconds).
        if not parent.poll(STARTUP_TIMEOUT_S) or parent.recv() != "ready":
            proc.kill()
            raise RuntimeError(f"grader worker for {self.path} did not start within {STARTUP_TIMEOUT_S}s")
        return proc, parent

    def __enter__(self) -> "GraderPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for proc, conn in self.procs:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            proc.join(timeout=1)
            if proc.is_alive():
                proc.kill()
        self.procs = []

    def map(self, responses: list[str], ground_truths: list, progress: bool = False) -> list[dict]:
        """Grade every pair; never hangs: each item has `timeout_s` of wall-clock time."""
        if len(responses) != len(ground_truths):
            raise ValueError("responses and ground_truths differ in length")
        while len(self.procs) < min(self.n, max(1, len(responses))):
            self.procs.append(self._spawn())
        results: list[dict | None] = [None] * len(responses)
        pending = list(range(len(responses)))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # worker slot -> (item, deadline)
        bar = tqdm(total=len(responses), desc="grading", disable=not progress, leave=False)
        while pending or busy:
            for slot in range(len(self.procs)):
                if slot not in busy and pending:
                    idx = pending.pop()
                    self.procs[slot][1].send((idx, responses[idx], ground_truths[idx]))
                    busy[slot] = (idx, time.monotonic() + self.timeout_s)
            next_deadline = min(d for _, d in busy.values())
            ready = wait([self.procs[s][1] for s in busy], timeout=max(0.0, next_deadline - time.monotonic()))
            for slot in list(busy):
                proc, conn = self.procs[slot]
                idx, deadline = busy[slot]
                if conn in ready:
                    try:
                        got, result = conn.recv()
                        results[got] = result
                    except (EOFError, OSError):
                        results[idx] = failed("rejected_input", "grader worker died (memory limit?)")
                        self._replace(slot)
                elif time.monotonic() >= deadline:
                    results[idx] = failed("timeout", f"over {self.timeout_s}s")
                    self._replace(slot)
                else:
                    continue
                del busy[slot]
                bar.update(1)
        bar.close()
        return results  # type: ignore[return-value]

    def _replace(self, slot: int) -> None:
        proc, conn = self.procs[slot]
        proc.kill()
        proc.join(timeout=5)
        conn.close()
        self.procs[slot] = self._spawn()


def grade_batch(responses: list[str], ground_truths: list, reward_fn: str = "a5core.grader:r1_zero_reward_fn",
                workers: int = 2, timeout_s: float = 5.0, progress: bool = False) -> list[dict]:
    """One-shot batch grading through a temporary `GraderPool`."""
    with GraderPool(reward_fn, workers=workers, timeout_s=timeout_s) as pool:
        return pool.map(responses, ground_truths, progress=progress)
