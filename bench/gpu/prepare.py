"""What the GPU sequence's steps (bench/gpu/step.sh) build and read, on the GPU machine or on a CPU for the dry run.

    python3 bench/gpu/prepare.py model  --out DIR [--size full|tiny]   # a random-weights Qwen2 folder
    python3 bench/gpu/prepare.py params --out FILE [--size full|tiny]  # the one-step GRPO params
    python3 bench/gpu/prepare.py grpo-summary --timing DIR --metrics FILE --out FILE

- model: Qwen2.5-Math-1.5B's architecture (`full`: a5core.run.plan.KNOWN's, bf16) or a Qwen2-shaped tiny one (`tiny`:
  bench/gpu_check.py's TINY_QWEN2, float32), random weights, with the tokenizer that
  `a5core.model.loading.build_tiny_model` trains from the repository's synthetic math text (its ids fit any
  vocabulary; no hub). Time and memory depend on the shapes, not on the values.
- params: the full profile as composed (tests/fixtures/profiles/full.yaml, kept equal to conf/ by
  tests/test_profiles.py; DVC's Hydra is not needed there) for one GRPO step of the full profile's 256 rollouts
  (32 questions x 8) on the one GPU (`one_gpu`, the engine beside the policy), no evaluation before or during it,
  the final validation on the 16 fixture questions. `tiny` (the CPU dry run) shrinks the sizes and lets the CPU run
  it (`model.device: auto`, float32, vLLM's CPU build).
- grpo-summary: the step's time split (`perf/sync_s`, `perf/rollout_s`, `perf/old_log_probs_s`,
  `perf/optimizer_s`) from the stage's timing file, with its loss and reward.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
COMPOSED_FULL = ROOT / "tests" / "fixtures" / "profiles" / "full.yaml"
QWEN = "hf:Qwen/Qwen2.5-Math-1.5B"
# one step of the full profile, alone on one GPU; `run` names the stage's grpo_runs entry
STEP = {
    "generation": {"layout": "one_gpu", "gpu_memory_utilization": 0.5},
    "grpo": {"n_grpo_steps": 1, "eval_every": 0, "checkpoint_every": 0},
    "validation": {"max_tokens": 256},
}
TINY = {
    "model": {"device": "auto", "dtype": "float32", "weight_update": "nearest", "logits_chunk": 16},
    "grpo": {"rollout_batch_size": 16, "group_size": 4, "train_batch_size": 16, "gradient_accumulation_steps": 2},
    "generation": {"batch_size": 16},
    "validation": {"max_tokens": 16},
}
TIMES = ("perf/sync_s", "perf/rollout_s", "perf/old_log_probs_s", "perf/optimizer_s")


def merge(base: dict, edits: dict) -> dict:
    out = dict(base)
    for section, values in edits.items():
        out[section] = {**base.get(section, {}), **values}
    return out


def model(out: Path, size: str) -> dict:
    import torch

    from a5core.model.loading import build_tiny_model
    from a5core.run.plan import KNOWN
    from bench.gpu_check import build_model, dry_run_arch

    tokenizer = build_tiny_model()[1]
    arch = dict(KNOWN[QWEN]) if size == "full" else dry_run_arch(tokenizer)
    dtype = torch.bfloat16 if size == "full" else torch.float32
    net = build_model(arch, torch.device("cpu")).to(dtype)  # gpu_check's Qwen2 (seed 0, bf16), float32 when tiny
    net.save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in net.parameters())
    return {"model": str(out), "size": size, "parameters": params, "dtype": str(dtype), "vocab": arch["vocab_size"]}


def params(out: Path, size: str) -> dict:
    composed = yaml.safe_load(COMPOSED_FULL.read_text())
    composed = merge(composed, STEP)
    if size == "tiny":
        composed = merge(composed, TINY)
    composed["grpo_runs"] = {"step": {}}
    out.write_text(yaml.safe_dump(composed, sort_keys=False))
    g = composed["grpo"]
    return {"params": str(out), "rollouts": g["rollout_batch_size"], "group_size": g["group_size"]}


def grpo_summary(timing: Path, metrics: Path, out: Path) -> dict:
    rows = list(csv.DictReader((timing / "timing_train.csv").open()))
    first = rows[0]
    summary = {k: round(float(first[k]), 2) for k in TIMES if first.get(k)}
    summary["optimizer_steps"] = len(rows)
    summary["optimizer_s_total"] = round(sum(float(r["perf/optimizer_s"]) for r in rows), 2)
    summary["metrics"] = json.loads(metrics.read_text()) if metrics.exists() else None
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["model", "params", "grpo-summary"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", choices=["full", "tiny"], default="full")
    p.add_argument("--timing", type=Path)
    p.add_argument("--metrics", type=Path)
    args = p.parse_args(argv)
    if args.what == "model":
        done = model(args.out, args.size)
    elif args.what == "params":
        done = params(args.out, args.size)
    else:
        done = grpo_summary(args.timing, args.metrics, args.out)
    print(json.dumps(done))


if __name__ == "__main__":
    main()
