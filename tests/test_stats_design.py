"""The design statistics (runner/stats/design.py) against independent references (numpy's
sandwich estimator, scipy's F test, normal quantiles and FDR control) and against
simulation: a known true uplift is covered by the paired intervals about 95% of the time,
and the power formula predicts how often a paired test detects it."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as sp

from runner.stats import design
from runner.stats.measures import paired_bootstrap


def _sandwich_se(clusters):
    """Cluster-robust (CR1) standard error of an intercept-only regression, by matrices."""
    y = np.concatenate([np.asarray(c, float) for c in clusters])
    x = np.ones((len(y), 1))
    bread = np.linalg.inv(x.T @ x)
    residual = y - y.mean()
    meat = np.zeros((1, 1))
    start = 0
    for c in clusters:
        u = residual[start : start + len(c)].reshape(-1, 1)
        xc = x[start : start + len(c)]
        meat += xc.T @ u @ u.T @ xc
        start += len(c)
    g = len(clusters)
    return float(np.sqrt((bread @ meat @ bread)[0, 0] * g / (g - 1)))


def test_clustered_mean_matches_the_sandwich_estimator():
    rng = random.Random(3)
    clusters = [[float(rng.random() < 0.3 + 0.05 * (i % 7)) for _ in range(rng.randint(1, 6))] for i in range(25)]
    got = design.clustered_mean(clusters)
    assert got.se == pytest.approx(_sandwich_se(clusters), rel=1e-12)
    assert got.mean == pytest.approx(np.concatenate(clusters).mean())
    z = sp.norm.ppf(0.975)
    assert (got.lo, got.hi) == pytest.approx((got.mean - z * got.se, got.mean + z * got.se))
    assert (got.cases, got.records) == (25, sum(map(len, clusters)))


def test_identical_trials_count_once_and_one_case_has_no_interval():
    means = [0.0, 1.0, 1.0, 0.0, 1.0]
    repeated = design.clustered_mean([[m] * 8 for m in means])  # 8 identical trials a case
    assert repeated.se == pytest.approx(np.std(means, ddof=1) / math.sqrt(len(means)))
    naive = np.std(np.repeat(means, 8), ddof=1) / math.sqrt(40)
    assert repeated.se > 2 * naive  # the trials add no information; the naive error pretends they do
    single = design.clustered_mean([[1.0, 0.0, 1.0]])
    assert (single.se, single.lo, single.hi) == (None, None, None)
    with pytest.raises(ValueError, match="no records"):
        design.clustered_mean([[], []])


def test_variance_components_agree_with_scipys_f_test():
    rng = random.Random(5)
    clusters = [[rng.gauss(mu, 0.3) for _ in range(rng.randint(2, 5))] for mu in [rng.gauss(0, 1) for _ in range(12)]]
    comp = design.variance_components(clusters)
    n = sum(map(len, clusters))
    k = len(clusters)
    n0 = (n - sum(len(c) ** 2 for c in clusters) / n) / (k - 1)
    f = sp.f_oneway(*clusters).statistic  # MS_between / MS_within
    assert (comp.between * n0 + comp.within) / comp.within == pytest.approx(f, rel=1e-10)
    assert comp.within == pytest.approx(sum(np.var(c, ddof=0) * len(c) for c in clusters) / (n - k))
    assert "add cases" in comp.advice  # case means differ far more than trials do


def test_noise_within_cases_calls_for_trials():
    rng = random.Random(9)
    clusters = [[float(rng.random() < 0.5) for _ in range(3)] for _ in range(30)]  # every case the same coin
    comp = design.variance_components(clusters)
    assert comp.within > comp.between and "more trials" in comp.advice
    with pytest.raises(ValueError, match="two cases"):
        design.variance_components([[1.0, 0.0]])


def test_minimum_detectable_effect_and_detection_probability_are_inverse():
    for sd, cases in ((0.4, 30), (0.25, 12), (0.9, 100)):
        mde = design.minimum_detectable_effect(sd, cases)
        assert mde == pytest.approx((sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * sd / math.sqrt(cases))
        # the far tail adds a negligible share
        assert design.detection_probability(mde, sd, cases) == pytest.approx(0.8, abs=1e-3)
    assert design.minimum_detectable_effect(0.4, 1) is None
    assert design.detection_probability(0.0, 0.4, 30) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="alpha"):
        design.minimum_detectable_effect(0.4, 30, alpha=0)


def test_cases_needed_from_normal_quantiles_and_the_design_effect():
    p, d = 0.4, 0.15
    pbar = p + d / 2
    for trials, icc in ((1, 0.0), (5, 0.0), (5, 0.3), (10, 1.0)):
        sd = math.sqrt(2 * pbar * (1 - pbar) * (icc + (1 - icc) / trials))
        want = math.ceil(((sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * sd / d) ** 2)
        assert design.cases_needed(p, d, trials=trials, icc=icc) == max(2, want)
    # with every record's variance between cases, trials buy nothing
    assert design.cases_needed(p, d, trials=1, icc=1.0) == design.cases_needed(p, d, trials=20, icc=1.0)
    assert design.cases_needed(p, d, trials=5) < design.cases_needed(p, d, trials=1)
    for bad in ({"effect": 0.0}, {"effect": 0.7}, {"icc": 1.5}, {"trials": 0}):
        with pytest.raises(ValueError):
            design.cases_needed(p, bad.get("effect", d), trials=bad.get("trials", 1), icc=bad.get("icc", 0.0))


def _holm_reference(ps):
    m = len(ps)
    order = np.argsort(ps, kind="stable")
    out = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def test_holm_and_benjamini_hochberg():
    rng = random.Random(2)
    for _ in range(50):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        assert design.holm(ps) == pytest.approx(list(_holm_reference(np.array(ps))))
        assert design.benjamini_hochberg(ps) == pytest.approx(list(sp.false_discovery_control(ps, method="bh")))
    assert design.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    with pytest.raises(ValueError, match="p-values"):
        design.holm([0.2, 1.5])


# --- simulation -------------------------------------------------------------------------

def _simulated_run(rng, cases, trials, effect):
    """Per-case differences of a paired eval: each case passes a record with its own
    baseline rate (uniform on 0.2..0.6), the skill adds `effect`; `trials` records each."""
    diffs, clusters = [], []
    for _ in range(cases):
        p = rng.uniform(0.2, 0.6)
        base = sum(rng.random() < p for _ in range(trials)) / trials
        skill = sum(rng.random() < p + effect for _ in range(trials)) / trials
        diffs.append(skill - base)
        clusters.append([skill - base])
    return diffs, clusters


def test_paired_intervals_cover_a_known_uplift_95_percent_of_the_time():
    rng = random.Random(20261201)
    effect, runs = 0.2, 1000
    covered_bootstrap = covered_clustered = 0
    for run in range(runs):
        diffs, clusters = _simulated_run(rng, 60, 5, effect)
        _, lo, hi = paired_bootstrap(diffs, resamples=400, seed=run)
        covered_bootstrap += lo <= effect <= hi
        c = design.clustered_mean(clusters)
        covered_clustered += c.lo <= effect <= c.hi
    assert abs(covered_bootstrap / runs - 0.95) <= 0.02, covered_bootstrap
    assert abs(covered_clustered / runs - 0.95) <= 0.02, covered_clustered


def test_the_power_formula_predicts_the_simulated_detection_rate():
    rng = random.Random(7)
    effect, cases, trials, runs = 0.08, 40, 5, 1000
    # the true sd of a case's difference under the generator: binomial noise of both arms
    grid = [0.2 + 0.4 * (i + 0.5) / 2000 for i in range(2000)]
    variance = sum((p * (1 - p) + (p + effect) * (1 - p - effect)) / trials for p in grid) / len(grid)
    predicted = design.detection_probability(effect, math.sqrt(variance), cases)
    z = sp.norm.ppf(0.975)
    detected = 0
    for _ in range(runs):
        diffs, _ = _simulated_run(rng, cases, trials, effect)
        mean, sd = float(np.mean(diffs)), float(np.std(diffs, ddof=1))
        detected += abs(mean) > z * sd / math.sqrt(cases)
    assert 0.3 < predicted < 0.9
    assert abs(detected / runs - predicted) <= 0.03, (detected / runs, predicted)


# --- mbskills plan ------------------------------------------------------------------------

def test_plan_prints_the_cases_and_the_trade_off_against_trials(capsys):
    from runner.cli import main

    assert main(["plan", "--baseline-rate", "0.4", "--effect", "0.15", "--trials", "5", "--icc", "0.3"]) == 0
    out = capsys.readouterr().out
    want = design.cases_needed(0.4, 0.15, trials=5, icc=0.3)
    assert out.startswith(f"a paired eval that detects +15 pts over a 40% baseline (two-sided alpha 0.05, power 80%, ICC 0.3) needs {want} cases at 5 trials per case")
    rows = {int(line.split()[0]): int(line.split()[1]) for line in out.splitlines() if line.strip() and line.split()[0].isdigit()}
    assert rows == {k: design.cases_needed(0.4, 0.15, trials=k, icc=0.3) for k in (1, 2, 3, 5, 10)}
    assert rows[10] < rows[5] < rows[1]
    assert f"no fewer than {design.cases_needed(0.4, 0.15, trials=10**6, icc=0.3)} cases" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline-rate", "0.9", "--effect", "0.2"], "--baseline-rate + --effect must lie in (0, 1), got 1.1"),
        (["--baseline-rate", "0.4", "--effect", "0"], "--effect must be a finite non-zero difference"),
        (["--baseline-rate", "0.4", "--effect", "x"], "argument --effect: 'x' is not a number"),
        (["--baseline-rate", "0.4", "--effect", "0.1", "--power", "1.5"], "--power must lie in (0, 1), got 1.5"),
        (["--baseline-rate", "0", "--effect", "0.1"], "argument --baseline-rate: 0 must be above 0"),
        (["--baseline-rate", "0.4", "--effect", "0.1", "--trials", "0"], "argument --trials: 0 is under 1"),
        (["--baseline-rate", "0.4", "--effect", "0.1", "--icc", "2"], "argument --icc: 2 is outside 0..1"),
    ],
    ids=["rates-past-1", "zero-effect", "not-a-number", "power", "zero-rate", "no-trials", "icc"],
)
def test_plan_refuses_bad_input_in_one_line(capsys, argv, message):
    from runner.cli import main

    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err, err
