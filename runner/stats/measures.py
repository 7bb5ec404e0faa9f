"""Statistics for eval results: intervals, pass@k, paired comparisons, rater agreement.

Standard library only, so importing it keeps the CLI fast.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from statistics import NormalDist

__all__ = [
    "wilson_interval",
    "wilson_over_clusters",
    "pass_at_k",
    "pass_hat_k",
    "paired_bootstrap",
    "sign_test",
    "mcnemar_exact",
    "cohen_kappa",
    "confusion_matrix",
    "precision_recall",
]


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (no continuity correction) for successes out of n."""
    _check_confidence(confidence)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    if n == 0:
        return (0.0, 1.0)
    return _wilson(successes, n, confidence)


def wilson_over_clusters(rates: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson interval for a pass rate when the samples come in clusters (the trials of one
    case are not independent): each cluster counts once, with its own pass rate, so n is the
    number of clusters, not of trials. None for fewer than two clusters."""
    values = [float(r) for r in rates]
    if any(not 0.0 <= r <= 1.0 for r in values):
        raise ValueError(f"rates must be in [0, 1], got {values}")
    if len(values) < 2:
        return None
    return _wilson(math.fsum(values), len(values), confidence)


def _wilson(successes: float, n: int, confidence: float) -> tuple[float, float]:
    _check_confidence(confidence)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    z2 = z * z
    total = n + z2
    center = (successes + z2 / 2) / total
    half = z * math.sqrt(max(successes * (n - successes) / n, 0.0) + z2 / 4) / total
    lower = 0.0 if successes == 0 else max(0.0, center - half)
    upper = 1.0 if successes == n else min(1.0, center + half)
    return (lower, upper)


def _check_nck(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0:
        raise ValueError(f"n and c must be >= 0, got n={n}, c={c}")
    if c > n:
        raise ValueError(f"c must be <= n, got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k must be <= n, got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) from c passes out of n samples."""
    _check_nck(n, c, k)
    if n - c < k:
        return 1.0
    # Exact integer ratio: int / int rounds correctly even for huge binomials.
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (tau-bench): chance that k of the n samples, drawn without replacement, all pass."""
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _lerp(a: float, b: float, t: float) -> float:
    # Same two-sided form as numpy's _lerp, so results match np.percentile bit for bit.
    diff = b - a
    if t >= 0.5:
        return b - diff * (1 - t)
    return a + diff * t


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile(..., method='linear') on already sorted values; q in [0, 100]."""
    m = len(sorted_values)
    virtual = (m - 1) * (q / 100)
    lo = math.floor(virtual)
    lo = min(max(lo, 0), m - 1)
    hi = min(lo + 1, m - 1)
    return _lerp(sorted_values[lo], sorted_values[hi], virtual - lo)


def paired_bootstrap(
    differences: Sequence[float],
    *,
    resamples: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, lower, upper): percentile bootstrap interval of the mean of per-case differences."""
    _check_confidence(confidence)
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    values = [float(x) for x in differences]
    n = len(values)
    if n == 0:
        raise ValueError("differences is empty")
    # fsum is order-independent, so a constant input gives identical resample means.
    mean = math.fsum(values) / n
    if n == 1:
        return (mean, mean, mean)
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    alpha = (1 - confidence) / 2
    return (mean, _percentile(means, 100 * alpha), _percentile(means, 100 * (1 - alpha)))


def sign_test(improved: int, regressed: int) -> float:
    """Exact two-sided sign test p-value (as scipy.stats.binomtest(improved, n, 0.5).pvalue)."""
    if improved < 0 or regressed < 0:
        raise ValueError(f"counts must be >= 0, got {improved}, {regressed}")
    n = improved + regressed
    if n == 0:
        return 1.0
    # Under p = 0.5 every pmf is comb(n, i) / 2**n, so compare the integers exactly;
    # scipy's relative tolerance 1 + 1e-7 becomes a factor (10**7 + 1) / 10**7.
    threshold = math.comb(n, improved) * (10**7 + 1)
    total = 0
    term = 1  # comb(n, i), updated incrementally
    for i in range(n + 1):
        if term * 10**7 <= threshold:
            total += term
        term = term * (n - i) // (i + 1)
    return min(1.0, total / 2**n)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact McNemar test on the discordant counts b and c (a sign test on them)."""
    return sign_test(b, c)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa between two raters' labels for the same items."""
    if len(a) != len(b):
        raise ValueError(f"rater sequences differ in length: {len(a)} != {len(b)}")
    n = len(a)
    if n == 0:
        raise ValueError("rater sequences are empty")
    observed = sum(1 for x, y in zip(a, b) if x == y)
    counts_a, counts_b = Counter(a), Counter(b)
    # Work in counts scaled by n*n so the "expected agreement is 1" check is exact.
    expected = sum(counts_a[label] * counts_b[label] for label in counts_a)
    if expected == n * n:
        return 1.0 if observed == n else 0.0
    return (observed * n - expected) / (n * n - expected)


def confusion_matrix(
    pairs: Iterable[tuple[str, str]], labels: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Counts of (expected, predicted) pairs: matrix[expected][predicted]."""
    matrix = {row: {col: 0 for col in labels} for row in labels}
    for expected, predicted in pairs:
        for label in (expected, predicted):
            if label not in matrix:
                raise ValueError(f"label {label!r} is not in labels {list(labels)!r}")
        matrix[expected][predicted] += 1
    return matrix


def precision_recall(
    matrix: dict[str, dict[str, int]], label: str
) -> tuple[float | None, float | None]:
    """(precision, recall) for one label; None where nothing was predicted / expected as it."""
    if label not in matrix:
        raise ValueError(f"label {label!r} is not in the matrix")
    tp = matrix[label].get(label, 0)
    predicted = sum(row.get(label, 0) for row in matrix.values())
    expected = sum(matrix[label].values())
    precision = tp / predicted if predicted else None
    recall = tp / expected if expected else None
    return (precision, recall)
