"""What starting a training stage's grader pool costs: a5's workers (fresh interpreters that import the grader alone)
against multiprocessing's spawn (which also imports the parent's main script), in the same run.

    python bench/grader_pool.py --reps 3      # prints a Markdown table (reports/grader_pool.md)

This script imports torch and transformers first, as a stage script does, so a spawned worker imports them too. Each
rep starts a pool of 2 workers and its auditor of 2 (as many as the smoke profile's EI and GRPO stages start: a
training pool and a validation pool of 1 worker each, each with its auditor), grades 4 responses and audits 2, and
closes it: the wall-clock seconds, and the CPU seconds of the whole machine over the rep
(`/proc/stat`, so the workers' own time counts; run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from multiprocessing.connection import wait

import torch  # noqa: F401  (what a stage's main script imports)
import transformers  # noqa: F401

from a5core.grader.pool import AUDIT_PATH, GraderPool, _worker

RESPONSE = "</think> <answer>2</answer>"


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def a5_pool() -> None:
    with GraderPool(workers=2, audit=True) as pool:
        assert [g["reward"] for g in pool.map([RESPONSE] * 4, ["2"] * 4)] == [1.0] * 4
        pool.audit([RESPONSE] * 2, ["2"] * 2, "r1_zero")


def spawned_pool() -> None:
    """The same four workers started by multiprocessing's spawn (a5's pool until 2026-12-06), until each is ready."""
    ctx, conns, procs = mp.get_context("spawn"), [], []
    for path in ["a5core.grader:r1_zero_reward_fn"] * 2 + [AUDIT_PATH] * 2:
        parent, child = ctx.Pipe()
        procs.append(ctx.Process(target=_worker, args=(child, path, 2048, os.getpid()), daemon=True))
        procs[-1].start()
        conns.append(parent)
    waiting = list(conns)
    while waiting:
        for conn in wait(waiting):
            assert conn.recv() == "ready"
            waiting.remove(conn)
    for conn, proc in zip(conns, procs):
        conn.send(None)
        proc.join(5)


def measure(fn, reps: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(reps):
        t, c = time.monotonic(), busy_cpu_s()
        fn()
        walls.append(time.monotonic() - t)
        cpus.append(busy_cpu_s() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    reps = ap.parse_args().reps
    rows = {"a5 (fresh interpreters)": measure(a5_pool, reps), "multiprocessing spawn": measure(spawned_pool, reps)}
    print(f"| pool of 2 + auditor of 2 (median of {reps}) | wall s | machine CPU s |\n|---|---|---|")
    for name, (wall, cpu) in rows.items():
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")
    (wall_a5, cpu_a5), (wall_mp, cpu_mp) = rows.values()
    print(f"\nspawn / a5: {wall_mp / wall_a5:.2f}x wall, {cpu_mp / cpu_a5:.2f}x CPU")


if __name__ == "__main__":
    main()
