"""The CPU leaderboard: every method's validation accuracy against training seconds since the base model.

- A run's clock (`perf/wall_s`, a5core.base.progress.Clock) counts its training: rollouts, grading, updates;
  validation, model loading and saving are left out. A run that starts from another run's model (EI's and GRPO's
  `init_policy`, e.g. sft_filtered) starts at that run's end, so every curve counts the seconds spent since the base.
- The horizon is the shortest of the methods' longest runs: every method had at least that long. The table gives each
  run's accuracy at fractions of it, its last whole-set validation at or before that time (a run that ended before
  keeps its last), and the figure draws every curve with its 95% band.
- Read from the plots stage's tables (a5core/report/curves.py); `leaderboard_markdown` is the summary's section,
  `draw_leaderboard` reports/figures/leaderboard.png.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from a5core.report.plots import ACCURACY, BAND_ALPHA, LINESTYLES, MARKERS, PALETTE, plt
from a5core.run.history import read_log

FAMILIES = (("sft", "SFT", "step"), ("ei", "EI", "round"), ("grpo", "GRPO", "step"))  # table, method, x column
FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # the table's budgets, as fractions of the horizon
COLORS = {method: PALETTE[i] for i, (_, method, _) in enumerate(FAMILIES)}  # one colour per method


@dataclass(frozen=True)
class Point:
    """One validation of a run: its x (step or round), seconds since the base model, accuracy with its 95% CI."""

    x: int
    wall_s: float
    accuracy: float
    lo: float
    hi: float
    whole: bool  # the whole validation set (the start and the end), not the mid-run subset


@dataclass(frozen=True)
class Entry:
    """One run on the leaderboard."""

    method: str  # SFT, EI or GRPO
    run: str
    start: str  # the model folder it started from (base: the fetched model)
    points: tuple[Point, ...]  # in order; wall_s counted from the base model

    @property
    def end(self) -> float:
        return self.points[-1].wall_s

    def at(self, seconds: float) -> Point | None:
        """Its last whole-set validation at or before `seconds` (None: none yet)."""
        done = [p for p in self.points if p.whole and p.wall_s <= seconds + 1e-9]
        return done[-1] if done else None


def _points(rows: list[dict], x: str, offset: float) -> tuple[Point, ...]:
    """A run's curve rows as points, `offset` seconds after the base model; whole: scored as many questions as its
    largest validation (the whole set; the mid-run subset has fewer)."""
    whole = max(int(r.get("questions") or 0) for r in rows)
    shift = [offset + r["wall_s"] for r in rows]
    return tuple(
        Point(int(r[x]), t, r["accuracy"], r["accuracy_lo"], r["accuracy_hi"], int(r.get("questions") or 0) == whole)
        for r, t in zip(rows, shift)
    )


def _offset(start: str, placed: dict[tuple[str, str], Entry]) -> float | None:
    """Seconds since the base model at which `start` (a model folder under models/) was made; None: by no run here."""
    if start == "base":
        return 0.0
    if start.startswith("sft_") and ("SFT", start[4:]) in placed:
        return placed["SFT", start[4:]].end
    run, _, rnd = start.removeprefix("ei_").partition("/round_")
    if start.startswith("ei_") and ("EI", run) in placed and rnd.isdigit():
        return next((p.wall_s for p in placed["EI", run].points if p.x == int(rnd)), None)
    return None


def entries(curves: Path, starts: dict[str, str]) -> tuple[list[Entry], list[str]]:
    """The configured runs (not their seed replicates) on one clock, from the curve tables in `curves`; `starts`:
    "<family>/<run>" -> its init_policy (SFT runs start from base). Also a line per run left out, and why."""
    placed: dict[tuple[str, str], Entry] = {}
    left_out = []
    for family, method, x in FAMILIES:
        by_run: dict[str, list[dict]] = {}
        for row in read_log(curves / f"{family}_validation.csv"):
            if " (seed " not in str(row["run"]):
                by_run.setdefault(str(row["run"]), []).append(row)
        for run, rows in by_run.items():
            start = starts.get(f"{family}/{run}", "base")
            offset = _offset(start, placed)
            if offset is None or any(not isinstance(r.get("wall_s"), (int, float)) for r in rows):
                why = (
                    f"it starts from models/{start}, which no run on the board made" if offset is None else "no timings"
                )
                left_out.append(f"{method} {run}: {why}")
                continue
            placed[method, run] = Entry(method, run, start, _points(rows, x, offset))
    return list(placed.values()), left_out


def horizon(board: list[Entry]) -> float:
    """The shortest of the methods' longest runs (seconds since the base model); 0 without a run."""
    longest: dict[str, float] = {}
    for e in board:
        longest[e.method] = max(longest.get(e.method, 0.0), e.end)
    return min(longest.values(), default=0.0)


