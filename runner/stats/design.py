"""How much an eval's design can tell: clustered standard errors by case, the variance
decomposition between and within cases, the minimum detectable effect of a paired uplift,
the cases a planned eval needs, and multiplicity adjustments. Standard library only.

References: Miller, "Adding Error Bars to Evals" (arXiv 2411.00640): clustered standard
errors, paired differences, variance components and power; Holm (1979) and
Benjamini-Hochberg (1995) for many p-values at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

_NORMAL = NormalDist()


def _z(probability: float) -> float:
    return _NORMAL.inv_cdf(probability)


def _check_unit(name: str, value: float, *, open_low: bool = True, open_high: bool = True) -> None:
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value < 1 if open_high else value <= 1
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low_ok and high_ok):
        raise ValueError(f"{name} must lie in {'(' if open_low else '['}0, 1{')' if open_high else ']'}, got {value!r}")


@dataclass(frozen=True)
class Clustered:
    """A mean over records with its standard error clustered by case, and the normal
    interval from it; `se`, `lo` and `hi` are None for fewer than two cases."""

    mean: float
    se: float | None
    lo: float | None
    hi: float | None
    cases: int
    records: int


def clustered_mean(clusters: Sequence[Sequence[float]], confidence: float = 0.95) -> Clustered:
    """The mean of every record, with Miller's cluster-robust standard error:
    sqrt(sum over cases of (sum of that case's deviations from the mean)^2) / n, times
    sqrt(C / (C - 1)) for C cases (the usual small-sample correction). Records of one case
    (its trials) are not independent; this is what counts them once as a unit."""
    _check_unit("confidence", confidence)
    groups = [[float(x) for x in group] for group in clusters if len(group)]
    n = sum(len(g) for g in groups)
    if n == 0:
        raise ValueError("no records")
    mean = math.fsum(x for g in groups for x in g) / n
    c = len(groups)
    if c < 2:
        return Clustered(mean, None, None, None, c, n)
    spread = math.fsum(math.fsum(x - mean for x in g) ** 2 for g in groups)
    se = math.sqrt(spread * c / (c - 1)) / n
    z = _z(1 - (1 - confidence) / 2)
    return Clustered(mean, se, mean - z * se, mean + z * se, c, n)


@dataclass(frozen=True)
class Components:
    """Variance of one record's outcome split into the part between cases (how cases
    differ) and the part within a case (how its trials differ)."""

    between: float
    within: float
    cases: int
    trials: float  # mean trials per case

    @property
    def advice(self) -> str:
        """What would narrow the interval more: the within part shrinks with trials per
        case, the between part only with cases."""
        if self.within <= 0 and self.between <= 0:
            return "no variance: every record agrees"
        if self.within / max(self.trials, 1.0) > self.between:
            return "most of the noise is within cases: more trials per case narrow the interval"
        return "most of the noise is between cases: add cases; more trials of the same cases help little"


def variance_components(clusters: Sequence[Sequence[float]]) -> Components:
    """One-way random-effects (ANOVA) estimates: within = the pooled variance of trials
    around their case's mean; between = the variance of case means less what the trials'
    noise puts into them (floored at 0)."""
    groups = [[float(x) for x in g] for g in clusters if len(g)]
    if len(groups) < 2:
        raise ValueError("variance components need at least two cases")
    n = sum(len(g) for g in groups)
    k = len(groups)
    means = [math.fsum(g) / len(g) for g in groups]
    grand = math.fsum(x for g in groups for x in g) / n
    within_df = n - k
    ss_within = math.fsum(math.fsum((x - m) ** 2 for x in g) for g, m in zip(groups, means))
    within = ss_within / within_df if within_df > 0 else 0.0
    ms_between = math.fsum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means)) / (k - 1)
    n0 = (n - math.fsum(len(g) ** 2 for g in groups) / n) / (k - 1)  # the effective trials per case
    between = max(0.0, (ms_between - within) / n0)
    return Components(between, within, k, n / k)


def minimum_detectable_effect(sd_difference: float, cases: int, *, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true mean difference a two-sided paired test at `alpha` detects with
    probability `power`, given the standard deviation of the per-case differences and the
    number of cases: (z_{1-alpha/2} + z_{power}) * sd / sqrt(cases). None for fewer than two cases."""
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    if not (math.isfinite(sd_difference) and sd_difference >= 0):
        raise ValueError(f"sd_difference must be a finite number >= 0, got {sd_difference!r}")
    if cases < 2:
        return None
    return (_z(1 - alpha / 2) + _z(power)) * sd_difference / math.sqrt(cases)


def detection_probability(effect: float, sd_difference: float, cases: int, *, alpha: float = 0.05) -> float:
    """The probability that the paired test at `alpha` rejects no uplift when the true mean
    difference is `effect` (normal approximation, both tails)."""
    _check_unit("alpha", alpha)
    if cases < 2:
        raise ValueError(f"a paired test needs at least two cases, got {cases!r}")
    if sd_difference <= 0:  # every case differs by the same amount
        return 1.0 if effect else alpha
    shift = effect * math.sqrt(cases) / sd_difference
    z = _z(1 - alpha / 2)
    return _NORMAL.cdf(shift - z) + _NORMAL.cdf(-shift - z)


def planned_sd_difference(baseline_rate: float, effect: float, trials: int = 1, icc: float = 0.0) -> float:
    """The standard deviation of one case's difference between two conditions, each run
    `trials` times, when a record passes with probability near the mean of the two rates
    and a share `icc` of a record's variance is between cases (a case's difficulty, taken
    as independent between the two conditions: the conservative choice when nothing is
    known about how it carries over): sqrt(2 p(1-p) (icc + (1 - icc) / trials))."""
    _check_unit("baseline_rate", baseline_rate)
    _check_unit("icc", icc, open_low=False, open_high=False)
    if not 0 < baseline_rate + effect < 1:
        raise ValueError(f"baseline_rate + effect must lie in (0, 1), got {baseline_rate + effect!r}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    p = baseline_rate + effect / 2
    return math.sqrt(2 * p * (1 - p) * (icc + (1 - icc) / trials))


def cases_needed(baseline_rate: float, effect: float, *, trials: int = 1, icc: float = 0.0, alpha: float = 0.05, power: float = 0.8) -> int:
    """The cases a paired eval needs to detect `effect` with probability `power`."""
    if effect == 0 or not math.isfinite(effect):
        raise ValueError(f"effect must be a finite non-zero difference, got {effect!r}")
    sd = planned_sd_difference(baseline_rate, effect, trials, icc)
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    needed = ((_z(1 - alpha / 2) + _z(power)) * sd / abs(effect)) ** 2
    return max(2, math.ceil(needed - 1e-9))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input's order."""
    ps = _checked(p_values)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in the input's order."""
    ps = _checked(p_values)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i], reverse=True)
    adjusted = [0.0] * m
    running = 1.0
    for position, i in enumerate(order):
        rank = m - position
        running = min(running, ps[i] * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def _checked(p_values: Sequence[float]) -> list[float]:
    ps = [float(p) for p in p_values]
    for p in ps:
        if not (math.isfinite(p) and 0 <= p <= 1):
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    return ps


@dataclass(frozen=True)
class Plan:
    """The cases a paired eval needs, at the trials asked for and at others beside it."""

    baseline_rate: float
    effect: float
    trials: int
    icc: float
    alpha: float
    power: float
    cases: int
    by_trials: tuple[tuple[int, int], ...]  # (trials per case, cases needed)

    def table(self) -> str:
        head = (
            f"a paired eval that detects {self.effect * 100:+.0f} pts over a {self.baseline_rate:.0%} baseline"
            f" (two-sided alpha {self.alpha:g}, power {self.power:.0%}, ICC {self.icc:g}) needs {self.cases} cases"
            f" at {self.trials} trial{'s' if self.trials != 1 else ''} per case"
        )
        rows = [("trials per case", "cases needed", "records per condition")] + [(str(k), str(c), str(k * c)) for k, c in self.by_trials]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [head, ""] + ["  ".join(cell.rjust(widths[i]) for i, cell in enumerate(row)) for row in rows]
        if self.icc >= 1:
            lines.append("every record's variance is between cases: only more cases help")
        elif self.icc == 0:
            lines.append("records independent of their case (ICC 0): a trial is worth a case; give --icc from a pilot run's variance components")
        else:
            floor = cases_needed(self.baseline_rate, self.effect, trials=10**6, icc=self.icc, alpha=self.alpha, power=self.power)
            lines.append(f"however many trials, no fewer than {floor} cases: trials shrink only the noise within a case (ICC {self.icc:g})")
        return "\n".join(lines)


def plan(baseline_rate: float, effect: float, *, trials: int = 1, icc: float = 0.0, alpha: float = 0.05, power: float = 0.8) -> Plan:
    """`cases_needed` at the given trials, and the trade-off against 1, 2, 3, 5 and 10 trials."""
    need = cases_needed(baseline_rate, effect, trials=trials, icc=icc, alpha=alpha, power=power)
    options = sorted({1, 2, 3, 5, 10, trials})
    by_trials = tuple((k, cases_needed(baseline_rate, effect, trials=k, icc=icc, alpha=alpha, power=power)) for k in options)
    return Plan(baseline_rate, effect, trials, icc, alpha, power, need, by_trials)
