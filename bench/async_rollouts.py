"""Asynchronous rollouts on this machine: the default profile's GRPO run (`grpo@reinforce_baseline` from
models/sft_filtered, 16 rollouts of up to 64 tokens a step) with `grpo.max_staleness` 0 and then 1, back to back, the
same number of steps, both with `tis_cap: 2` (which staleness 1 requires) and no mid-run validation:

    .venv/bin/python bench/async_rollouts.py [--steps 8] [--out reports/async_rollouts.json]

Reports per run: seconds per step (the loop's wall clock over the N steps, `perf/wall_s` of the last train row, over
N), the share of that time in which generation and training both ran (the sum of `perf/overlap_s`), the mean wait for
rollouts, generation and update per step, and the final full validation's accuracy with its 95% interval. Needs the
default DAG's outputs (models/sft_filtered, data/prepared/; `dvc repro` or `dvc pull`); writes nothing there (outputs
in a temporary folder).
May import: the standard library and yaml (bench imports no test).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN = "reinforce_baseline"


def stage(tmp: Path, staleness: int, steps: int) -> dict:
    """One GRPO stage process with the repo's params but `staleness` and `steps`; its timings and final metrics."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["grpo"].update(n_grpo_steps=steps, eval_every=0, checkpoint_every=0, tis_cap=2.0, max_staleness=staleness)
    out = tmp / f"staleness{staleness}"
    out.mkdir()
    (out / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    flags = {
        "--run": RUN,
        "--model": "models/sft_filtered",
        "--train": "data/prepared/train.parquet",
        "--validation": "data/prepared/validation.parquet",
        "--out": out / "model",
        "--metrics": out / "metrics.json",
        "--live": out / "live",
        "--logs": out / "logs",
        "--scratch": out / "scratch",
        "--record": out / "record",
        "--params": out / "params.yaml",
    }
    argv = [sys.executable, "-m", "a5core.stage.launch", "stages/grpo.py"]
    argv += [str(x) for kv in flags.items() for x in kv]
    t0 = time.monotonic()
    env = {**os.environ, "A5_NO_PIPELINE_LINE": "1"}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"staleness {staleness}: the stage failed:\n{proc.stderr[-3000:]}")
    seconds = time.monotonic() - t0
    timing = list(csv.DictReader((out / "record" / "timing_train.csv").open()))
    train = list(csv.DictReader((out / "logs" / "train.csv").open()))
    train_s = float(timing[-1]["perf/wall_s"])  # the loop's clock: from the first step's start to the last's end

    def per_step(key: str) -> float:
        return round(sum(float(r.get(key) or 0) for r in timing) / len(timing), 2)

    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "max_staleness": staleness,
        "steps": len(timing),
        "stage_s": round(seconds, 1),
        "train_s": round(train_s, 1),
        "s_per_step": round(train_s / len(timing), 2),
        "rollout_wait_s_per_step": per_step("perf/rollout_s"),
        "generate_s_per_step": per_step("perf/generate_s"),
        "optimizer_s_per_step": per_step("perf/optimizer_s"),
        "overlap_share": round(sum(float(r.get("perf/overlap_s") or 0) for r in timing) / train_s, 3),
        "staleness_per_step": [int(float(r.get("rollout/staleness") or 0)) for r in train],
        "reward_per_step": [round(float(r["rollout/reward"]), 4) for r in train],
        "accuracy": metrics["eval/accuracy"],
        "accuracy_95": [metrics["eval/accuracy_lo"], metrics["eval/accuracy_hi"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default="reports/async_rollouts.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="a5_async_") as tmp:
        runs = [stage(Path(tmp), s, args.steps) for s in (0, 1)]
    sync, overlapped = runs
    report = {
        "command": f"python bench/async_rollouts.py --steps {args.steps}",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
        "runs": runs,
        "step_time_ratio_1_over_0": round(overlapped["s_per_step"] / sync["s_per_step"], 3),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
