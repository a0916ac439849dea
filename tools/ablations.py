"""Ablation contrasts: each run against its family's reference run, paired over the same validation questions.

- The summary compares every trained run with its own starting policy; an ablation asks another question (did
  no_baseline learn less than reinforce_baseline?). For each family (sft_runs, ei_runs, grpo_runs in params.yaml)
  the reference is its first-listed run, and each other run's final per-question scores (`validation.json` in its
  model folder) are compared with the reference's (`a5core.base.stats.paired_test`: bootstrap over questions). Runs with
  seed replicates (`replicates`) are compared by their means over the seeds, with a hierarchical bootstrap over
  seeds, then questions (`a5core.report.replicates.hierarchical_test`), and a power line says what the replicates
  resolve. The summary's seed-replicate table (hierarchical intervals) is printed too, from the model folders alone:
  a study cut short before its `plots` stage still has it.
- Verdicts are corrected per family with Holm's method (family-wise error 5%; `a5core.base.stats.holm`): a family of 11
  contrasts each tested at 5% finds a difference by chance about once in two families. Holm rather than a
  false-discovery-rate control because each contrast is read as its own claim ("this option changes accuracy"), and the
  families are small. ✓ marks a contrast whose Holm-adjusted p is below 0.05; `--pair` contrasts form one more family.
- Two runs validated under different protocols (a run with its own prompt) are still paired by question, and marked:
  their difference mixes the method with the prompt it is scored under.

    python -m tools.ablations --out reports/cpu_study/ablations.md --pair sft_filtered:sft_full
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a5core.base.stats import holm, min_detectable_difference, paired_test
from a5core.config.sections import ReplicatesConfig, from_dict, read_params
from a5core.report.replicates import FAMILIES as REPLICATED
from a5core.report.replicates import hierarchical_interval, hierarchical_test
from a5core.report.summary import _delta as delta_cell  # the summary's format for a paired change
from a5core.report.summary import replicates_text

FAMILIES = {"SFT": ("sft_runs", "sft_{}"), "EI": ("ei_runs", "ei_{}"), "GRPO": ("grpo_runs", "grpo_{}")}


def final_model(models: Path, folder: str) -> Path:
    """A run's final model folder: the folder itself, or its last `round_<k>` (EI)."""
    rounds = sorted((models / folder).glob("round_*"), key=lambda p: int(p.name.split("_")[1]))
    return rounds[-1] if rounds else models / folder


def replicates(models: Path, folder: str, seeds: tuple[int, ...] = ()) -> list[dict]:
    """The final validation records of a run and of its seed replicates (`<folder>_seed<s>`,
    a5core/report/replicates.py)."""
    return [json.loads((final_model(models, f) / "validation.json").read_text()) for f in _folders(folder, seeds)]


def _folders(folder: str, seeds: tuple[int, ...]) -> list[str]:
    return [folder, *(f"{folder}_seed{s}" for s in seeds)]


def contrast(
    models: Path, run: str, reference: str, seeds: tuple[int, ...] = (), ref_seeds: tuple[int, ...] = ()
) -> dict:
    """run - reference, paired over their common questions: mean accuracies over the seed replicates, the difference,
    its interval and p (one seed each: the paired question bootstrap; more: the hierarchical one over seeds, then
    questions)."""
    a, b = replicates(models, run, seeds), replicates(models, reference, ref_seeds)
    qa, qb = [r["per_question"] for r in a], [r["per_question"] for r in b]
    delta, lo, hi, p = paired_test(qa[0], qb[0]) if len(a) == len(b) == 1 else hierarchical_test(qa, qb)
    return {
        "name": f"{run} − {reference}",
        "accuracy": sum(r["metrics"]["eval/accuracy"] for r in a) / len(a),
        "reference": sum(r["metrics"]["eval/accuracy"] for r in b) / len(b),
        "delta": (delta, lo, hi),
        "p": p,
        "questions": len(set(qa[0]) & set(qb[0])),
        "seeds": len(a),
        "note": "" if a[0]["protocol"] == b[0]["protocol"] else "different prompt or protocol",
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
            f"| {c['questions']} | {c['seeds']} | {c['note']} |"
        )
    return out


