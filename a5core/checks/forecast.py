"""How long the configured DAG will take, before running it: `python -m a5core.checks.forecast [--params P]`.

- Each stage's forecast is a measured time scaled by its work: the stage's own last run (`duration_s` of its
  `run_record.json`) times work(current params) / work(the params dvc.lock says it ran with). A stage that never ran
  (a new run) takes the median seconds-per-work of the stages of its family that did; one with no such record is
  "no rate" and left out of the total, which says so.
- Work is a proxy, one number per family (WORK): the tokens a stage samples or trains on at most (questions x samples
  x max_tokens, rollouts x epochs; an SFT example weighs as one validation sample), so a change of size params scales
  the time; what it leaves out (fixed overheads, responses shorter than max_tokens) is why it is checked against what
  the stages took (reports/forecast.md).
- A rate measured on another machine kind (`a5core.base.run_record.machine_kind`) is used, and marked, not hidden; once
  some family has run on this machine kind too, its rates here over its rates elsewhere (the median over such families)
  scale every other-kind rate (`kind_factor`): one stage run here calibrates the rest.
- The records: each stage's `run_records/<family>/<run>/run_record.json` (a DVC output of the stage), and for what is
  not there (a fresh clone) the copy the plots stage commits, reports/run_records.json.
- The stages are those of the current folder's dvc.yaml and dvc.lock: forecast another profile from a checkout where
  it is applied, with `--records` naming where the records are (`cd .study && python -m a5core.checks.forecast --records
  ../run_records` forecasts the CPU study from the default DAG's records, reports/cpu_study/README.md).
- With `grpo.time_budget_s`, the steps the budget buys: the budget over the forecast seconds per GRPO step.
- `--line <stage>`: the one line a stage prints about the whole `dvc repro` as it starts (a5core/stage/entry.py).
- Writes `reports/forecast.json`; after the run, `python -m a5core.checks.forecast --compare` puts it beside what the
  same stages took (their run records). Not in reports/summary.md: the summary is a stage output that a forced rerun
  must write byte for byte, and durations differ on every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from a5core.base.artifacts import write_json
from a5core.base.run_record import RECORD_FILE, machine, machine_kind, read_run_record
from a5core.config.sections import read_params, with_run


def _validation(params: dict, section: str = "validation") -> float:
    """Tokens one whole validation samples at most under `section`'s settings (validation, or eval)."""
    v = params.get(section) or {}
    return (params.get("data") or {}).get("n_validation", 0) * v.get("samples_per_example", 1) * v.get("max_tokens", 0)


def _baseline(params: dict, run: str) -> float:
    return _validation(params, "eval")


def _sft(params: dict, run: str) -> float:
    s, entry = params.get("sft") or {}, (params.get("sft_runs") or {}).get(run) or {}
    examples = entry.get("examples") or (params.get("data") or {}).get("n_sft", 0)  # 0: all (the synthetic count)
    tokens = (params.get("validation") or {}).get("max_tokens", 0)  # an example weighs as one validation sample
    return s.get("epochs", 1) * examples * tokens + _validation(params)


def _ei(params: dict, run: str) -> float:
    e = with_run(params, "ei", "ei_runs", run)
    rollouts = e.get("n_questions", 0) * e.get("rollouts_per_question", 1) * e.get("max_tokens", 0)
    return rollouts * (1 + e.get("sft_epochs", 1)) + _validation(params)


def _grpo(params: dict, run: str) -> float:
    g = with_run(params, "grpo", "grpo_runs", run)
    per_step = g.get("rollout_batch_size", 0) * g.get("max_tokens", 0) * (1 + g.get("epochs_per_rollout_batch", 1))
    return g.get("n_grpo_steps", 0) * per_step + _validation(params)


# family -> work(params, run name): the proxy a stage's time is scaled by (module docstring)
WORK = {"baseline_eval": _baseline, "sft": _sft, "ei_round": _ei, "grpo": _grpo}


def family(stage: str) -> tuple[str, str]:
    """("grpo", "lr_1e-5") for "grpo@lr_1e-5" and for its seed replicate "grpo_replicate@lr_1e-5-2" (sft alike),
    ("ei_round", "G4") for "ei_round_3@G4" and for "ei_replicate_3@G4-1", (stage, "") otherwise."""
    name, _, run = stage.partition("@")
    if "_replicate" in name:  # the run's work: a replicate differs from it only in its seed
        run = run.rpartition("-")[0]
    if name.startswith(("ei_round_", "ei_replicate_")):
        return "ei_round", run
    return name.removesuffix("_replicate"), run


def read_lock(path: str | Path = "dvc.lock") -> dict:
    """dvc.lock as DVC reads it ({} when there is none): YAML 1.2 through ruamel, so a value DVC wrote as `off` stays
    the string params.yaml has (PyYAML's YAML 1.1 reads it as False, and every stage would look changed)."""
    from ruamel.yaml import YAML

    path = Path(path)
    return (YAML(typ="safe", pure=True).load(path.read_text()) or {}) if path.is_file() else {}


