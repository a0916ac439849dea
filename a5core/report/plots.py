"""The `plots` stage's figures: every configured run's curves, with 95% bands, in PNGs a paper draft can use.

Each curve starts at its run's starting policy (step 0 / round 0); x is the optimizer step (so off-policy GRPO runs,
with several optimizer steps per rollout batch, are drawn without vertical zig-zags), the EI round, or wall-clock
seconds. Validation accuracy is drawn at every evaluation a run logged (each row of its eval.csv / rounds.csv): a
filled marker where the whole validation set was scored (the start and the end), a hollow one where the fixed mid-run
subset was (`eval_examples` questions: another, smaller question set, so its band is wider); the legend names both.
Bands are the 95% intervals each evaluation recorded, light, with an edge of the run's colour, so overlapping bands
stay apart; a figure of more than `BANDS_UP_TO` runs (GRPO's overview of a large grid) leaves them to its ablations.
GRPO's training reward is drawn per step (faint dots) and as a running mean over the last `REWARD_WINDOW` GRPO steps
with the 95% t interval of those steps' values (`running_mean`): a step's handful of groups is mostly noise.

Every run keeps one style (colour and marker, and from a family's 13th run on a line style; `run_styles`) in every
panel and figure of a `make_plots` call; its seed replicates (a5core.report.replicates) are thin lines of its colour,
named once in the legend. A figure has one legend, for all its panels. GRPO gets one overview figure and one figure per
ablation: runs are grouped by which `grpo` settings they override (the base run, with no overrides, is in every
group), so the handout's experiments in `conf/profile/full.yaml` each get their own figure without naming runs here.

The grader audit (a5core.grader.audit): each of its panels is in the GRPO and EI figures only when some run drawn
there has a non-zero share in it; a panel left out is named in the figure's footnote (zero at every point), as is a
panel with no data at all (wall-clock without timing files).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 -- the backend must be chosen before pyplot loads
from matplotlib.colors import to_hex, to_rgba  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator, ScalarFormatter  # noqa: E402

from a5core.base.run_record import record_dir  # noqa: E402
from a5core.base.stats import t_interval  # noqa: E402
from a5core.run.history import read_log, read_rows, write_csv  # noqa: E402

ACCURACY = "validation accuracy (fraction correct)"
AUDIT = "share of responses (fraction)"
ENTROPY = "mean token entropy (nats)"
XLABELS = {"step": "optimizer step", "round": "EI round (0 = starting policy)", "perf/wall_s": "wall-clock time (s)"}
PALETTE = tuple(to_hex(c) for c in (*matplotlib.colormaps["tab10"].colors, "#000000", "#c51b7d"))  # 12 colours
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")
LINESTYLES = ("-", "--", ":", "-.")
REWARD_WINDOW = 5  # GRPO steps in the training reward's running mean: one step's few groups are mostly noise
REWARD_TITLE = f"training reward (mean of the last {REWARD_WINDOW} steps)"
MARKED = 10  # a curve with more points than this is drawn without markers (dense training curves)
BAND_ALPHA = 0.1
BANDS_UP_TO = 6  # a figure of more runs draws no bands (they would cover each other): its ablation figures have them


@dataclass(frozen=True)
class Result:
    """One line of the summary: a method's run, its final metrics, and the figure that shows it."""

    method: str
    run: str
    metrics: dict
    figure: str
    detail: str = ""


@dataclass(frozen=True)
class Style:
    """How one run is drawn, in every panel and figure."""

    color: str
    marker: str
    linestyle: str


@dataclass(frozen=True)
class Panel:
    """One panel: `y` against `x` from each run's `log` ("eval", "train", or EI's "rounds")."""

    log: str
    x: str
    y: str
    ylabel: str
    title: str
    audit: bool = False  # a grader-audit share: drawn only when some run's is non-zero
    window: int = 0  # > 0: a running mean over the last `window` GRPO steps, with its 95% band (`running_mean`)


