"""Ablation contrasts: each run against its family's reference run, paired over the same validation questions.

The summary compares every trained run with its own starting policy; an ablation's question is a different one
(did no_baseline learn less than reinforce_baseline?). For each family (sft_runs, ei_runs, grpo_runs in params.yaml)
the reference is its first-listed run, and each other run's final per-question scores (`validation.json` in its model
folder) are compared with the reference's by `a5core.stats.paired_difference` (bootstrap over questions). Two runs
validated under different protocols (a run with its own prompt) are still paired by question, and marked: their
difference mixes the method with the prompt it is scored under.

    python -m tools.ablations --out reports/cpu_study/ablations.md --pair sft_filtered:sft_full
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a5core.config import read_params
from a5core.stats import paired_difference
from a5core.summary import _delta as delta_cell  # the summary's format for a paired change

FAMILIES = {"SFT": ("sft_runs", "sft_{}"), "EI": ("ei_runs", "ei_{}"), "GRPO": ("grpo_runs", "grpo_{}")}


def final_model(models: Path, folder: str) -> Path:
    """A run's final model folder: the folder itself, or its last `round_<k>` (EI)."""
    rounds = sorted((models / folder).glob("round_*"), key=lambda p: int(p.name.split("_")[1]))
    return rounds[-1] if rounds else models / folder


def contrast(models: Path, run: str, reference: str) -> str:
    """One markdown row: run - reference with its paired 95% interval."""
    a, b = (json.loads((final_model(models, f) / "validation.json").read_text()) for f in (run, reference))
    delta, lo, hi = paired_difference(a["per_question"], b["per_question"])
    change = delta_cell(
        {"eval/delta": delta, "eval/delta_lo": lo, "eval/delta_hi": hi, "eval/delta_excludes_zero": lo > 0 or hi < 0}
    )
    note = "" if a["protocol"] == b["protocol"] else "different prompt or protocol"
    acc_a, acc_b = a["metrics"]["eval/accuracy"], b["metrics"]["eval/accuracy"]
    n = len(set(a["per_question"]) & set(b["per_question"]))
    return f"| {run} − {reference} | {acc_a:.3f} | {acc_b:.3f} | {change} | {n} | {note} |"


def table(params: dict, models: Path, pairs: list[tuple[str, str]]) -> str:
    lines = [
        "| contrast | accuracy | reference accuracy | difference (95% CI) | questions | note |",
        "|---|---|---|---|---|---|",
    ]
    for section, folder in FAMILIES.values():
        names = list(params.get(section) or {})
        lines += [contrast(models, folder.format(n), folder.format(names[0])) for n in names[1:]]
    lines += [contrast(models, a, b) for a, b in pairs]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--models", default="models")
    ap.add_argument("--pair", action="append", default=[], help="an extra contrast A:B of model folders")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in a.pair]
    text = (
        "# Ablation contrasts\n\nEach run's final validation against its family's reference run (the first listed), "
        "paired over the same questions and sample seeds (bootstrap over questions, 95%). ✓ marks an interval that "
        "excludes zero. Written by `python -m tools.ablations`.\n\n"
    ) + table(read_params(a.params), Path(a.models), pairs)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