COLLECTED = Path("reports/run_records.json")  # the plots stage's copy of the DAG's records, committed


def records(where: Path, collected: Path = COLLECTED) -> dict[str, dict]:
    """{stage: its run record}: `collected` (the committed copy, what a fresh clone has), then every record under
    the folder `where` (the stages' run-record folders, `run_records/`), which wins for a stage in both."""
    found = {r["stage"]: r for r in json.loads(collected.read_text())} if collected.is_file() else {}
    return found | {(r := read_run_record(path))["stage"]: r for path in sorted(where.rglob(RECORD_FILE))}


def locked_params(lock: dict, stage: str, params: dict) -> dict:
    """The params a stage last ran with: dvc.lock's values of the params it lists (`grpo_runs.x`, `model.dtype` under
    dotted keys) over `params` (a section it does not list, e.g. `data`, reruns it only through its files)."""
    flat = ((lock.get("stages") or {}).get(stage) or {}).get("params", {}).get("params.yaml", {})
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in params.items()}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if rest:
            out[head] = {**(out.get(head) or {}), rest: value}
        else:
            out[head] = value
    return out


def _rates(params: dict, lock: dict, recorded: dict[str, dict], here: str) -> dict[tuple[str, bool], list[float]]:
    """Seconds per unit of work of every recorded stage, by (family, measured on this machine kind)."""
    rates: dict[tuple[str, bool], list[float]] = {}
    for stage, record in recorded.items():
        fam, run = family(stage)
        work = WORK[fam](locked_params(lock, stage, params), run) if fam in WORK else 0.0
        if work:
            rates.setdefault((fam, machine_kind(record.get("machine", {})) == here), []).append(
                record["duration_s"] / work
            )
    return rates


def kind_factor(rates: dict[tuple[str, bool], list[float]]) -> tuple[float, int] | None:
    """(this machine kind's speed over the other kinds', as a time ratio; how many families it rests on): the median
    over the families measured on both of median rate here / median rate elsewhere; None when no family was."""
    both = [f for f, here in rates if here and (f, False) in rates]
    if not both:
        return None
    ratios = [statistics.median(rates[(f, True)]) / statistics.median(rates[(f, False)]) for f in both]
    return statistics.median(ratios), len(both)


def forecast(stages: list[str], params: dict, lock: dict, recorded: dict[str, dict], here: str) -> list[dict]:
    """One row per stage: {"stage", "seconds" (None: no rate), "source"} (module docstring)."""
    rates = _rates(params, lock, recorded, here)
    factor = kind_factor(rates)
    speed = factor[0] if factor else 1.0
    rows = []
    for stage in stages:
        fam, run = family(stage)
        record = recorded.get(stage)
        other = record is not None and machine_kind(record.get("machine", {})) != here
        mine = rates.get((fam, True)) or [r * speed for r in rates.get((fam, False), [])]  # this kind's, or scaled
        scaled = False  # by this machine kind's speed (fixed-cost stages, without work, are not)
        if fam not in WORK:
            seconds, source = (record["duration_s"], "its last run") if record else (None, "no record")
        elif record and (old := WORK[fam](locked_params(lock, stage, params), run)):
            scaled = other and factor is not None
            seconds = record["duration_s"] * WORK[fam](params, run) / old * (speed if scaled else 1.0)
            source = "its last run, scaled by work"
        elif mine:
            other = not rates.get((fam, True))
            scaled = other and factor is not None
            seconds, source = (
                statistics.median(mine) * WORK[fam](params, run),
                f"median rate of {len(mine)} {fam} stage(s)",
            )
        else:
            seconds, source = None, "no rate: run one stage of this family first"
        if other:
            calibrated = f", x{speed:.2f}: this kind's speed from {factor[1]} families" if scaled else ""
            source += f" (another machine kind{calibrated})"
        rows.append({"stage": stage, "seconds": seconds, "source": source})
    return rows


def budget_steps(rows: list[dict], params: dict) -> dict[str, float]:
    """{grpo stage: GRPO steps its wall-clock budget buys at the forecast seconds per step} when a budget is set."""
    out = {}
    for row in rows:
        fam, run = family(row["stage"])
        g = with_run(params, "grpo", "grpo_runs", run) if fam == "grpo" else {}
        if g.get("time_budget_s") and row["seconds"]:
            out[row["stage"]] = min(g["n_grpo_steps"], g["time_budget_s"] / (row["seconds"] / g["n_grpo_steps"]))
    return out


