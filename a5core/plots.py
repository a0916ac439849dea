"""The `plots` stage's figures: every configured run's curves, with 95% bands, in PNGs a paper draft can use.

Each curve starts at its run's starting policy (step 0 / round 0); x is the optimizer step (so off-policy GRPO runs,
with several optimizer steps per rollout batch, are drawn without vertical zig-zags), the EI round, or wall-clock
seconds; bands are the 95% intervals each evaluation recorded. GRPO gets one overview figure and one figure per
ablation: runs are grouped by which `grpo` settings they override (the base run, with no overrides, is in every
group), so the handout's experiments in `conf/profile/full.yaml` each get their own figure without naming runs here.
GRPO's and EI's figures carry the grader audit (a5core.grader.audit) beside reward and accuracy; a GRPO run's seed
replicates (a5core.replicates), and an EI run's, are thin lines of its color.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 -- the backend must be chosen before pyplot loads

from a5core.history import read_log, read_rows, write_csv  # noqa: E402

ACCURACY = "validation accuracy (fraction correct)"
AUDIT = "share of responses"


@dataclass(frozen=True)
class Result:
    """One line of the summary: a method's run, its final metrics, and the figure that shows it."""

    method: str
    run: str
    metrics: dict
    figure: str
    detail: str = ""


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _curve(ax, rows: list[dict], x: str, y: str, label: str | None, band: bool = False, color=None) -> None:
    """One run's curve (`label` None: a seed replicate's, thin and unlabelled)."""
    pts = [r for r in rows if _is_num(r.get(x)) and _is_num(r.get(y))]
    if not pts:
        return
    xs = [r[x] for r in pts]
    style = {"marker": "o", "ms": 3, "label": label} if label else {"lw": 0.8, "alpha": 0.45}
    (line,) = ax.plot(xs, [r[y] for r in pts], color=color, **style)
    if band and all(_is_num(r.get(f"{y}_lo")) and _is_num(r.get(f"{y}_hi")) for r in pts):
        ax.fill_between(
            xs, [r[f"{y}_lo"] for r in pts], [r[f"{y}_hi"] for r in pts], alpha=0.15, color=line.get_color()
        )


def _axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _share_axis(ax) -> None:
    """A share's axis: from 0, with a visible range when every value is 0."""
    ax.set_ylim(0, max(0.05, ax.get_ylim()[1]))


def _save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _run_dirs(pattern: str, names: list[str]) -> dict[str, Path]:
    dirs = {name: Path(pattern.format(run=name)) for name in names}
    missing = [str(d / "metrics.json") for d in dirs.values() if not (d / "metrics.json").exists()]
    if missing:
        raise FileNotFoundError(f"plots: no results for configured runs: {missing}")
    return dirs


def _metrics(folder: Path) -> dict:
    """A stage's metrics.json and details.json (when there is one) together."""
    details = folder / "details.json"
    return {
        **json.loads((folder / "metrics.json").read_text()),
        **(json.loads(details.read_text()) if details.exists() else {}),
    }


def baseline_figure(results: Path, out: Path) -> Result:
    base = _metrics(results / "baseline")
    breakdown = json.loads((results / "baseline" / "breakdown.json").read_text())
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    cats = {
        "format 1, answer 1": "eval/format1_answer1",
        "format 1, answer 0": "eval/format1_answer0",
        "format 0, answer 0": "eval/format0_answer0",
    }
    ax.bar(list(cats), [breakdown[k] for k in cats.values()])
    _axes(ax, "handout category", "responses (questions x samples)", "zero-shot baseline: format and answer")
    return Result("zero-shot", "baseline", base, _save(fig, out, "baseline_categories.png"))


