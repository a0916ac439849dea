"""The grader audit of a finished DAG, one table: `python -m tools.audit [--results results]`.

- For each GRPO run (results/grpo/<run>/logs) and EI run (its last round's rounds.csv): the audit's shares on the
  rollouts and on the validations (each the mean over steps or rounds, and the largest), beside the reward and the
  final accuracy they qualify (a5core/grader/audit.py defines each share).
- How many of the top-reward completions kept at the validations (completions.jsonl, `"shown": "top_reward"`; EI: the
  last round's) the strict rule or math-verify disagrees with: the ones to read first.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from types import SimpleNamespace

from a5core.grader.audit import AUDIT_NAMES, disagrees
from a5core.run.history import read_log, read_rows

SHORT = {"audit_vs_strict": "vs strict", "audit_vs_math_verify": "vs math-verify", "audit_unconfirmed": "unconfirmed"}


def _cell(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]  # NaN: no judge
    return f"{sum(values) / len(values):.3f} (max {max(values):.3f})" if values else "—"


def _flagged(logs: Path) -> str:
    path = logs / "completions.jsonl"
    shown = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    # a completion row as `disagrees` reads a sample (the built-in rewards pay the answer: reward = answer reward;
    # rows logged without an audit have no verdicts)
    blank = {"strict_reward": None, "verified": None}
    top = [
        SimpleNamespace(**{**blank, **c, "answer_reward": c["reward"]}) for c in shown if c.get("shown") == "top_reward"
    ]
    return f"{sum(disagrees(c) for c in top)} of {len(top)}"


def run_rows(results: Path) -> list[tuple[str, list[dict], list[dict], Path]]:
    """(name, rollout rows, validation rows, logs folder) of every GRPO run and every EI run's last round."""
    out = []
    for logs in sorted((results / "grpo").glob("*/logs")) + sorted((results / "grpo").glob("*/seed_*/logs")):
        train, evals = read_rows(logs, "train"), read_rows(logs, "eval")
        out.append((f"grpo {logs.parent.relative_to(results / 'grpo')}", train, evals, logs))
    for run in sorted(p for p in (results / "ei").glob("*") if p.is_dir()):
        last = max(run.glob("round_*"), key=lambda p: int(p.name.split("_")[1]), default=None)
        rounds = read_log(last / "logs" / "rounds.csv") if last else []
        if rounds:
            out.append((f"ei {run.name}", rounds[1:], rounds, last / "logs"))
    return out


def table(results: Path) -> str:
    names = [n for n in AUDIT_NAMES if n in SHORT]
    head = ["run", "rollout reward", *(f"rollouts {SHORT[n]}" for n in names), "final accuracy"]
    head += [f"validations {SHORT[n]}" for n in names] + ["top-reward completions flagged"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rollouts, evals, logs in run_rows(results):
        cells = [name, _cell(rollouts, "rollout/reward")]  # EI's rounds log no reward mean: —
        cells += [_cell(rollouts, f"rollout/{n}") for n in names]
        cells += [f"{evals[-1].get('eval/accuracy', float('nan')):.3f}" if evals else "—"]
        cells += [_cell(evals, f"eval/{n}") for n in names] + [_flagged(logs)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results")
    print(table(Path(ap.parse_args().results)))


if __name__ == "__main__":
    main()
