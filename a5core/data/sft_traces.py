"""SFT data: filtering teacher traces to the correct ones, and choosing the first N of a fixed shuffle."""

from __future__ import annotations

import random
from collections import defaultdict

from a5core.config.sections import ConfigError
from a5core.grader.pool import GraderPool


def filter_traces(rows: list[dict], pool: GraderPool) -> tuple[list[dict], list[dict], dict]:
    """Grade each trace's final answer against its ground truth; returns (kept, rejected, stats)."""
    grades = pool.map([r["response"] for r in rows], [r["ground_truth"] for r in rows], progress=True)
    kept, rejected, groups = [], [], defaultdict(lambda: [0, 0])
    for r, g in zip(rows, grades):
        ok = g["reward"] == 1.0
        (kept if ok else rejected).append(r if ok else {**r, "status": g["status"], "extracted": g["extracted"]})
        for key in (f"subject={r.get('subject', '')}", f"level={r.get('level', '')}"):
            groups[key][0] += ok
            groups[key][1] += 1
    mean_len = lambda xs: sum(len(x["response"]) for x in xs) / max(len(xs), 1)  # noqa: E731
    stats = {
        "kept": len(kept),
        "total": len(rows),
        "retention": len(kept) / max(len(rows), 1),
        "mean_len_before": mean_len(rows),
        "mean_len_after": mean_len(kept),
        "by_group": {k: tuple(v) for k, v in groups.items()},
    }
    return kept, rejected, stats


def select_examples(rows: list[dict], n: int, seed: int) -> list[dict]:
    """The first `n` unique examples (by unique_id) of a fixed shuffle; n = 0 means all."""
    unique = list({r["unique_id"]: r for r in rows}.values())
    random.Random(seed).shuffle(unique)
    if n and n > len(unique):
        raise ConfigError(
            f"sft_runs: a run asks for examples: {n} but the data has only {len(unique)} unique traces; "
            f"set examples to at most {len(unique)} (or 0 = all)"
        )
    return unique[:n] if n else unique
