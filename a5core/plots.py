"""The `plots` stage: PNG figures of every method's curves and `reports/summary.md` (one accuracy table)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from a5core.runlog import read_log  # noqa: E402


def _lines(ax, series: dict[str, list[dict]], x: str, y: str, title: str) -> None:
    for name, rows in series.items():
        pts = [(r[x], r[y]) for r in rows if _is_num(r.get(y)) and _is_num(r.get(x))]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=name)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return name


def make_plots(results: Path, out: Path, runs: dict[str, list[str]], ei_last: str = "") -> list[tuple[str, str, float, str]]:
    """Draw every figure into `out`; returns summary rows (method, run, accuracy, figure).

    `runs` names the configured runs per family ({"sft": [...], "ei": [...], "grpo": [...]}, from params.yaml),
    so results left in the workspace by runs that were since removed from params are not drawn. `ei_last`: the
    results folder of an EI run's last round, with `{run}` for the run's name (its rounds.csv holds every round).
    """
    out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, float, str]] = []
    base = json.loads((results / "baseline" / "metrics.json").read_text())
    fig, ax = plt.subplots(figsize=(5, 3))
    cats = ["format1_answer1", "format1_answer0", "format0_answer0"]
    ax.bar(cats, [base[c] for c in cats])
    ax.set_title("zero-shot baseline categories")
    rows.append(("zero-shot", "baseline", base["accuracy"], _save(fig, out, "baseline_categories.png")))

    sft = _run_dirs(str(results / "sft" / "{run}"), runs.get("sft", []))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    _lines(axes[0], {k: read_log(d / "logs" / "eval.csv") for k, d in sft.items()}, "step", "accuracy", "SFT validation accuracy")
    finals = {k: json.loads((d / "metrics.json").read_text()) for k, d in sft.items()}
    write_sft_sizes(finals, out.parent / "sft_by_size.csv")
    axes[1].bar(list(finals), [m["accuracy"] for m in finals.values()])
    axes[1].set_title("final SFT accuracy by dataset (size / filtered)")
    name = _save(fig, out, "sft.png")
    rows += [("SFT", k, m["accuracy"], name) for k, m in finals.items()]

    ei = _run_dirs(ei_last or str(results / "ei" / "{run}"), runs.get("ei", []))
    if ei:
        rounds = {k: read_log(d / "logs" / "rounds.csv") for k, d in ei.items()}
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        _lines(axes[0], rounds, "round", "accuracy", "EI validation accuracy per round (0 = initial policy)")
        _lines(axes[1], rounds, "round", "mean_token_entropy", "EI response entropy per round")
        name = _save(fig, out, "ei.png")
        for k, d in ei.items():
            m = json.loads((d / "metrics.json").read_text())
            rows.append(("EI", f"{k}, {m['round']} rounds (from {m['initial_accuracy']:.3f})", m["accuracy"], name))

    grpo = _run_dirs(str(results / "grpo" / "{run}"), runs.get("grpo", []))
    if grpo:
        evals = {k: read_log(d / "logs" / "eval.csv") for k, d in grpo.items()}
        train = {k: read_log(d / "logs" / "train.csv") for k, d in grpo.items()}
        fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
        _lines(axes[0][0], evals, "step", "accuracy", "GRPO validation accuracy vs step")
        _lines(axes[0][1], evals, "wall_s", "accuracy", "GRPO validation accuracy vs wall-clock")
        _lines(axes[0][2], train, "step", "token_entropy", "token entropy")
        _lines(axes[1][0], train, "step", "response_length", "response length")
        _lines(axes[1][1], train, "step", "grad_norm", "gradient norm")
        _lines(axes[1][2], train, "step", "clip_fraction", "clip fraction")
        name = _save(fig, out, "grpo.png")
        for k, d in grpo.items():
            m = json.loads((d / "metrics.json").read_text())
            start = [r["accuracy"] for r in evals[k] if r.get("step") == 0]
            origin = f" (from {start[0]:.3f} at step 0)" if start else ""
            rows.append(("GRPO", f"{k}, {m['steps_done']} steps{origin}", m["accuracy"], name))
    return rows


def _run_dirs(pattern: str, names: list[str]) -> dict[str, Path]:
    dirs = {name: Path(pattern.format(run=name)) for name in names}
    missing = [str(d / "metrics.json") for d in dirs.values() if not (d / "metrics.json").exists()]
    if missing:
        raise FileNotFoundError(f"plots: no results for configured runs: {missing}")
    return dirs


def write_sft_sizes(finals: dict[str, dict], path: Path) -> None:
    """Final SFT accuracy per run and its number of examples, for `dvc plots` (accuracy vs dataset size)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "examples", "accuracy", "format_rate"])
        for run, m in sorted(finals.items(), key=lambda kv: kv[1].get("examples", 0)):
            w.writerow([run, m.get("examples", ""), m["accuracy"], m["format_rate"]])


def summary_markdown(rows: list[tuple[str, str, float, str]], figures_rel: str) -> str:
    lines = ["# Summary", "", "Validation accuracy of every method and run (written by the `plots` stage).", "",
             "| method | run | accuracy | figure |", "|---|---|---|---|"]
    lines += [f"| {m} | {r} | {a:.3f} | [{f}]({figures_rel}/{f}) |" for m, r, a, f in rows]
    return "\n".join(lines) + "\n"