def _cell(p: Point | None, best: float | None) -> str:
    if p is None:
        return "—"
    text = f"{p.accuracy:.3f} ({p.lo:.3f}–{p.hi:.3f})"
    return f"**{text}**" if best is not None and p.accuracy == best else text


def _finding(board: list[Entry], t: float) -> str:
    """Who leads at `t`, and whose intervals overlap the leader's (intervals of separate runs: not paired)."""
    scored = [(e, p) for e in board if (p := e.at(t))]
    if not scored:
        return ""
    lead, top = max(scored, key=lambda ep: ep[1].accuracy)
    close = [f"{e.method} {e.run}" for e, p in scored if e is not lead and p.hi >= top.lo]
    tail = (
        f"its 95% interval overlaps those of {', '.join(close)}: its lead over them is not resolved."
        if close
        else "its 95% interval overlaps no other run's."
    )
    return f"At {t:.0f} s, {lead.method} {lead.run} leads with {top.accuracy:.3f}; {tail}"


def leaderboard_markdown(board: list[Entry], left_out: list[str], figure: str) -> str:
    """The summary's section: the runs' accuracy at fractions of the horizon, the leader, the figure's link."""
    t = horizon(board)
    if not board or t <= 0:  # nothing to rank: say why, when a run was left out
        reasons = "".join(f"\n- {why}" for why in left_out)
        return (
            f"## Accuracy against training time (the CPU leaderboard)\n\nNo run to place:{reasons}\n" if reasons else ""
        )
    budgets = [f * t for f in FRACTIONS]
    best = {b: max((p.accuracy for e in board if (p := e.at(b))), default=None) for b in budgets}
    lines = [
        "## Accuracy against training time (the CPU leaderboard)",
        "",
        "Each run's validation accuracy against its training seconds since the base model: rollouts, grading and "
        "updates, without validation, model loading or saving. EI and GRPO start where the run that made their "
        f"starting model ended. The budgets are fractions of {t:.0f} s, the shortest of the methods' longest runs "
        "(each method ran at least that long); a cell is the run's last whole-set validation at or before the "
        "budget, with its 95% interval (— : its starting model was still training); the best at each budget is in "
        f"bold. Figure: [leaderboard.png]({figure}/leaderboard.png).",
        "",
        "| method | run | starts from | " + " | ".join(f"{b:.0f} s" for b in budgets) + " | its end |",
        "|---|---|---|" + "---|" * (len(budgets) + 1),
    ]
    for e in board:
        cells = " | ".join(_cell(e.at(b), best[b]) for b in budgets)
        last = e.points[-1]
        lines.append(f"| {e.method} | {e.run} | {e.start} | {cells} | {last.accuracy:.3f} at {last.wall_s:.0f} s |")
    lines += ["", _finding(board, t)]
    lines += [f"Left out: {why}." for why in left_out]
    return "\n".join(lines) + "\n"


def draw_leaderboard(board: list[Entry], path: Path) -> Path | None:
    """Every run's accuracy against seconds since the base model, one colour per method, the 95% band of its
    whole-set validations, a dotted line at the horizon; None (nothing drawn) without a run."""
    if not board:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    count: dict[str, int] = {}
    for e in board:
        i = count[e.method] = count.get(e.method, -1) + 1
        color, marker = COLORS[e.method], MARKERS[i % len(MARKERS)]
        xs, ys = [p.wall_s for p in e.points], [p.accuracy for p in e.points]
        ax.plot(xs, ys, color=color, linestyle=LINESTYLES[i % len(LINESTYLES)], label=f"{e.method} {e.run}")
        for p in e.points:
            ax.plot(p.wall_s, p.accuracy, marker, color=color, markerfacecolor=color if p.whole else "white")
        whole = [p for p in e.points if p.whole]
        ax.fill_between(
            [p.wall_s for p in whole], [p.lo for p in whole], [p.hi for p in whole], color=color, alpha=BAND_ALPHA
        )
    ax.axvline(horizon(board), color="grey", linestyle=":", label="horizon (shortest method's longest run)")
    if any(not p.whole for e in board for p in e.points):
        ax.plot([], [], "o", color="grey", markerfacecolor="white", label="mid-run subset (filled: whole set)")
    ax.set_xlabel("training seconds since the base model (validation left out)")
    ax.set_ylabel(ACCURACY)
    ax.set_title("Validation accuracy against training time, 95% bands")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
