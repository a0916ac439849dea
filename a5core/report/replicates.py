"""Seed replicates: chosen SFT, EI and GRPO runs repeated over more training seeds, and what they show together.

- The `replicates` params section (a5core/config/sections.py `ReplicatesConfig`): `seeds` lists the extra seeds,
  `sft_runs`, `ei_runs` and `grpo_runs` the runs to repeat. dvc.yaml's `sft_replicate`, `ei_replicate_<k>` and
  `grpo_replicate` stages are matrices over runs x seeds: `grpo_replicate@<run>-<seed>` is the run with `grpo.seed`
  replaced (`sft.seed` for SFT), its own stage, model folder (`models/grpo_<run>_seed<seed>`) and results
  (`results/grpo/<run>/seed_<seed>/`), so the cache and resume work per replicate, and adding a seed reruns nothing that
  ran. The run itself (its own seed) is the first replicate. GRPO's and EI's seed drive the rollouts' questions, samples
  and order, SFT's the choice and order of its examples (a5core.base.seeds); none the validation, whose questions and
  sample seeds stay fixed. An EI replicate is a chain of rounds like its run (`ei_replicate_<k>@<run>-<seed>`,
  `models/ei_<run>_seed<seed>/round_<k>`, `results/ei/<run>/seed_<seed>/round_<k>/`), compared at its last round.
- `hierarchical_interval`: the mean accuracy over a run's replicates with a 95% interval that resamples seeds, then
  questions, and how much of one run's variance is between seeds; `hierarchical_test`: a difference of two runs'
  replicate means with its interval and p (tools/ablations.py; with one seed each, the paired question bootstrap).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from a5core.base.stats import N_BOOTSTRAP, bootstrap_p
from a5core.config.sections import ReplicatesConfig

# the summary's method -> the family's stage, folder and runs section
FAMILIES = {"SFT": "sft", "EI": "ei", "GRPO": "grpo"}


def score_matrix(replicates: list[dict[str, float]]) -> np.ndarray:
    """(seeds, questions) per-question scores on the questions every replicate measured, in the first's order."""
    if not replicates:
        raise ValueError("no replicates: a run needs at least its own validation")
    common = [q for q in replicates[0] if all(q in r for r in replicates[1:])]
    if not common:
        raise ValueError("the replicates share no question: they were validated on different sets")
    return np.array([[r[q] for q in common] for r in replicates], dtype=float)  # (S, Q)


def _draws(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    return rng.integers(0, n, size=(size, n))  # (B, n) indices drawn with replacement


def _boot_means(m: np.ndarray, seeds: np.ndarray, questions: np.ndarray) -> np.ndarray:
    """Each draw's mean over its drawn seeds (rows) and questions (columns)."""
    return np.array([m[s][:, q].mean() for s, q in zip(seeds, questions)])  # (B,)


def hierarchical_interval(replicates: list[dict[str, float]], seed: int = 0, n_boot: int = N_BOOTSTRAP) -> dict:
    """The mean accuracy over seed replicates (each: question -> mean score), with a 95% percentile interval from a
    hierarchical bootstrap: seeds drawn with replacement, then questions. The questions are the same for every seed
    (a crossed design), so one draw of questions serves all the drawn seeds. Also how the variance of one run's
    accuracy splits: `seed_sd`, the standard deviation of the replicates' accuracies (0 with one seed), and
    `between_share`, seed variance / (seed variance + question-sampling variance of one run's mean)."""
    m = score_matrix(replicates)  # (S, Q)
    s, q = m.shape
    rng = np.random.default_rng(seed)
    means = np.sort(_boot_means(m, _draws(rng, s, n_boot), _draws(rng, q, n_boot)))  # (B,)
    run_means = m.mean(axis=1)  # (S,)
    between = float(run_means.var(ddof=1)) if s > 1 else 0.0
    within = float(np.mean(m.var(axis=1, ddof=1) / q)) if q > 1 else 0.0
    return {
        "mean": float(run_means.mean()),
        "lo": float(means[int(0.025 * n_boot)]),
        "hi": float(means[int(0.975 * n_boot) - 1]),
        "seeds": s,
        "questions": q,
        "seed_sd": between**0.5,
        "between_share": between / (between + within) if between + within > 0 else 0.0,
    }


def hierarchical_test(
    run: list[dict[str, float]], reference: list[dict[str, float]], seed: int = 0, n_boot: int = N_BOOTSTRAP
) -> tuple[float, float, float, float]:
    """(difference of the mean accuracies, 95% lo, 95% hi, two-sided p) of `run` - `reference`, each a list of seed
    replicates: each draw takes seeds with replacement for each run apart (their seeds are not paired) and one draw
    of the questions for both (paired by question, as a5core.base.stats.paired_test). With one seed each it is the
    paired question bootstrap. p: twice the share of draws on the far side of zero (at most 1; 1 when nothing
    differs); as `bootstrap_p`."""
    m = score_matrix([*run, *reference])  # (Sa + Sb, Q) on the questions all of them measured
    a, b = m[: len(run)], m[len(run) :]  # (Sa, Q), (Sb, Q)
    delta = float(a.mean() - b.mean())
    rng = np.random.default_rng(seed)
    qs = _draws(rng, m.shape[1], n_boot)  # (B, Q): one draw of questions for both runs
    diffs = np.sort(_boot_means(a, _draws(rng, len(a), n_boot), qs) - _boot_means(b, _draws(rng, len(b), n_boot), qs))
    lo, hi = float(diffs[int(0.025 * n_boot)]), float(diffs[int(0.975 * n_boot) - 1])
    if not diffs.any():
        return delta, lo, hi, 1.0
    far = int(np.sum(diffs <= 0)) if delta > 0 else int(np.sum(diffs >= 0))
    return delta, lo, hi, bootstrap_p(far, n_boot)


def replicate_scores(
    results: Path, cfg: ReplicatesConfig, ei_rounds: int
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """{(method, run): final per-question scores} of each replicated run, the run's own first, then each configured
    seed's (`results/<family>/<run>/[seed_<s>/]validation.json`, written by stages/sft.py, stages/grpo.py and, in
    each `round_<ei_rounds>` folder, stages/ei_round.py); folders of seeds or runs no longer configured are not read."""
    out = {}
    for method, fam in FAMILIES.items():
        last = f"round_{ei_rounds}" if fam == "ei" else ""  # an EI run's result: its last round's
        for run in cfg.runs(fam):
            folders = [results / fam / run / last, *(results / fam / run / f"seed_{s}" / last for s in cfg.seeds)]
            missing = [str(f / "validation.json") for f in folders if not (f / "validation.json").exists()]
            if missing:
                raise FileNotFoundError(f"no final validation for configured runs or replicates: {missing}")
            out[(method, run)] = [json.loads((f / "validation.json").read_text())["per_question"] for f in folders]
    return out
