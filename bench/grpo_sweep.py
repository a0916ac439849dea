"""A sweep of GRPO run shapes on this CPU, from the default profile's starting policy: which shape learns.

    python bench/grpo_sweep.py --out .sweep [--only NAME ...]        # after `dvc repro sft@filtered`

Each shape is the default profile's `grpo` section with a few fields changed (SHAPES), run through the real stage
(`stages/grpo.py`, one process each, niced by the caller) from `models/sft_filtered` on the default data, validated at
the default protocol (64 questions x 2 samples, the paired change from the start with its bootstrap interval). The
results go to `<out>/sweep.json` after each run (a rerun skips the shapes already there) and are printed as the table
of reports/grpo_sweep.md. Rollouts per run = n_grpo_steps x rollout_batch_size.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ON_POLICY = {"train_batch_size": None, "gradient_accumulation_steps": 2, "eval_every": 0, "checkpoint_every": 0}
# name -> the grpo fields it changes (train_batch_size None: the rollout batch, on-policy)
SHAPES = {
    "today": {"n_grpo_steps": 3},
    "steps30": {"n_grpo_steps": 30},
    "steps30_lr5e-5": {"n_grpo_steps": 30, "lr": 5e-5},
    "g8_steps15_lr5e-5": {"n_grpo_steps": 15, "group_size": 8, "rollout_batch_size": 32, "lr": 5e-5},
    "g8_steps15_lr1e-4": {"n_grpo_steps": 15, "group_size": 8, "rollout_batch_size": 32, "lr": 1e-4},
    "g8_steps30_lr2e-5": {"n_grpo_steps": 30, "group_size": 8, "rollout_batch_size": 32, "lr": 2e-5},
    "clip_g8_steps15_lr5e-5": {
        "n_grpo_steps": 15,
        "group_size": 8,
        "rollout_batch_size": 32,
        "lr": 5e-5,
        "loss_type": "grpo_clip",
        "train_batch_size": 16,
        "gradient_accumulation_steps": 1,
    },
    "steps30_bf16_update": {"n_grpo_steps": 30},
    "steps30_bf16_tis2": {"n_grpo_steps": 30, "tis_cap": 2.0},
}
# name -> fields of other sections it changes: bf16 autocast in the update (roofline.md: 1.41x a training micro-batch
# here), float32 generation (autocast slowed the hf backend's decoding: it recast the weights at every step)
# steps30_bf16_tis2: bf16 throughout, rollouts from the bf16 copy, each token weighted by its truncated ratio to the
# trainer's policy (tis_cap: Yao et al., 2025), the correction for the gap that cost GRPO its gain without it
OTHER_SECTIONS = {
    "steps30_bf16_update": {"model": {"autocast": "bf16"}, "generation": {"dtype": "float32"}},
    "steps30_bf16_tis2": {"model": {"autocast": "bf16"}, "generation": {"dtype": "bfloat16"}},
}


def shape_params(base: dict, name: str) -> dict:
    grpo = {**base["grpo"], **ON_POLICY, **SHAPES[name]}
    if grpo["train_batch_size"] is None:
        grpo["train_batch_size"] = grpo["rollout_batch_size"]
    other = {k: {**base[k], **v} for k, v in OTHER_SECTIONS.get(name, {}).items()}
    return {**base, **other, "grpo": grpo, "grpo_runs": {name: {}}}


def other_changes(name: str) -> dict:
    """The shape's changes outside `grpo`, as "section.field": value."""
    return {f"{k}.{f}": v for k, fields in OTHER_SECTIONS.get(name, {}).items() for f, v in fields.items()}


def run_shape(base: dict, name: str, out: Path) -> dict:
    """One shape through the real stage; its final validation, paired change and time."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    params = folder / "params.yaml"
    params.write_text(yaml.safe_dump(shape_params(base, name), sort_keys=False))
    cmd = [sys.executable, str(ROOT / "stages" / "grpo.py"), "--params", str(params), "--run", name]
    cmd += ["--model", str(ROOT / "models" / "sft_filtered"), "--train", str(ROOT / "data/prepared/train.parquet")]
    cmd += ["--validation", str(ROOT / "data/prepared/validation.parquet"), "--out", str(folder / "model")]
    cmd += ["--metrics", str(folder / "metrics.json"), "--live", str(folder / "live"), "--logs", str(folder / "logs")]
    cmd += ["--scratch", str(folder / "scratch"), "--record", str(folder / "record")]
    t0 = time.monotonic()
    with (folder / "stage.log").open("w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.monotonic() - t0
    if rc:
        return {"name": name, "rc": rc, "seconds": round(seconds, 1)}
    m = json.loads((folder / "metrics.json").read_text())
    rows = list(csv.DictReader((folder / "logs" / "train.csv").open()))
    g = shape_params(base, name)["grpo"]
    return {
        "name": name,
        "changes": {**SHAPES[name], **other_changes(name)},
        "rollouts": g["n_grpo_steps"] * g["rollout_batch_size"],
        "accuracy": m["eval/accuracy"],
        "delta": m["eval/delta"],
        "delta_lo": m["eval/delta_lo"],
        "delta_hi": m["eval/delta_hi"],
        "train_reward_first": float(rows[0]["rollout/reward"]),
        "train_reward_last3": sum(float(r["rollout/reward"]) for r in rows[-3:]) / min(3, len(rows)),
        "seconds": round(seconds, 1),
    }


def table(results: list[dict]) -> str:
    lines = [
        "| shape | grpo fields changed | rollouts | accuracy | change from start (95% CI) "
        "| train reward first → last 3 | seconds |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for r in results:
        if "accuracy" not in r:
            lines.append(f"| {r['name']} | failed (rc {r['rc']}) | | | | | {r['seconds']} |")
            continue
        mark = " ✓" if r["delta_lo"] > 0 else ""
        changes = ", ".join(f"{k} {v}" for k, v in r["changes"].items())
        lines.append(
            f"| {r['name']} | {changes} | {r['rollouts']} | {r['accuracy']:.3f} | {r['delta']:+.3f} "
            f"({r['delta_lo']:+.3f} to {r['delta_hi']:+.3f}){mark} | {r['train_reward_first']:.3f} → "
            f"{r['train_reward_last3']:.3f} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(".sweep"))
    p.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="the default profile, composed")
    p.add_argument("--only", nargs="*", help="these shapes (default: all)")
    args = p.parse_args()
    base = yaml.safe_load(args.params.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "sweep.json"
    results = json.loads(store.read_text()) if store.exists() else []
    done = {r["name"] for r in results if "accuracy" in r}
    for name in args.only or list(SHAPES):
        if name in done:
            continue
        print(f"{name}: running", flush=True)
        results = [r for r in results if r["name"] != name] + [run_shape(base, name, args.out)]
        store.write_text(json.dumps(results, indent=1) + "\n")
        print(table(results[-1:]), flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