def table(params: dict, models: Path, pairs: list[tuple[str, str]]) -> str:
    lines = [
        "| contrast | accuracy | reference accuracy | difference (95% CI) | p | Holm p | questions | seeds | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    reps = replicate_config(params)
    for section, folder in FAMILIES.values():
        names = list(params.get(section) or {})
        ref = folder.format(names[0]) if names else ""
        lines += _rows(
            [
                contrast(models, folder.format(n), ref, _seeds(reps, section, n), _seeds(reps, section, names[0]))
                for n in names[1:]
            ]
        )
    lines += _rows(
        [contrast(models, a, b, _folder_seeds(params, reps, a), _folder_seeds(params, reps, b)) for a, b in pairs]
    )
    return "\n".join(lines)


def _folder_seeds(params: dict, reps: ReplicatesConfig, folder: str) -> tuple[int, ...]:
    """A `--pair` folder's extra seeds: its run's, if it is a replicated run of a family (as the family rows use)."""
    for section, pattern in FAMILIES.values():
        prefix = pattern.format("")
        if folder.startswith(prefix) and folder.removeprefix(prefix) in (params.get(section) or {}):
            return _seeds(reps, section, folder.removeprefix(prefix))
    return ()


def _seeds(reps: ReplicatesConfig, section: str, run: str) -> tuple[int, ...]:
    """A run's extra seeds: the configured ones if its family (sft_runs, ei_runs, grpo_runs) replicates it."""
    return reps.seeds if run in reps.runs(section.removesuffix("_runs")) else ()


def _ran(models: Path, folder: str, seeds: tuple[int, ...]) -> bool:
    """Whether a run's final model and its replicates' (`<folder>_seed<s>`) have their validations."""
    return all((final_model(models, f) / "validation.json").exists() for f in _folders(folder, seeds))


def ran_only(params: dict, models: Path) -> tuple[dict, list[str]]:
    """`params` without the runs whose final model, or a replicate's, is not in `models`, and those runs' folders: a
    study cut short is tabulated on what ran (`--ran-only`). A family whose reference has not run is left out whole."""
    reps, out, dropped = replicate_config(params), dict(params), []
    for section, folder in FAMILIES.values():
        fam, runs = section.removesuffix("_runs"), params.get(section) or {}
        ran = {r: _ran(models, folder.format(r), _seeds(reps, section, r)) for r in runs}
        done = {r: o for r, o in runs.items() if ran[r]} if runs and ran[next(iter(runs))] else {}
        dropped += [folder.format(r) for r in runs if r not in done]
        out[section] = done
        out["replicates"] = {**(out.get("replicates") or {}), section: [r for r in reps.runs(fam) if r in done]}
    return out, dropped


def replicate_config(params: dict) -> ReplicatesConfig:
    return from_dict(ReplicatesConfig, params.get("replicates") or {}, "replicates")


def replicated(params: dict, models: Path) -> dict[tuple[str, str], list[dict]]:
    """{(family, run): the final validation records of its replicates} of every replicated run."""
    reps = replicate_config(params)
    return {
        (fam, run): replicates(models, f"{fam}_{run}", reps.seeds)
        for fam in REPLICATED.values()
        for run in reps.runs(fam)
    }


def intervals(records: dict[tuple[str, str], list[dict]]) -> dict[tuple[str, str], dict]:
    """{(family, run): its hierarchical interval over seeds, then questions}, computed once for the table and the
    power line (each is 10k bootstrap draws)."""
    return {key: hierarchical_interval([x["per_question"] for x in recs]) for key, recs in records.items()}


def replicates_table(h: dict[tuple[str, str], dict]) -> str:
    """The summary's seed-replicate table (hierarchical intervals `h`) from the model folders: it needs only the
    replicated runs, not the whole DAG, so a study cut short still has it."""
    method = {fam: name for name, fam in REPLICATED.items()}
    return "\n".join(replicates_text({(method[f], r): x for (f, r), x in h.items()}))


def power_text(records: dict[tuple[str, str], list[dict]], h: dict[tuple[str, str], dict]) -> str:
    """What each family's replicates can resolve: the seed SD they measured (`h`, from `intervals`), and the smallest
    difference between two runs' seed means that the protocol detects with 80% power
    (a5core.base.stats.min_detectable_difference)."""
    return "".join(_power(fam, {r: x for (f, r), x in h.items() if f == fam}, records) for fam in REPLICATED.values())


def _power(family: str, h: dict[str, dict], records: dict[tuple[str, str], list[dict]]) -> str:
    if not h:
        return ""
    sd = sum(x["seed_sd"] for x in h.values()) / len(h)
    acc = sum(x["mean"] for x in h.values()) / len(h)
    n, s = min(x["questions"] for x in h.values()), min(x["seeds"] for x in h.values())
    k = records[(family, next(iter(h)))][0]["metrics"].get("count/samples_per_question", 1)
    mde = min_detectable_difference(n, k, acc, seeds=s, seed_sd=sd)
    spread = ", ".join(f"{r} {x['seed_sd']:.3f}" for r, x in h.items())
    return (
        f"\n\nPower ({family.upper()}, {s} seeds): the replicated runs' accuracies vary between seeds with SD "
        f"{spread} (mean {sd:.3f}); with {n} questions x {k} samples x {s} seeds at accuracy {acc:.2f}, a "
        f"difference between two runs' seed means is resolved with 80% power from about {mde:.3f} "
        f"(`python -m tools.power --accuracy {acc:.2f} --seed-sd {sd:.3f}` plans more seeds or questions)."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--models", default="models")
    ap.add_argument("--pair", action="append", default=[], help="an extra contrast A:B of model folders")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ran-only", action="store_true", help="only the runs whose models exist (a study cut short)")
    a = ap.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in a.pair]
    params, dropped = read_params(a.params), []
    if a.ran_only:
        params, dropped = ran_only(params, Path(a.models))
    text = (
        "# Ablation contrasts\n\nEach run's final validation against its family's reference run (the first listed), "
        "paired over the same questions and sample seeds (bootstrap over questions, 95% intervals; p two-sided; with "
        "seed replicates, accuracies are means over the seeds and the bootstrap draws seeds, then questions). ✓ "
        "marks a contrast whose Holm-adjusted p (within its family) is below 0.05. Written by "
        "`python -m tools.ablations`.\n\n"
    ) + table(params, Path(a.models), pairs)
    if dropped:
        text += f"\n\nNot run yet, so left out (Holm corrects over the contrasts above only): {', '.join(dropped)}."
    records = replicated(params, Path(a.models))
    h = intervals(records)
    text += ("\n" + replicates_table(h) + power_text(records, h)) if records else ""
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