GRPO_PANELS = (
    Panel("eval", "step", "eval/accuracy", ACCURACY, "validation accuracy"),
    Panel("eval", "perf/wall_s", "eval/accuracy", ACCURACY, "validation accuracy vs wall-clock"),
    Panel("train", "step", "train/entropy", ENTROPY, "response entropy"),
    Panel("train", "step", "rollout/response_tokens", "mean response length (tokens)", "response length"),
    Panel("train", "step", "train/grad_norm", "gradient L2 norm, before clipping", "gradient norm"),
    Panel("train", "step", "rollout/reward", "mean reward per rollout response", REWARD_TITLE, window=REWARD_WINDOW),
    Panel("train", "step", "rollout/audit_unconfirmed", AUDIT, "rollouts paid, refused by an auditor", True),
    Panel("train", "step", "rollout/audit_vs_math_verify", AUDIT, "rollouts: our grader vs math-verify", True),
    Panel("eval", "step", "eval/audit_unconfirmed", AUDIT, "validation paid, refused by an auditor", True),
)
EI_PANELS = (
    Panel("rounds", "round", "eval/accuracy", ACCURACY, "validation accuracy"),
    Panel("rounds", "round", "eval/entropy", ENTROPY, "response entropy"),
    Panel("rounds", "round", "rollout/audit_unconfirmed", AUDIT, "rollouts paid, refused by an auditor", True),
    Panel("rounds", "round", "eval/audit_unconfirmed", AUDIT, "validation paid, refused by an auditor", True),
)


