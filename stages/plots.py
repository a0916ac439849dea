"""Stage plots: figures for every configured run, reports/summary.md ."""

import os
from pathlib import Path

from a5core import stage
from a5core.artifacts import write_text
from a5core.config import read_params
from a5core.plots import make_plots
from a5core.summary import summary_markdown


def main() -> None:
    args = stage.args("results", "ei", "figures", "summary")
    params = read_params(args.params)
    runs = {family: list(params.get(f"{family}_runs") or {}) for family in ("sft", "ei")}
    grpo = {name: overrides or {} for name, overrides in (params.get("grpo_runs") or {}).items()}
    results = make_plots(Path(args.results), Path(args.figures), runs, grpo, ei_last=args.ei)
    write_text(summary_markdown(results, os.path.relpath(args.figures, Path(args.summary).parent)), args.summary)
    print(f"{len(results)} rows in {args.summary}")


if __name__ == "__main__":
    main()
