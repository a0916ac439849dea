"""How many questions, samples and training seeds a comparison needs: `python -m tools.power`.

    python -m tools.power --accuracy 0.3 --delta 0.05 --seed-sd 0.02
    python -m tools.power --accuracy 0.3 --questions 500 --samples 4 --seeds 3 --seed-sd 0.02

- Without `--delta`: the smallest paired difference each protocol resolves (80% power, two-sided 5%), over a grid
  of questions x samples x seeds (or the one given).
- With `--delta`: the cheapest protocols of the grid (fewest generations, questions x samples x seeds) that resolve it.
- `--seed-sd`: how much a run's accuracy varies between training seeds (standard deviation). It is not known before
  replicates are run; measure it from a family with several seeds and pass it here. 0 (the default) plans for
  evaluation noise alone, which overstates what one training run shows.
The formula is `a5core.base.stats.min_detectable_difference` (a planning figure, not a test).
"""

from __future__ import annotations

import argparse
import itertools

from a5core.base.stats import min_detectable_difference

QUESTIONS = (64, 200, 500, 1000, 5000)  # the default DAG's set, MATH-500, the full MATH test split
SAMPLES = (1, 4, 8, 16)
SEEDS = (1, 2, 3, 5)


def grid(accuracy: float, seed_sd: float, questions=QUESTIONS, samples=SAMPLES, seeds=SEEDS) -> list[dict]:
    """Every protocol of the grid with the difference it resolves, cheapest first."""
    rows = [
        {
            "questions": n,
            "samples": k,
            "seeds": s,
            "generations": n * k * s,
            "resolves": min_detectable_difference(n, k, accuracy, seeds=s, seed_sd=seed_sd),
        }
        for n, k, s in itertools.product(questions, samples, seeds)
    ]
    return sorted(rows, key=lambda r: (r["generations"], r["resolves"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accuracy", type=float, required=True, help="expected accuracy of the runs compared")
    ap.add_argument("--delta", type=float, help="the difference to resolve")
    ap.add_argument("--seed-sd", type=float, default=0.0, help="between-seed standard deviation of a run's accuracy")
    ap.add_argument("--questions", type=int, nargs="*", default=list(QUESTIONS))
    ap.add_argument("--samples", type=int, nargs="*", default=list(SAMPLES))
    ap.add_argument("--seeds", type=int, nargs="*", default=list(SEEDS))
    a = ap.parse_args()
    if not 0 < a.accuracy < 1 or (a.delta is not None and not 0 < a.delta < 1) or a.seed_sd < 0:
        ap.error("--accuracy and --delta must be in (0, 1), --seed-sd >= 0")
    rows = grid(a.accuracy, a.seed_sd, a.questions, a.samples, a.seeds)
    if a.delta is not None:
        rows = [r for r in rows if r["resolves"] <= a.delta][:10]
        if not rows:
            print(f"no protocol of the grid resolves {a.delta} (seed_sd {a.seed_sd} bounds what seeds can do)")
            return
    print("| questions | samples | seeds | generations | smallest difference resolved |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['questions']} | {r['samples']} | {r['seeds']} | {r['generations']:,} | {r['resolves']:.3f} |")


if __name__ == "__main__":
    main()
