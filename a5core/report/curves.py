"""The tables `dvc plots` draws (dvc.yaml's top-level `plots:`): every run's curves in a few long CSVs.

One row per run and evaluation (or optimizer step), with a `run` column, so DVC draws one figure per quantity with
every run and every revision overlaid (`dvc plots diff <exp>`: which learning rate did better, on one page); the
templates in .dvc/plots/ colour by revision and run and draw the 95% band. The plots stage writes them:
- grpo_validation.csv: run, step, accuracy, accuracy_lo, accuracy_hi, questions, wall_s (every evaluation;
  questions: how many it scored, the whole set or the mid-run subset; wall_s: the run's clock, seconds of training
  so far with validation left out, from its run record's timings)
- grpo_train.csv: run, step, reward, loss (every optimizer step)
- sft_validation.csv: run, step, accuracy, accuracy_lo, accuracy_hi, questions, wall_s
- ei_validation.csv: run, round, accuracy, accuracy_lo, accuracy_hi, questions, wall_s (round 0: the starting
  policy; wall_s: the rounds' clocks summed)
A seed replicate is its own run, `<run> (seed <s>)`. Each run's whole logs stay in its results folder.
"""

from __future__ import annotations

from pathlib import Path

from a5core.base.run_record import record_dir
from a5core.run.history import read_log, read_rows, write_csv

ACCURACY = {"eval/accuracy": "accuracy", "eval/accuracy_lo": "accuracy_lo", "eval/accuracy_hi": "accuracy_hi"}
VALIDATION = {**ACCURACY, "count/questions": "questions", "perf/wall_s": "wall_s"}


def _rows(label: str, rows: list[dict], x: str, columns: dict[str, str]) -> list[dict]:
    """`rows` (history rows) as curve rows: run, x, then `columns` renamed; rows without a value are left out."""
    out = []
    for r in rows:
        values = {new: r[old] for old, new in columns.items() if isinstance(r.get(old), (int, float))}
        if values and x in r:
            out.append({"run": label, x: r[x], **values})
    return out


def _runs(results: Path, family: str, names: list[str], seeds: dict[str, tuple[int, ...]]) -> dict[str, Path]:
    """Label -> results folder of every configured run of `family` and its seed replicates."""
    dirs = {name: results / family / name for name in names}
    for name in names:
        dirs |= {f"{name} (seed {s})": results / family / name / f"seed_{s}" for s in seeds.get(name, ())}
    return dirs


def ei_clock(run_dir: Path, results: Path, records: Path, rounds: int) -> list[float]:
    """Seconds on an EI run's clock after each round (index 0: its start): the rounds' own clocks (each round's last
    timed validation, in its run record) summed, up to the first round without one."""
    walls = [0.0]
    for k in range(1, rounds + 1):
        d = run_dir / f"round_{k}"
        timed = [r.get("perf/wall_s") for r in read_rows(d / "logs", "eval", record_dir(d, results, records))]
        if not timed or not isinstance(timed[-1], (int, float)):
            break
        walls.append(walls[-1] + timed[-1])
    return walls


def _ei_rows(results: Path, records: Path, run_dir: Path, rounds: int) -> list[dict]:
    """An EI run's history (its last round's rounds.csv), each round with its time on the run's clock."""
    walls = ei_clock(run_dir, results, records, rounds)
    rows = read_log(run_dir / f"round_{rounds}" / "logs" / "rounds.csv")
    return [{**r, "perf/wall_s": walls[int(r["round"])]} if int(r["round"]) < len(walls) else r for r in rows]


def write_curves(
    results: Path,
    records: Path,
    out: Path,
    runs: dict[str, list[str]],
    ei_rounds: int,
    seeds: dict[str, dict[str, tuple[int, ...]]] | None = None,
) -> list[Path]:
    """Write the four tables into `out` from every configured run (`runs`: family -> run names; `seeds`: family ->
    run -> extra seeds); returns their paths."""
    seeds = seeds or {}
    dirs = {f: _runs(results, f, runs.get(f, []), seeds.get(f, {})) for f in ("sft", "ei", "grpo")}
    timed = {
        f: {k: read_rows(d / "logs", "eval", record_dir(d, results, records)) for k, d in dirs[f].items()}
        for f in ("sft", "grpo")
    }
    tables = {
        "grpo_validation.csv": [row for k, rows in timed["grpo"].items() for row in _rows(k, rows, "step", VALIDATION)],
        "grpo_train.csv": [
            row
            for k, d in dirs["grpo"].items()
            for row in _rows(
                k, read_log(d / "logs" / "train.csv"), "step", {"rollout/reward": "reward", "train/loss": "loss"}
            )
        ],
        "sft_validation.csv": [row for k, rows in timed["sft"].items() for row in _rows(k, rows, "step", VALIDATION)],
        "ei_validation.csv": [
            row
            for k, d in dirs["ei"].items()
            for row in _rows(k, _ei_rows(results, records, d, ei_rounds), "round", VALIDATION)
        ],
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        if rows:
            write_csv(rows, out / name)
        else:  # a family with no runs: the header alone, so that `dvc plots` finds the file
            (out / name).write_text(",".join(["run", "round" if name.startswith("ei") else "step"]) + "\n")
    return [out / name for name in tables]
