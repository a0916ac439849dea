"""Ablation contrasts: each run against its family's reference run, paired over the same validation questions.

- The summary compares every trained run with its own starting policy; an ablation asks another question (did
  no_baseline learn less than reinforce_baseline?). For each family (sft_runs, ei_runs, grpo_runs in params.yaml)
  the reference is its first-listed run, and each other run's final per-question scores (`validation.json` in its
  model folder) are compared with the reference's (`a5core.stats.paired_test`: bootstrap over questions).
- Verdicts are corrected per family with Holm's method (family-wise error 5%; `a5core.stats.holm`): a family of 11
  contrasts each tested at 5% finds a difference by chance about once in two families. Holm rather than a
  false-discovery-rate control because each contrast is read as its own claim ("this option changes accuracy"),
  and the families are small. ✓ marks a contrast whose Holm-adjusted p is below 0.05; `--pair` contrasts form one
  more family.
- Two runs validated under different protocols (a run with its own prompt) are still paired by question, and marked:
  their difference mixes the method with the prompt it is scored under.

    python -m tools.ablations --out reports/cpu_study/ablations.md --pair sft_filtered:sft_full
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a5core.config import read_params
from a5core.stats import holm, paired_test
from a5core.summary import _delta as delta_cell  # the summary's format for a paired change

FAMILIES = {"SFT": ("sft_runs", "sft_{}"), "EI": ("ei_runs", "ei_{}"), "GRPO": ("grpo_runs", "grpo_{}")}


def final_model(models: Path, folder: str) -> Path:
    """A run's final model folder: the folder itself, or its last `round_<k>` (EI)."""
    rounds = sorted((models / folder).glob("round_*"), key=lambda p: int(p.name.split("_")[1]))
    return rounds[-1] if rounds else models / folder


def contrast(models: Path, run: str, reference: str) -> dict:
    """run - reference, paired over their common questions: accuracies, the difference, its interval and p."""
    a, b = (json.loads((final_model(models, f) / "validation.json").read_text()) for f in (run, reference))
    delta, lo, hi, p = paired_test(a["per_question"], b["per_question"])
    return {
        "name": f"{run} − {reference}",
        "accuracy": a["metrics"]["eval/accuracy"],
        "reference": b["metrics"]["eval/accuracy"],
        "delta": (delta, lo, hi),
        "p": p,
        "questions": len(set(a["per_question"]) & set(b["per_question"])),
        "note": "" if a["protocol"] == b["protocol"] else "different prompt or protocol",
    }


def _rows(family: list[dict]) -> list[str]:
    """A family's markdown rows, its verdicts Holm-corrected together."""
    out = []
    for c, adjusted in zip(family, holm([c["p"] for c in family])):
        delta, lo, hi = c["delta"]
        change = delta_cell(
            {"eval/delta": delta, "eval/delta_lo": lo, "eval/delta_hi": hi, "eval/delta_excludes_zero": adjusted < 0.05}
        )
        out.append(
            f"| {c['name']} | {c['accuracy']:.3f} | {c['reference']:.3f} | {change} | {c['p']:.3f} | {adjusted:.3f} "
            f"| {c['questions']} | {c['note']} |"
        )
    return out


def table(params: dict, models: Path, pairs: list[tuple[str, str]]) -> str:
    lines = [
        "| contrast | accuracy | reference accuracy | difference (95% CI) | p | Holm p | questions | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for section, folder in FAMILIES.values():
        names = list(params.get(section) or {})
        lines += _rows([contrast(models, folder.format(n), folder.format(names[0])) for n in names[1:]])
    lines += _rows([contrast(models, a, b) for a, b in pairs])
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
        "paired over the same questions and sample seeds (bootstrap over questions, 95% intervals; p two-sided). ✓ "
        "marks a contrast whose Holm-adjusted p (within its family) is below 0.05. Written by "
        "`python -m tools.ablations`.\n\n"
    ) + table(read_params(a.params), Path(a.models), pairs)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