def sft_figure(results: Path, out: Path, names: list[str]) -> list[Result]:
    dirs = _run_dirs(str(results / "sft" / "{run}"), names)
    finals = {k: _metrics(d) for k, d in dirs.items()}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for k, d in dirs.items():
        _curve(axes[0], read_log(d / "logs" / "eval.csv"), "step", "eval/accuracy", k, band=True)
    _axes(axes[0], "optimizer step", ACCURACY, "SFT: validation accuracy (95% bands)")
    order = sorted(finals, key=lambda k: (finals[k].get("examples", 0), k))
    acc = [finals[k]["eval/accuracy"] for k in order]
    err = [
        [a - finals[k]["eval/accuracy_lo"] for k, a in zip(order, acc)],
        [finals[k]["eval/accuracy_hi"] - a for k, a in zip(order, acc)],
    ]
    axes[1].bar([f"{k}\n({finals[k].get('examples', '?')})" for k in order], acc, yerr=err, capsize=3)
    _axes(axes[1], "run (unique training examples)", ACCURACY, "SFT: final accuracy by data size / filtering")
    name = _save(fig, out, "sft.png")
    write_csv(
        [
            {
                "run": k,
                "examples": finals[k].get("examples", ""),
                "eval/accuracy": finals[k]["eval/accuracy"],
                "eval/accuracy_lo": finals[k]["eval/accuracy_lo"],
                "eval/accuracy_hi": finals[k]["eval/accuracy_hi"],
            }
            for k in order
        ],
        out.parent / "sft_by_size.csv",
    )
    return [Result("SFT", k, finals[k], name, f"{finals[k].get('examples', '?')} examples") for k in names]


def ei_figure(ei_last: str, out: Path, names: list[str], seeds: dict | None = None) -> list[Result]:
    """The EI panels by round; each run's seed replicates (`seeds`: run -> extra seeds; their last round in
    `<run>/seed_<s>/round_<N>`) as thin lines of its color."""
    if not names:
        return []
    dirs = _run_dirs(ei_last, names)
    rounds = {k: read_log(d / "logs" / "rounds.csv") for k, d in dirs.items()}
    replicas = {
        k: [d.parent / f"seed_{s}" / d.name / "logs" / "rounds.csv" for s in (seeds or {}).get(k, ())]
        for k, d in dirs.items()
    }
    missing = [str(path) for paths in replicas.values() for path in paths if not path.exists()]
    if missing:
        raise FileNotFoundError(f"plots: no rounds for configured seed replicates: {missing}")
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
    for i, (k, rows) in enumerate(rounds.items()):
        color = f"C{i % 10}"  # a run's color, its replicates' too
        _curve(axes[0], rows, "round", "eval/accuracy", k, band=True, color=color)
        _curve(axes[1], rows, "round", "eval/entropy", k, color=color)
        for rep in map(read_log, replicas[k]):
            _curve(axes[0], rep, "round", "eval/accuracy", None, color=color)
            _curve(axes[1], rep, "round", "eval/entropy", None, color=color)
        _curve(axes[2], rows, "round", "rollout/audit_unconfirmed", f"{k}: rollouts")
        _curve(axes[2], rows, "round", "eval/audit_unconfirmed", f"{k}: validation")
    _axes(axes[0], "EI round (0 = starting policy)", ACCURACY, "Expert Iteration: validation accuracy")
    _axes(axes[1], "EI round (0 = starting policy)", "mean token entropy (nats)", "Expert Iteration: response entropy")
    _share_axis(axes[2])
    _axes(axes[2], "EI round (0 = starting policy)", AUDIT, "paid, refused by an auditor (grader audit)")
    name = _save(fig, out, "ei.png")
    return [Result("EI", k, _metrics(d), name, f"{int(_metrics(d).get('round', 0))} rounds") for k, d in dirs.items()]


GRPO_PANELS = (  # (log, x, y, x label, y label, title)
    ("eval", "step", "eval/accuracy", "optimizer step", ACCURACY, "validation accuracy"),
    ("eval", "perf/wall_s", "eval/accuracy", "wall-clock (s)", ACCURACY, "validation accuracy vs wall-clock"),
    ("train", "step", "train/entropy", "optimizer step", "mean token entropy (nats)", "response entropy"),
    ("train", "step", "rollout/response_tokens", "optimizer step", "mean response length (tokens)", "response length"),
    ("train", "step", "train/grad_norm", "optimizer step", "gradient norm (before clipping)", "gradient norm"),
    ("train", "step", "rollout/reward", "optimizer step", "mean rollout reward", "training reward"),
    # the grader audit (a5core.grader.audit) beside the reward and accuracy above: a reward being gamed shows here
    ("train", "step", "rollout/audit_unconfirmed", "optimizer step", AUDIT, "rollouts paid, refused by an auditor"),
    ("train", "step", "rollout/audit_vs_math_verify", "optimizer step", AUDIT, "rollouts: our grader vs math-verify"),
    ("eval", "step", "eval/audit_unconfirmed", "optimizer step", AUDIT, "validation paid, refused by an auditor"),
)


