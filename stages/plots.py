"""Stage plots: figures for every method and reports/summary.md."""
import os
from pathlib import Path

from a5core import stage
from a5core.artifacts import write_text
from a5core.plots import make_plots, summary_markdown


def main() -> None:
    a = stage.args("results", "figures", "summary")
    rows = make_plots(Path(a.results), Path(a.figures))
    write_text(summary_markdown(rows, os.path.relpath(a.figures, Path(a.summary).parent)), a.summary)
    print(f"{len(rows)} rows in {a.summary}")


if __name__ == "__main__":
    main()
