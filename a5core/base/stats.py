"""Confidence intervals for accuracies measured on a set of questions, and for paired differences between policies.

Questions are the unit of sampling: the k samples of one question are correlated (they share its difficulty), so
an interval treats each question's mean score as one observation.
- One sample per question: the Wilson score interval of k successes in n questions (Wilson, 1927), which stays inside
  [0, 1] and keeps its coverage at small n and near 0 or 1, where the normal approximation does not.
- k > 1 samples per question: a percentile bootstrap over questions (resampling questions, each with its k scores).
- A paired difference (after - before, on the same questions with the same sample seeds): a percentile bootstrap over
  questions of the per-question differences. It is much narrower than comparing two independent intervals, because
  most of the variance is which questions are hard, and that cancels within a question.
The bootstrap is seeded, so the same scores always give the same interval. `paired_test` adds a bootstrap p-value,
and `holm` corrects a family of them (tools/ablations.py). `min_detectable_difference` is the smallest paired
difference a protocol resolves (a rough power calculation: the protocols' documentation and `python -m tools.power`).
`pass_at_k` and `majority_index` score one question's k samples (pass@k, maj@k; a5core.run.evaluation.at_k_scores).
`t_interval` is the mean of a few values with Student's t interval (a training curve's running mean over steps).
"""

from __future__ import annotations

import math
import random
from collections import Counter

Z95 = 1.959963984540054  # two-sided 95% normal quantile
N_BOOTSTRAP = 4000
# Student's t two-sided 95% quantiles t_{0.975, df}, df = 1..30 (NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean(xs) -> float:
    """The mean of `xs`; NaN when empty (a missing value, never a zero that reads as measured)."""
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion (successes may be fractional only through rounding; n >= 1)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact ends: no rounding residue at 0/n or n/n
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return (lo, hi)


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, 95% lo, 95% hi) of a few independent values by Student's t: mean -+ t * sd / sqrt(n); one value gives a
    zero-width interval (no spread to measure), more than 31 the normal quantile's (within 4% of t's)."""
    n, m = len(values), mean(values)
    if n < 2:
        return (m, m, m)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = (T95[n - 2] if n - 1 <= len(T95) else Z95) * sd / math.sqrt(n)
    return (m, m - half, m + half)


def _resampled_means(values: list[float], seed: int, n_boot: int) -> list[float]:
    """The sorted means of `n_boot` resamples (with replacement) of `values`, seeded."""
    n, rng = len(values), random.Random(seed)
    return sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))


def bootstrap_mean(values: list[float], seed: int = 0, n_boot: int = N_BOOTSTRAP) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of `values` (one value per question)."""
    if not values:
        return (float("nan"), float("nan"))
    means = _resampled_means(values, seed, n_boot)
    return (means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1])


def per_question(scores: list[tuple[str, float]]) -> dict[str, float]:
    """Mean score per question from (unique_id, score) pairs, in first-seen order."""
    sums: dict[str, list[float]] = {}
    for uid, score in scores:
        sums.setdefault(uid, []).append(score)
    return {uid: sum(v) / len(v) for uid, v in sums.items()}


def accuracy_interval(scores: dict[str, float], samples_per_question: int) -> tuple[float, float]:
    """95% interval of the mean of per-question scores: Wilson for one sample per question, else the bootstrap."""
    values = list(scores.values())
    if samples_per_question == 1:
        return wilson(sum(values), len(values))
    return bootstrap_mean(values)


def paired_difference(after: dict[str, float], before: dict[str, float], seed: int = 0) -> tuple[float, float, float]:
    """(mean difference, 95% lo, 95% hi) of after - before over the questions both measured."""
    common = [uid for uid in after if uid in before]
    if not common:
        raise ValueError("the two measurements share no question: a paired difference needs the same questions")
    diffs = [after[uid] - before[uid] for uid in common]
    lo, hi = bootstrap_mean(diffs, seed)
    return (sum(diffs) / len(diffs), lo, hi)


def paired_test(
    after: dict[str, float], before: dict[str, float], seed: int = 0, n_boot: int = N_BOOTSTRAP
) -> tuple[float, float, float, float]:
    """(mean difference, 95% lo, 95% hi, two-sided p) of after - before over the questions both measured.

    The interval is `paired_difference`'s; p is the bootstrap's: twice (far + 1) / (n_boot + 1), far the resampled
    means on the far side of zero from the observed one (Davison & Hinkley, 1997, eq. 4.11: never 0, so Holm's
    adjustment keeps its meaning; at most 1; 1 when every difference is 0)."""
    delta, lo, hi = paired_difference(after, before, seed)
    diffs = [after[uid] - before[uid] for uid in after if uid in before]
    if all(d == 0 for d in diffs):
        return delta, lo, hi, 1.0
    means = _resampled_means(diffs, seed, n_boot)
    far = sum(m <= 0 for m in means) if delta > 0 else sum(m >= 0 for m in means)
    return delta, lo, hi, bootstrap_p(far, n_boot)


def bootstrap_p(far: int, n_boot: int) -> float:
    """Two-sided bootstrap p from `far` of `n_boot` draws on the far side of zero: 2 (far + 1) / (n_boot + 1), at
    most 1 (the +1s count the observed sample among the draws; a p of 0 would claim more than n_boot draws show)."""
    return min(1.0, 2 * (far + 1) / (n_boot + 1))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in input order (Holm, 1979): the family-wise error rate stays at the
    level whatever the dependence between the tests, and it rejects at least what Bonferroni does."""
    m = len(pvalues)
    adjusted, running = [1.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))  # step-down: never below an earlier rejection's
        adjusted[i] = running
    return adjusted


def min_detectable_difference(
    n_questions: int, samples: int, accuracy: float, z_power: float = 0.8416, seeds: int = 1, seed_sd: float = 0.0
) -> float:
    """Smallest paired accuracy difference found with 80% power by a two-sided 5% test, for a protocol of
    `n_questions` questions x `samples` samples each at accuracy about `accuracy`, each arm the mean of `seeds`
    training runs whose accuracies vary with standard deviation `seed_sd` between seeds.

    The difference of one question's two mean scores has variance 2 * p_q (1 - p_q) / samples from sampling alone;
    bounding p_q (1 - p_q) by p (1 - p) and averaging over seeds gives a variance 2 p (1 - p) / (samples n seeds) +
    2 seed_sd^2 / seeds, and the difference is (z_0.975 + z_0.8) times its square root. Questions that are always or
    never solved make the true figure smaller, and a change that helps some questions and hurts others makes it
    larger: a planning figure, not a test.
    """
    p = min(max(accuracy, 1e-3), 1 - 1e-3)
    var = 2 * p * (1 - p) / (samples * n_questions * seeds) + 2 * seed_sd**2 / seeds
    return (Z95 + z_power) * math.sqrt(var)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct, 1 - C(n-c, k) / C(n, k) (Chen et al.,
    2021): the chance that k of the n samples, drawn without replacement, include a correct one."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_index(answers: list[str | None]) -> int | None:
    """The index of the first sample carrying the most common answer (None: no answer, no vote); a tie goes to the
    answer that appears first, so the vote is a function of the samples in their seeded order. None if no votes."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    most = max(counts.values())
    return next(i for i, a in enumerate(answers) if a is not None and counts[a] == most)
