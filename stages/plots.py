"""Stage plots: figures for every method and reports/summary.md."""
import os
from pathlib import Path

from a5core import stage
from a5core.artifacts import write_text
from a5core.config import read_params
from a5core.plots import make_plots, summary_markdown


def main() -> None:
    a = stage.args("results", "ei", "figures", "summary")
    params = read_params(a.params)
    runs = {family: list(params.get(f"{family}_runs") or {}) for family in ("sft", "ei", "grpo")}
    rows = make_plots(Path(a.results), Path(a.figures), runs, ei_last=a.ei)
    write_text(summary_markdown(rows, os.path.relpath(a.figures, Path(a.summary).parent)), a.summary)
    print(f"{len(rows)} rows in {a.summary}")


if __name__ == "__main__":
    main()
