"""runner.stats against reference implementations (scipy, numpy, brute force)."""

from __future__ import annotations

import ast
import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from runner.stats import measures as stats
from runner.stats import (
    cohen_kappa,
    confusion_matrix,
    mcnemar_exact,
    paired_bootstrap,
    pass_at_k,
    pass_hat_k,
    precision_recall,
    sign_test,
    wilson_interval,
)

KN_GRID = [(k, n) for n in (1, 2, 3, 5, 10, 17, 50, 100, 1000) for k in sorted({0, 1, n // 3, n // 2, n - 1, n})]


def test_module_imports_only_stdlib():
    tree = ast.parse(Path(stats.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "math", "random", "itertools", "collections", "statistics"}


# --- Wilson -----------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), KN_GRID)
def test_wilson_matches_scipy(k, n):
    ref = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ref.low, ref.high), abs=1e-9)


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.99])
@pytest.mark.parametrize(("k", "n"), [(0, 7), (3, 7), (7, 7), (12, 40)])
def test_wilson_other_confidence_levels(k, n, confidence):
    ref = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    assert wilson_interval(k, n, confidence) == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_wilson_empty_and_bounds():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0 < hi < 1
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and 0 < lo < 1


@pytest.mark.parametrize(("k", "n", "confidence"), [(-1, 5, 0.95), (6, 5, 0.95), (0, -1, 0.95), (1, 5, 0.0), (1, 5, 1.0)])
def test_wilson_errors(k, n, confidence):
    with pytest.raises(ValueError):
        wilson_interval(k, n, confidence)


# --- pass@k / pass^k --------------------------------------------------------


def _brute(n, c, k):
    """(pass@k, pass^k) by enumerating every k-subset of n samples, c of which pass."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_pass = sum(any(samples[i] for i in s) for s in subsets)
    all_pass = sum(all(samples[i] for i in s) for s in subsets)
    return any_pass / len(subsets), all_pass / len(subsets)


NCK_SMALL = [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)]


@pytest.mark.parametrize(("n", "c", "k"), NCK_SMALL)
def test_pass_k_brute_force(n, c, k):
    at_k, hat_k = _brute(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(at_k, abs=1e-12)
    assert pass_hat_k(n, c, k) == pytest.approx(hat_k, abs=1e-12)


def test_pass_k_known_values_and_large_n():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 6, 5) == 1.0  # n - c < k
    assert pass_at_k(200, 1, 1) == pytest.approx(1 / 200)
    assert pass_hat_k(10, 10, 10) == 1.0
    assert pass_hat_k(10, 3, 4) == 0.0
    # Large n: exact comb ratio, no float overflow; compare with the stable product form.
    n, c, k = 2000, 37, 100
    expected = 1 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)
    assert pass_hat_k(n, 1500, 200) == pytest.approx(
        math.exp(sum(math.log((1500 - i) / (n - i)) for i in range(200))), rel=1e-9
    )


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 6), (5, 2, 0), (5, 2, -1), (5, 6, 2), (-1, 0, 1), (5, -1, 2)])
def test_pass_k_errors(fn, n, c, k):
    with pytest.raises(ValueError):
        fn(n, c, k)


# --- sign test / McNemar ----------------------------------------------------

SIGN_GRID = [(i, r) for i in range(0, 13) for r in range(0, 13) if i + r > 0] + [
    (40, 60),
    (500, 480),
    (0, 200),
    (1000, 1000),
    (1050, 1000),
]


@pytest.mark.parametrize(("improved", "regressed"), SIGN_GRID)
def test_sign_test_matches_scipy(improved, regressed):
    ref = scipy.stats.binomtest(improved, improved + regressed, 0.5).pvalue
    assert sign_test(improved, regressed) == pytest.approx(ref, rel=1e-9, abs=1e-300)
    assert mcnemar_exact(improved, regressed) == sign_test(improved, regressed)


def test_sign_test_known_values():
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 3) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)


@pytest.mark.parametrize(("a", "b"), [(-1, 3), (3, -1)])
def test_sign_test_errors(a, b):
    with pytest.raises(ValueError):
        sign_test(a, b)
    with pytest.raises(ValueError):
        mcnemar_exact(a, b)


# --- paired bootstrap -------------------------------------------------------


def _data40():
    rng = random.Random(1234)
    return [rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0]) + rng.gauss(0, 0.1) for _ in range(40)]


def test_bootstrap_against_scipy():
    data = _data40()
    mean, lo, hi = paired_bootstrap(data, resamples=20000, seed=7)
    assert mean == pytest.approx(float(np.mean(data)), abs=1e-12)
    assert lo < mean < hi
    ref = scipy.stats.bootstrap(
        (np.array(data),), np.mean, n_resamples=20000, confidence_level=0.95, method="percentile", random_state=7
    ).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.02)
    assert hi == pytest.approx(ref.high, abs=0.02)


def test_bootstrap_confidence_level_changes_width():
    data = _data40()
    _, lo90, hi90 = paired_bootstrap(data, confidence=0.90)
    _, lo99, hi99 = paired_bootstrap(data, confidence=0.99)
    assert lo99 < lo90 < hi90 < hi99


def test_bootstrap_deterministic_for_seed():
    data = _data40()
    assert paired_bootstrap(data, resamples=2000, seed=3) == paired_bootstrap(data, resamples=2000, seed=3)
    assert paired_bootstrap(data, resamples=2000, seed=3) != paired_bootstrap(data, resamples=2000, seed=4)


def test_bootstrap_constant_and_single():
    assert paired_bootstrap([0.1] * 40) == (0.1, 0.1, 0.1)
    mean, lo, hi = paired_bootstrap([0.0, 0.0, 0.0])
    assert mean == lo == hi == 0.0
    assert paired_bootstrap([2.5]) == (2.5, 2.5, 2.5)


@pytest.mark.parametrize(
    "kwargs", [{"differences": []}, {"differences": [1.0], "resamples": 0}, {"differences": [1.0], "confidence": 1.5}]
)
def test_bootstrap_errors(kwargs):
    differences = kwargs.pop("differences")
    with pytest.raises(ValueError):
        paired_bootstrap(differences, **kwargs)


def test_percentile_matches_numpy_linear():
    rng = random.Random(0)
    for m in (1, 2, 3, 10, 101, 1000):
        values = sorted(rng.uniform(-5, 5) for _ in range(m))
        for q in (0, 2.5, 5, 25, 50, 97.5, 100, 100 * (1 - 0.95) / 2, 100 * (1 + 0.95) / 2, 33.3333):
            assert stats._percentile(values, q) == np.percentile(values, q)


# --- Cohen's kappa ----------------------------------------------------------


def _table(yy, yn, ny, nn):
    """Two raters' labels from a 2x2 table: yn = rater A yes, rater B no."""
    pairs = [("y", "y")] * yy + [("y", "n")] * yn + [("n", "y")] * ny + [("n", "n")] * nn
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.mark.parametrize(
    ("table", "kappa"),
    [
        ((20, 5, 10, 15), 0.4),  # po = 0.7, pe = 0.5
        ((45, 15, 25, 15), 0.06 / 0.46),  # po = 0.6, pe = 0.54
        ((25, 35, 5, 35), 0.14 / 0.54),  # po = 0.6, pe = 0.46
        ((10, 0, 0, 10), 1.0),
        ((0, 10, 10, 0), -1.0),
    ],
)
def test_kappa_textbook(table, kappa):
    assert cohen_kappa(*_table(*table)) == pytest.approx(kappa, abs=1e-12)