def forecast_vs_actual(saved: dict, recorded: list[dict]) -> str:
    """One line: the saved forecast's total beside what those stages' last runs took (their run records); a record
    that finished before the forecast was made is not a run it forecast (a clone's committed records, a stage that
    did not rerun), so it is left out."""
    made = datetime.fromisoformat(saved["made_utc"])
    took = {
        r["stage"]: r["duration_s"]
        for r in recorded
        if "duration_s" in r and datetime.fromisoformat(r.get("finished_utc", saved["made_utc"])) > made
    }
    both = [s for s, seconds in saved["stages"].items() if seconds is not None and s in took]
    if not both:
        return ""
    planned, actual = sum(saved["stages"][s] for s in both) / 60, sum(took[s] for s in both) / 60
    return (
        f"Forecast ({saved['made_utc']}, `python -m a5core.checks.forecast`, {saved['machine']}): "
        f"{planned:.1f} min for {len(both)} stages; their last runs took {actual:.1f} min "
        f"({actual / planned:.2f} x the forecast)."
    )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _changed(stage: str, params: dict, lock: dict) -> bool:
    """Whether `stage`'s params differ from those dvc.lock records for it (or it never ran)."""
    entry = (lock.get("stages") or {}).get(stage)
    if entry is None:
        return True
    for key, value in ((entry.get("params") or {}).get("params.yaml") or {}).items():
        node = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            return True
    return False


def pipeline_line(stage: str, started: float | None) -> str:
    """One line for the stage DVC is starting: its place in dvc.yaml's order, the time since the `dvc` process began,
    and the forecast minutes for it and for the stages after it that this run will reach (those downstream of it,
    and those whose params differ from dvc.lock's; a stage whose input files changed otherwise is not foreseen).
    `started`: when the dvc process began (epoch seconds; a5core.stage.entry finds it), or None."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo() as repo:
        order = [s.addressing for s in repo.index.stages]
        by_name = {s.addressing: s for s in repo.index.stages}
        downstream = {s.addressing for s in nx.ancestors(repo.index.graph, by_name[stage])}
    lock = read_lock()
    params = read_params("params.yaml")
    k = order.index(stage) + 1
    rest = [s for s in order[k:] if s in downstream or _changed(s, params, lock)]
    rows = {
        r["stage"]: r["seconds"]
        for r in forecast([stage, *rest], params, lock, records(Path("run_records")), machine_kind(machine()))
    }
    parts = [f"[dvc repro] stage {k} of {len(order)}: {stage}"]
    parts.append(f"{_clock(time.time() - started)} since dvc started" if started else "not run by dvc")
    mine = f"this stage {rows[stage] / 60:.1f} min" if rows.get(stage) is not None else "this stage: no record yet"
    known = [rows[s] for s in rest if rows.get(s) is not None]
    after = (
        f"{len(rest)} more stage(s) "
        + (f"{sum(known) / 60:.1f} min" if known else "with no record yet")
        + (f" ({len(rest) - len(known)} with no record yet)" if known and len(known) < len(rest) else "")
    )
    parts.append(f"forecast: {mine}, {after}" if rest else f"forecast: {mine}, the last stage to run")
    return " | ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--records", default="run_records", help="where the stages' run-record folders are")
    parser.add_argument("--out", default="reports/forecast.json", help="where the forecast is saved")
    parser.add_argument("--compare", action="store_true", help="compare the saved forecast with the run records")
    parser.add_argument("--line", metavar="STAGE", help="one line on the pipeline as STAGE starts (a5core.stage.entry)")
    parser.add_argument("--dvc_started", type=float, help="with --line: when the dvc process began (epoch seconds)")
    args = parser.parse_args()
    if args.line:
        try:
            print(pipeline_line(args.line, args.dvc_started), flush=True)
        except Exception as err:  # a line about the pipeline must never disturb the stage beside it
            print(f"[dvc repro] {args.line}: no pipeline line ({type(err).__name__}: {err})", flush=True)
        return
    if args.compare:
        saved = json.loads(Path(args.out).read_text())
        print(forecast_vs_actual(saved, list(records(Path(args.records)).values())) or "no stage of it has run")
        return
    from dvc.repo import Repo

    with Repo() as repo:
        stages = [s.addressing for s in repo.index.stages]
    lock = read_lock()
    params, here = read_params(args.params), machine_kind(machine())
    rows = forecast(stages, params, lock, records(Path(args.records)), here)
    width = max(len(r["stage"]) for r in rows) + 1  # replicate stages' names run long
    for row in rows:
        time = f"{row['seconds'] / 60:7.1f} min" if row["seconds"] is not None else "      —    "
        print(f"{row['stage']:{width}} {time}  {row['source']}")
    known = [r["seconds"] for r in rows if r["seconds"] is not None]
    print(f"{'total':{width}} {sum(known) / 60:7.1f} min  ({len(known)} of {len(rows)} stages forecast)")
    for stage, steps in budget_steps(rows, params).items():
        print(f"{stage}: grpo.time_budget_s buys about {steps:.0f} GRPO steps")
    made = {"made_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": here}
    write_json({**made, "stages": {r["stage"]: r["seconds"] for r in rows}}, args.out)
    print(
        f"wrote {args.out}; after the run, `python -m a5core.checks.forecast --compare` compares it with the run "
        "records"
    )


if __name__ == "__main__":
    main()
