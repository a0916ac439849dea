"""GRPO under a wall-clock budget on the embedded default: the handout's leaderboard protocol, CPU-sized.

Runs the real stage script (stages/grpo.py) as one named run, with `--set` overrides on params.yaml's `grpo`
section, from an existing policy folder; validation uses `--val-examples` questions x `--samples` samples
each (avg@k), less noisy than the pipeline's one sample per question. Reports the step-0 accuracy (the
initial policy), the best within the budget and when, and writes params, logs and metrics under --out (the
model goes to scratch/, outside git).

    python bench/grpo_budget.py --model models/sft_filtered --budget 900 --out reports/grpo_budget \
        --set learning_rate=2e-5 group_size=8 rollout_batch_size=32 train_batch_size=32 gradient_accumulation_steps=4 eval_every=10
"""
import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import yaml

from a5core.config import load_yaml, read_params


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", default="models/sft_filtered")
    ap.add_argument("--train", default="data/prepared/train.parquet")
    ap.add_argument("--validation", default="data/prepared/validation.parquet")
    ap.add_argument("--budget", type=float, default=900.0, help="training wall-clock seconds")
    ap.add_argument("--val-examples", type=int, default=0, help="validation questions (0 = all)")
    ap.add_argument("--samples", type=int, default=4, help="samples per validation question")
    ap.add_argument("--set", nargs="*", default=[], help="grpo overrides, key=value (YAML values)")
    ap.add_argument("--out", default="reports/grpo_budget")
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    params = read_params(a.params)
    overrides = {k: load_yaml(v) for k, v in (s.split("=", 1) for s in a.set)}
    # every evaluation on the same questions and samples as step 0 and the final one (eval_examples 0 = n_examples)
    params["grpo_runs"] = {"budget": {"n_grpo_steps": 100_000, "eval_examples": 0, **overrides, "time_budget_s": a.budget}}
    params["validation"] = {**params["validation"], "n_examples": a.val_examples, "samples_per_example": a.samples}
    (out / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    scratch = Path("scratch") / "bench_grpo_budget"
    cmd = [sys.executable, "stages/grpo.py", "--params", str(out / "params.yaml"), "--run", "budget", "--model", a.model,
           "--train", a.train, "--validation", a.validation, "--out", str(scratch / "model"), "--metrics", str(out / "metrics.json"),
           "--logs", str(out / "logs"), "--examples", str(out / "examples.parquet"), "--scratch", str(scratch / "state")]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(out / "logs" / "eval.csv") as f:
        evals = list(csv.DictReader(f))
    print("step  wall_s  accuracy  format_rate")
    for r in evals:
        print(f"{int(float(r['step'])):4d} {float(r['wall_s']):7.0f} {float(r['accuracy']):9.3f} {float(r['format_rate']):11.3f}")
    print(json.dumps(json.loads((out / "metrics.json").read_text()), indent=1))


if __name__ == "__main__":
    main()
