"""Stage plots: figures for every configured run, reports/summary.md (with the seed replicates' intervals),
the tables `dvc plots` draws (reports/curves/) and the run records of the DAG's stages in one file
(reports/run_records.json: what the summary's "Made on" line and a fresh clone's `python -m a5core.checks.forecast`
read)."""

import json
import os
import re
from pathlib import Path

from a5core.base.artifacts import write_json, write_text
from a5core.base.run_record import RECORD_FILE, read_run_record
from a5core.config.sections import DataConfig, ReplicatesConfig, read_params, section_of
from a5core.report.curves import write_curves
from a5core.report.leaderboard import draw_leaderboard, entries, leaderboard_markdown
from a5core.report.plots import make_plots
from a5core.report.replicates import hierarchical_interval, replicate_scores
from a5core.report.summary import example_rollouts_text, summary_markdown, validation_set
from a5core.stage import entry


def dag_stages(runs: dict, grpo: dict, rounds: int, reps: ReplicatesConfig) -> set[str]:
    """The stage names of the configured DAG: the summary's "Made on" line counts only their run records."""
    ei = {f"ei_round_{k}@{r}" for r in runs["ei"] for k in range(1, rounds + 1)}
    return {"fetch_model", "prepare_math", "baseline_eval", "filter_sft_data", *ei, *reps.stages(rounds)} | {
        f"{family}@{r}" for family, names in (("sft", runs["sft"]), ("grpo", grpo)) for r in names
    }


def starts(params: dict, ei: list[str], grpo: dict[str, dict]) -> dict[str, str]:
    """Each EI and GRPO run's starting model folder: its section's `init_policy` (check_params refuses one per run)."""
    return {
        f"{family}/{r}": params[family]["init_policy"] for family, names in (("ei", ei), ("grpo", grpo)) for r in names
    }


def grpo_examples(results: Path, grpo: list[str]) -> list[str]:
    """The first configured GRPO run's rollouts of one validation question, before and after (none: no GRPO run)."""
    table = results / "grpo" / grpo[0] / "logs" / "completions.jsonl" if grpo else None
    if table is None or not table.exists():
        return []
    return example_rollouts_text(grpo[0], [json.loads(line) for line in table.read_text().splitlines() if line])


def main() -> None:
    args = entry.args("results", "ei", "records", "figures", "summary", "curves", "made_by")
    params = read_params(args.params)
    runs = {family: list(params.get(f"{family}_runs") or {}) for family in ("sft", "ei")}
    grpo = {name: overrides or {} for name, overrides in (params.get("grpo_runs") or {}).items()}
    reps = section_of(params, ReplicatesConfig, "replicates", args.params)
    seeds = {family: {run: reps.seeds for run in reps.runs(family)} for family in ("sft", "ei", "grpo")}
    results = make_plots(
        Path(args.results), Path(args.figures), runs, grpo, ei_last=args.ei, seeds=seeds, records=Path(args.records)
    )
    rounds = int(re.search(r"round_(\d+)", args.ei).group(1))  # EI's last round (`--ei results/ei/{run}/round_N`)
    write_curves(Path(args.results), Path(args.records), Path(args.curves), {**runs, "grpo": list(grpo)}, rounds, seeds)
    scores = replicate_scores(Path(args.results), reps, rounds)
    replicates = {key: hierarchical_interval(s) for key, s in scores.items()}
    dag = dag_stages(runs, grpo, rounds, reps)
    records = [r for p in sorted(Path(args.records).rglob(RECORD_FILE)) if (r := read_run_record(p))["stage"] in dag]
    write_json(sorted(records, key=lambda r: r["stage"]), args.made_by)
    figures_rel = os.path.relpath(args.figures, Path(args.summary).parent)
    questions = validation_set(section_of(params, DataConfig, "data", args.params))
    examples = grpo_examples(Path(args.results), list(grpo))
    summary = summary_markdown(
        results, figures_rel, records=records, validation_set=questions, replicates=replicates, examples=examples
    )
    board, left_out = entries(Path(args.curves), starts(params, runs["ei"], grpo))
    draw_leaderboard(board, Path(args.figures) / "leaderboard.png")
    write_text(summary + "\n" + leaderboard_markdown(board, left_out, figures_rel), args.summary)
    print(f"{len(results)} rows in {args.summary}")


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
