"""`dvc exp show`, narrowed to what an ablation compares: one row per experiment, the params that differ between them,
and each run's validation accuracy with its 95% interval, in at most 120 columns.

    python -m tools.exps                      # every family; e.g. after `dvc exp run -S grpo.lr=3e-6`
    python -m tools.exps --family grpo        # the GRPO runs only

`dvc exp show` names a metric by its file (`results/grpo/<run>/metrics.json:eval/accuracy`) and lists every param,
so even `--only-changed` or `--drop/--keep` leave a table wider than a terminal; this reads the same table
(`dvc.api.exp_show`) and prints it short. When every run does not fit, runs whose accuracy is the same in every row
are left out first (if none differs, the runs of the families whose params changed stay), and the table says so.
"""

from __future__ import annotations

import argparse
import re

WIDTH = 120
METRIC = re.compile(r"results/(?P<run>(?:sft|ei|grpo)/.+?)/metrics\.json:eval/accuracy$")
META = {"Experiment", "rev", "typ", "Created", "parent", "State", "Executor"}


def _value(v) -> str:
    return "—" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def accuracy(row: dict, run: str) -> str:
    """`run`'s accuracy in one row of `dvc.api.exp_show()`, with its 95% interval; — when the row has none."""
    key = f"results/{run}/metrics.json:eval/accuracy"
    acc, lo, hi = row.get(key), row.get(key + "_lo"), row.get(key + "_hi")
    return "—" if acc is None else f"{acc:.3f} ({lo:.3f}–{hi:.3f})" if lo is not None else f"{acc:.3f}"


def table(rows: list[dict], family: str | None = None) -> list[str]:
    """The lines of the narrow table for `dvc.api.exp_show()`'s rows."""
    params = [
        k for k in rows[0] if k not in META and not set(":/") & set(k) and len({_value(r.get(k)) for r in rows}) > 1
    ]
    runs = [m["run"] for k in rows[0] if (m := METRIC.match(k)) and (family is None or m["run"].startswith(family))]
    columns = {run: [accuracy(r, run) for r in rows] for run in runs}
    lines = _lines(rows, params, columns)
    if any(len(line) > WIDTH for line in lines):  # the runs that differ between experiments come first
        kept = {run: acc for run, acc in columns.items() if len(set(acc)) > 1} or _changed_family(columns, params)
        lines = _lines(rows, params, kept)
        lines.append(f"({len(columns) - len(kept)} run(s) with the same accuracy in every row left out: --family)")
    if any(len(line) > WIDTH for line in lines):
        return [line[:WIDTH] for line in lines] + [f"(cut at {WIDTH} columns: --family narrows it)"]
    return lines


def _changed_family(columns: dict[str, list[str]], params: list[str]) -> dict[str, list[str]]:
    """When no run's accuracy differs: the runs of the families whose params changed (`grpo.lr` -> the GRPO runs), so
    the table still shows what the experiment compares; every run when no family's param changed."""
    families = {p.split(".")[0].removesuffix("_runs") for p in params}
    return {run: acc for run, acc in columns.items() if run.split("/")[0] in families} or columns


def _lines(rows: list[dict], params: list[str], columns: dict[str, list[str]]) -> list[str]:
    head = ["experiment", *params, *(f"{run} acc (95%)" for run in columns)]
    body = [
        [r.get("Experiment") or r["rev"], *(_value(r.get(p)) for p in params), *(acc[i] for acc in columns.values())]
        for i, r in enumerate(rows)
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [head, *body]]


def main() -> None:
    import dvc.api

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=["sft", "ei", "grpo"], help="only this family's runs")
    a = ap.parse_args()
    rows = dvc.api.exp_show()
    print("\n".join(table(rows, a.family)))


if __name__ == "__main__":
    main()