def _kappa_direct(a, b):
    n = len(a)
    labels = set(a) | set(b)
    po = sum(x == y for x, y in zip(a, b)) / n
    pe = sum((a.count(lab) / n) * (b.count(lab) / n) for lab in labels)
    return (po - pe) / (1 - pe)


def test_kappa_against_direct_formula():
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(2, 30)
        labels = ["a", "b", "c", 1][: rng.randint(2, 4)]
        a = [rng.choice(labels) for _ in range(n)]
        b = [x if rng.random() < 0.5 else rng.choice(labels) for x in a]
        if len(set(a) | set(b)) == 1:
            continue
        assert cohen_kappa(a, b) == pytest.approx(_kappa_direct(a, b), abs=1e-12)


def test_kappa_expected_agreement_one():
    assert cohen_kappa(["x"] * 5, ["x"] * 5) == 1.0


@pytest.mark.parametrize(("a", "b"), [([], []), (["a"], ["a", "b"]), (["a", "b"], ["a"])])
def test_kappa_errors(a, b):
    with pytest.raises(ValueError):
        cohen_kappa(a, b)


# --- confusion matrix / precision-recall ------------------------------------

LABELS = ["pass", "fail", "skip"]
PAIRS = [
    ("pass", "pass"),
    ("pass", "pass"),
    ("pass", "fail"),
    ("fail", "fail"),
    ("fail", "pass"),
    ("fail", "pass"),
    ("skip", "fail"),  # skip is expected once but never predicted
]


def test_confusion_matrix_hand_example():
    m = confusion_matrix(iter(PAIRS), LABELS)
    assert m == {
        "pass": {"pass": 2, "fail": 1, "skip": 0},
        "fail": {"pass": 2, "fail": 1, "skip": 0},
        "skip": {"pass": 0, "fail": 1, "skip": 0},
    }
    assert list(m) == LABELS and all(list(row) == LABELS for row in m.values())
    assert confusion_matrix([], ["a"]) == {"a": {"a": 0}}


def test_precision_recall_hand_example():
    m = confusion_matrix(PAIRS, LABELS)
    assert precision_recall(m, "pass") == pytest.approx((2 / 4, 2 / 3))
    assert precision_recall(m, "fail") == pytest.approx((1 / 3, 1 / 3))
    assert precision_recall(m, "skip") == (None, 0.0)
    empty = confusion_matrix([], ["a", "b"])
    assert precision_recall(empty, "a") == (None, None)


@pytest.mark.parametrize("pair", [("pass", "maybe"), ("maybe", "pass")])
def test_confusion_matrix_unknown_label(pair):
    with pytest.raises(ValueError, match="maybe"):
        confusion_matrix([("pass", "pass"), pair], LABELS)


def test_precision_recall_unknown_label():
    with pytest.raises(ValueError, match="maybe"):
        precision_recall(confusion_matrix(PAIRS, LABELS), "maybe")


def test_wilson_over_clusters_counts_each_cluster_once():
    # 0/1 rates are one trial per case: exactly the ordinary Wilson interval over cases
    assert stats.wilson_over_clusters([1, 1, 0, 1, 0]) == pytest.approx(stats.wilson_interval(3, 5))
    # a case at 0.5 over many trials weighs as one case, so the interval stays as wide as n cases allow
    wide = stats.wilson_over_clusters([0.5, 0.5, 1.0, 0.0])
    assert wide == pytest.approx(stats._wilson(2.0, 4, 0.95)) and wide[1] - wide[0] > stats.wilson_interval(40, 80)[1] - stats.wilson_interval(40, 80)[0]
    assert stats.wilson_over_clusters([1.0]) is None and stats.wilson_over_clusters([]) is None
    with pytest.raises(ValueError):
        stats.wilson_over_clusters([1.5, 0.0])