def _logs(folder: Path) -> dict[str, list[dict]]:
    return {kind: read_rows(folder / "logs", kind) for kind in ("eval", "train")}


def grpo_panels(
    dirs: dict[str, Path], out: Path, name: str, title: str, seeds: dict[str, tuple[int, ...]] | None = None
) -> str:
    """The GRPO panels of `dirs`' runs; each run's seed replicates (`seeds`: run -> extra seeds; their logs in
    `<run dir>/seed_<s>`) as thin lines of its color."""
    logs = {k: _logs(d) for k, d in dirs.items()}
    replicas = {k: [_logs(dirs[k] / f"seed_{s}") for s in (seeds or {}).get(k, ())] for k in dirs}
    fig, axes = plt.subplots(3, 3, figsize=(14, 10.5))
    colors = {k: f"C{i % 10}" for i, k in enumerate(dirs)}  # a run's color in every panel, its replicates' too
    for ax, (kind, x, y, xlabel, ylabel, panel) in zip(axes.flat, GRPO_PANELS, strict=True):
        for k in dirs:
            _curve(ax, logs[k][kind], x, y, k, band=kind == "eval", color=colors[k])
            for rep in replicas[k]:
                _curve(ax, rep[kind], x, y, None, color=colors[k])
        if ylabel == AUDIT:
            _share_axis(ax)
        _axes(ax, xlabel, ylabel, panel)
    fig.suptitle(title)
    return _save(fig, out, name)


def ablation_groups(overrides: dict[str, dict]) -> dict[str, list[str]]:
    """Runs grouped by the set of `grpo` keys they override; the base run(s) (no overrides) join every group."""
    base = [k for k, o in overrides.items() if not o]
    groups: dict[str, list[str]] = {}
    for k, o in overrides.items():
        if o:
            groups.setdefault("+".join(sorted(o)), list(base)).append(k)
    return groups


def grpo_figures(results: Path, out: Path, overrides: dict[str, dict], seeds: dict | None = None) -> list[Result]:
    if not overrides:
        return []
    dirs = _run_dirs(str(results / "grpo" / "{run}"), list(overrides))
    name = grpo_panels(dirs, out, "grpo.png", "GRPO: every run (95% bands on validation accuracy)", seeds)
    for keys, runs in ablation_groups(overrides).items():
        if len(runs) > 1 and len(runs) < len(dirs):
            title = f"GRPO ablation: {keys.replace('+', ', ')}"
            grpo_panels({k: dirs[k] for k in runs}, out, f"grpo_{keys}.png", title, seeds)
    return [Result("GRPO", k, _metrics(d), name, _grpo_detail(_metrics(d), overrides[k])) for k, d in dirs.items()]


def _grpo_detail(metrics: dict, overrides: dict) -> str:
    detail = f"{int(metrics.get('steps_done', 0))} steps"
    if overrides.get("prompt", "r1_zero") != "r1_zero":
        detail += f"; trained and validated with the {overrides['prompt']} prompt and its reward"
    return detail


def make_plots(
    results: Path,
    out: Path,
    runs: dict[str, list[str]],
    grpo_overrides: dict[str, dict],
    ei_last: str = "",
    seeds: dict[str, dict[str, tuple[int, ...]]] | None = None,
) -> list[Result]:
    """Draw every figure into `out`; returns one Result per configured run (baseline first). `seeds`: family ("ei",
    "grpo") -> replicated run -> its extra seeds, drawn as thin lines beside the run.

    `runs` names the configured SFT and EI runs ({"sft": [...], "ei": [...]}, from params.yaml) and `grpo_overrides`
    the GRPO runs with their overrides, so results left in the workspace by removed runs are not drawn. `ei_last`: the
    results folder of an EI run's last round, with `{run}` for the run's name (its rounds.csv holds every round).
    """
    out.mkdir(parents=True, exist_ok=True)
    return [
        baseline_figure(results, out),
        *sft_figure(results, out, runs.get("sft", [])),
        *ei_figure(ei_last or str(results / "ei" / "{run}"), out, runs.get("ei", []), (seeds or {}).get("ei")),
        *grpo_figures(results, out, grpo_overrides, (seeds or {}).get("grpo")),
    ]