def run_styles(keys: Iterable[str]) -> dict[str, Style]:
    """One style per run key ("<family>/<run>": "sft/full", "ei/G4", "grpo/reinforce_baseline"), numbered within
    its family (a figure draws one family's runs): 12 colours with 12 markers, then the next line style."""
    styles, count = {}, Counter()
    for key in dict.fromkeys(keys):
        i = count[key.split("/", 1)[0]]
        count[key.split("/", 1)[0]] += 1
        styles[key] = Style(PALETTE[i % 12], MARKERS[i % 12], LINESTYLES[i // 12 % len(LINESTYLES)])
    return styles


def _family(styles: dict[str, Style] | None, family: str, names: Iterable[str]) -> dict[str, Style]:
    """`names`' styles in `family` (from `styles`, or numbered here when a figure is drawn on its own)."""
    styles = styles or run_styles(f"{family}/{k}" for k in names)
    return {k: styles[f"{family}/{k}"] for k in names}


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _points(rows: list[dict], x: str, y: str) -> list[dict]:
    return [r for r in rows if _is_num(r.get(x)) and _is_num(r.get(y))]


def _subset_rows(pts: list[dict]) -> list[int]:
    """The rows scored on fewer questions than the run's most (the mid-run validation subset)."""
    n = [r.get("count/questions") for r in pts]
    if not all(map(_is_num, n)):
        return []
    return [i for i, q in enumerate(n) if q < max(n)]


def _curve(ax, rows: list[dict], x: str, y: str, style: Style, label: str | None, band: bool = False) -> None:
    """One run's curve (`label` None: a seed replicate's, thin, without markers)."""
    pts = _points(rows, x, y)
    if not pts:
        return
    xs, ys = [r[x] for r in pts], [r[y] for r in pts]
    if label is None:
        ax.plot(xs, ys, color=style.color, ls=style.linestyle, lw=0.8, alpha=0.55, label="_replicate")
        return
    subset = _subset_rows(pts)
    marker = style.marker if len(pts) <= MARKED else ""
    full = [i for i in range(len(pts)) if i not in subset]
    ax.plot(xs, ys, color=style.color, ls=style.linestyle, lw=1.5, marker=marker, ms=5, markevery=full, label=label)
    if subset and marker:
        sub_x, sub_y = [xs[i] for i in subset], [ys[i] for i in subset]
        ax.scatter(sub_x, sub_y, s=26, marker=marker, facecolors="white", edgecolors=style.color, zorder=3)
    lo, hi = [r.get(f"{y}_lo") for r in pts], [r.get(f"{y}_hi") for r in pts]
    if band and all(map(_is_num, lo + hi)):
        ax.fill_between(xs, lo, hi, facecolor=to_rgba(style.color, BAND_ALPHA), edgecolor=style.color, lw=0.6)


def running_mean(rows: list[dict], x: str, y: str, window: int) -> list[dict]:
    """`y` per GRPO step (an off-policy run logs several optimizer steps per rollout batch, each with its batch's
    `y`: its last one stands for it) as a running mean over the last `window` steps, from the first full window on:
    rows of `x`, `y` and the mean's 95% Student's t interval `y_lo`, `y_hi` from the spread of those steps' values
    (a5core.base.stats.t_interval)."""
    per_step: dict = {}
    for r in _points(rows, x, y):
        per_step[r.get("count/grpo_step", r[x])] = r
    steps = list(per_step.values())
    if not steps:
        return []
    full = min(window, len(steps))  # from the first full window on (a run shorter than one: over all its steps)
    out = []
    for i in range(full - 1, len(steps)):
        m, lo, hi = t_interval([p[y] for p in steps[i + 1 - full : i + 1]])
        out.append({x: steps[i][x], y: m, f"{y}_lo": lo, f"{y}_hi": hi})
    return out


def _axes(ax, xlabel: str, ylabel: str, title: str, x: str = "step") -> None:
    """Labels, grid, plain tick labels (no offset) over a sane range; `x`: "step" (a step or round axis: integer
    ticks), "real" (seconds) or "category" (bars)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    lo, hi = ax.get_ylim()
    half = max(hi - lo, 0.02 * max(abs(lo), abs(hi))) / 2  # a flat-ish curve is not magnified into noise
    lo, hi = (lo + hi) / 2 - half, (lo + hi) / 2 + half
    if lo < 0 <= ax.dataLim.y0:  # nothing negative drawn: no negative ticks, a margin to see a curve at 0
        lo = -0.02 * hi
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_formatter(ScalarFormatter(useOffset=False))
    if x != "category":
        ax.xaxis.set_major_formatter(ScalarFormatter(useOffset=False))
    if x == "step":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _share_axis(ax) -> None:
    """A share's axis: from 0."""
    ax.set_ylim(0, max(0.05, ax.get_ylim()[1]))


def _seeds_text(seeds: Iterable[int]) -> str:
    s = sorted(seeds)
    if len(s) == 1:
        return f"seed {s[0]}"
    contiguous = len(s) > 2 and s == list(range(s[0], s[-1] + 1))
    return f"seeds {s[0]}-{s[-1]}" if contiguous else "seeds " + ", ".join(map(str, s))


def _run_entries(styles: dict[str, Style], seeds: dict) -> list:
    """The legend's lines: each run, then its seed replicates (one entry for all of them)."""
    out = []
    for k, s in styles.items():
        out.append(Line2D([], [], color=s.color, ls=s.linestyle, marker=s.marker, ms=5, label=k))
        if seeds.get(k):
            label = f"{k}, {_seeds_text(seeds[k])} (thin)"
            out.append(Line2D([], [], color=s.color, ls=s.linestyle, lw=0.8, alpha=0.7, label=label))
    return out


def _key_entries(eval_rows: Iterable[list[dict]], x: str = "step", bands: bool = True) -> list:
    """The legend's key: markers of whole-set (filled) and mid-run subset (hollow) validations, and bands."""
    full, subset = set(), set()
    for rows in eval_rows:
        pts = _points(rows, x, "eval/accuracy")
        small = _subset_rows(pts)
        for i, r in enumerate(pts):
            (subset if i in small else full).add(r.get("count/questions"))
    grey = "0.35"

    def count(ns: set) -> str:
        ns = sorted(n for n in ns if _is_num(n))
        return f" ({', '.join(map(str, ns))} questions)" if ns else ""

    dot = {"color": grey, "marker": "o", "ls": "none"}
    out = [Line2D([], [], **dot, label=f"validation, whole set{count(full)}")]
    if subset:
        out.append(Line2D([], [], **dot, mfc="white", label=f"validation, mid-run subset{count(subset)}"))
    if bands:
        out.append(Patch(facecolor=to_rgba(grey, 0.2), edgecolor=grey, lw=0.6, label="95% interval"))
    return out


def _legend(fig, entries: list, note: str = "") -> None:
    """One legend for the whole figure, right of its panels; `note` (what was left out) below them."""
    fig.legend(handles=entries, loc="outside right upper", fontsize=8, frameon=False)
    if note:
        fig.supxlabel(note, fontsize=8, color="0.3")


def _save(fig, out: Path, name: str) -> str:
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


Logs = dict[str, list[dict]]  # a run's rows by log kind


def _values(p: Panel, runs: dict[str, Logs], replicas: dict[str, list[Logs]]) -> list[float]:
    every = [logs for k, logs in runs.items() for logs in (logs, *replicas.get(k, ()))]
    return [r[p.y] for logs in every for r in _points(logs.get(p.log, []), p.x, p.y) if math.isfinite(r[p.y])]


def panel_figure(
    out: Path,
    name: str,
    title: str,
    panels: tuple[Panel, ...],
    runs: dict[str, Logs],
    styles: dict[str, Style],
    replicas: dict[str, list[Logs]],
    seeds: dict,
) -> str:
    """`panels` of `runs` (with their seed `replicas`) in one figure; a panel with no data, or an audit panel that
    is zero at every point, is left out and named in the footnote."""
    values = {p: _values(p, runs, replicas) for p in panels}
    shown = [p for p in panels if values[p] and (any(values[p]) or not p.audit)] or list(panels[:1])
    bands = len(runs) <= BANDS_UP_TO
    ncols = len(shown) if len(shown) <= 4 else 3
    nrows = math.ceil(len(shown) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows + 0.8), layout="constrained")
    axes = list(getattr(axes, "flat", [axes]))
    for ax, p in zip(axes, shown):
        for k, logs in runs.items():
            rows = logs.get(p.log, [])
            if p.window:  # each step's own value, faint, under the running mean
                pts = _points(rows, p.x, p.y)
                ax.scatter([r[p.x] for r in pts], [r[p.y] for r in pts], s=6, color=styles[k].color, alpha=0.35)
                rows = running_mean(rows, p.x, p.y, p.window)
            _curve(ax, rows, p.x, p.y, styles[k], k, band=bands and (p.y == "eval/accuracy" or p.window > 0))
            for rep in replicas.get(k, ()):
                rep_rows = rep.get(p.log, [])
                _curve(
                    ax, running_mean(rep_rows, p.x, p.y, p.window) if p.window else rep_rows, p.x, p.y, styles[k], None
                )
        _axes(ax, XLABELS[p.x], p.ylabel, p.title, "real" if p.x == "perf/wall_s" else "step")
        if p.audit:
            _share_axis(ax)
    for ax in axes[len(shown) :]:
        ax.remove()
    fig.suptitle(title)
    keys = _key_entries((logs.get(panels[0].log, []) for logs in runs.values()), panels[0].x, bands)
    note = _left_out_note([p for p in panels if p not in shown], values)
    if not bands:
        note += f" No 95% bands with {len(runs)} runs (they would cover each other): see the ablation figures."
    _legend(fig, _run_entries(styles, seeds) + keys, note.strip())
    return _save(fig, out, name)


def _left_out_note(left_out: list[Panel], values: dict) -> str:
    """The footnote naming the panels left out: audit shares zero at every point, and panels with no data."""
    zero = "; ".join(p.title for p in left_out if values[p])
    empty = "; ".join(p.title for p in left_out if not values[p])
    return (f"Grader audit zero at every point of every run, not drawn: {zero}." if zero else "") + (
        f" No data, not drawn: {empty}." if empty else ""
    )


def baseline_figure(results: Path, out: Path) -> Result:
    base = _metrics(results / "baseline")
    breakdown = json.loads((results / "baseline" / "breakdown.json").read_text())
    fig, ax = plt.subplots(figsize=(5.5, 3.4), layout="constrained")
    cats = {
        "format 1, answer 1": "eval/format1_answer1",
        "format 1, answer 0": "eval/format1_answer0",
        "format 0, answer 0": "eval/format0_answer0",
    }
    bars = ax.bar(list(cats), [breakdown[k] for k in cats.values()], color=PALETTE[0])
    ax.bar_label(bars, fontsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _axes(
        ax, "handout category", "responses (questions x samples)", "zero-shot baseline: format and answer", "category"
    )
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the bar labels
    return Result("zero-shot", "baseline", base, _save(fig, out, "baseline_categories.png"))


def sft_figure(results: Path, out: Path, names: list[str], styles: dict[str, Style] | None = None) -> list[Result]:
    dirs = _run_dirs(str(results / "sft" / "{run}"), names)
    styles = _family(styles, "sft", names)
    finals = {k: _metrics(d) for k, d in dirs.items()}
    logs = {k: read_log(d / "logs" / "eval.csv") for k, d in dirs.items()}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    for k, rows in logs.items():
        _curve(axes[0], rows, "step", "eval/accuracy", styles[k], k, band=True)
    _axes(axes[0], "optimizer step", ACCURACY, "SFT: validation accuracy at every evaluation")
    order = sorted(finals, key=lambda k: (finals[k].get("examples", 0), k))
    acc = [finals[k]["eval/accuracy"] for k in order]
    err = [
        [a - finals[k]["eval/accuracy_lo"] for k, a in zip(order, acc)],
        [finals[k]["eval/accuracy_hi"] - a for k, a in zip(order, acc)],
    ]
    labels = [f"{k}\n({finals[k].get('examples', '?')})" for k in order]
    axes[1].bar(labels, acc, yerr=err, capsize=3, color=[styles[k].color for k in order])
    _axes(axes[1], "run (unique training examples)", ACCURACY, "SFT: final accuracy, whole set (95% CI)", "category")
    axes[1].set_ylim(bottom=0)
    fig.suptitle("Supervised fine-tuning")
    _legend(fig, _run_entries(styles, {}) + _key_entries(logs.values()))
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


def ei_figure(
    ei_last: str, out: Path, names: list[str], seeds: dict | None = None, styles: dict[str, Style] | None = None
) -> list[Result]:
    """The EI panels by round; each run's seed replicates (`seeds`: run -> extra seeds; their last round in
    `<run>/seed_<s>/round_<N>`) as thin lines of its colour."""
    if not names:
        return []
    dirs = _run_dirs(ei_last, names)
    seeds = seeds or {}
    paths = {
        k: [d.parent / f"seed_{s}" / d.name / "logs" / "rounds.csv" for s in seeds.get(k, ())] for k, d in dirs.items()
    }
    missing = [str(path) for ps in paths.values() for path in ps if not path.exists()]
    if missing:
        raise FileNotFoundError(f"plots: no rounds for configured seed replicates: {missing}")
    runs = {k: {"rounds": read_log(d / "logs" / "rounds.csv")} for k, d in dirs.items()}
    replicas = {k: [{"rounds": read_log(p)} for p in ps] for k, ps in paths.items()}
    styles = _family(styles, "ei", names)
    name = panel_figure(out, "ei.png", "Expert Iteration", EI_PANELS, runs, styles, replicas, seeds)
    return [Result("EI", k, _metrics(d), name, f"{int(_metrics(d).get('round', 0))} rounds") for k, d in dirs.items()]


def _grpo_logs(folder: Path, timing: Path | None) -> Logs:
    """A GRPO run's eval and train rows, with their wall-clock fields from `timing` (None: its logs folder)."""
    return {kind: read_rows(folder / "logs", kind, timing) for kind in ("eval", "train")}


def ablation_groups(overrides: dict[str, dict]) -> dict[str, list[str]]:
    """Runs grouped by the set of `grpo` keys they override; the base run(s) (no overrides) join every group."""
    base = [k for k, o in overrides.items() if not o]
    groups: dict[str, list[str]] = {}
    for k, o in overrides.items():
        if o:
            groups.setdefault("+".join(sorted(o)), list(base)).append(k)
    return groups


def grpo_figures(
    results: Path,
    out: Path,
    overrides: dict[str, dict],
    seeds: dict | None = None,
    records: Path | None = None,
    styles: dict[str, Style] | None = None,
) -> list[Result]:
    """The GRPO overview and ablation figures. `records`: the run-record root, whose folder of each run's (and seed
    replicate's) stage holds its timing files (None: they are in its logs folder)."""
    if not overrides:
        return []
    dirs = _run_dirs(str(results / "grpo" / "{run}"), list(overrides))
    seeds, styles = seeds or {}, _family(styles, "grpo", dirs)

    def logs(folder: Path) -> Logs:  # timings in the run record's folder (a5core.base.run_record.record_dir) when given
        return _grpo_logs(folder, record_dir(folder, results, records) if records else None)

    runs = {k: logs(d) for k, d in dirs.items()}
    replicas = {k: [logs(d / f"seed_{s}") for s in seeds.get(k, ())] for k, d in dirs.items()}

    def figure(keys: list[str], name: str, title: str) -> str:
        pick = {k: runs[k] for k in keys}
        return panel_figure(out, name, title, GRPO_PANELS, pick, {k: styles[k] for k in keys}, replicas, seeds)

    name = figure(list(dirs), "grpo.png", "GRPO: every run")
    for keys, group in ablation_groups(overrides).items():
        if 1 < len(group) < len(dirs):
            figure(group, f"grpo_{keys}.png", f"GRPO ablation: {keys.replace('+', ', ')}")
    return [Result("GRPO", k, _metrics(d), name, _grpo_detail(_metrics(d), overrides[k])) for k, d in dirs.items()]


def _grpo_detail(metrics: dict, overrides: dict) -> str:
    """The run's length as its console counted it: GRPO steps, and optimizer steps where there were more of them (an
    off-policy run takes several per rollout batch)."""
    steps, optimizer = int(metrics.get("steps_done", 0)), int(metrics.get("optimizer_steps", 0))
    detail = f"{steps} steps" if optimizer in (0, steps) else f"{steps} GRPO steps, {optimizer} optimizer steps"
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
    records: Path | None = None,
) -> list[Result]:
    """Draw every figure into `out`; returns one Result per configured run (baseline first). `seeds`: family ("ei",
    "grpo") -> replicated run -> its extra seeds, drawn as thin lines beside the run.

    `runs` names the configured SFT and EI runs ({"sft": [...], "ei": [...]}, from params.yaml) and `grpo_overrides`
    the GRPO runs with their overrides, so results left in the workspace by removed runs are not drawn. `ei_last`: the
    results folder of an EI run's last round, with `{run}` for the run's name (its rounds.csv holds every round).
    `records`: the run-record root (`run_records/`), which holds the GRPO stages' timing files (None: the logs folders).
    """
    out.mkdir(parents=True, exist_ok=True)
    sft, ei, seeds = runs.get("sft", []), runs.get("ei", []), seeds or {}
    keys = [f"sft/{k}" for k in sft] + [f"ei/{k}" for k in ei] + [f"grpo/{k}" for k in grpo_overrides]
    styles = run_styles(keys)  # one style per run, in every panel and figure
    return [
        baseline_figure(results, out),
        *sft_figure(results, out, sft, styles),
        *ei_figure(ei_last or str(results / "ei" / "{run}"), out, ei, seeds.get("ei"), styles),
        *grpo_figures(results, out, grpo_overrides, seeds.get("grpo"), records, styles),
    ]
