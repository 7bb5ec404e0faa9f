"""The combining policy follows the figures: within the pattern checks, a kind decides a
verdict only where the held-out set (evals/heldout/, written without looking at the checks)
shows it right at least MIN_PRECISION of the time, and the checks meet their held-out target.
(Whether a grader decides at all is its admission by a fresh round: tests/test_admission.py
and tests/test_admissions_recorded.py.)"""

from __future__ import annotations

import asyncio

import pytest

from conftest import REPO
from runner.grade.calibrate import calibrate
from runner.grade.grading import _cases_and_checks
from runner.grade.policy import CHECK_DECIDES, MIN_PRECISION
from runner.load import HELD_OUT, Bundle, bundle_cases, load_labelled

BUNDLE = Bundle(REPO)
CASES = bundle_cases(BUNDLE)
NAMES = [d.name for d in BUNDLE.skill_dirs()]


@pytest.fixture(scope="module")
def held_out() -> dict:
    labelled = load_labelled(BUNDLE.evals_dir / HELD_OUT, CASES)
    _, written = _cases_and_checks(BUNDLE, all_graders=True)  # every pattern check, admitted or not: the kind table is about them
    return asyncio.run(calibrate(labelled, NAMES, {k: [c for c in v if c.grader == "check"] for k, v in written.items()}, None))


def test_the_held_out_set_covers_every_case_three_ways(held_out):
    labelled = load_labelled(BUNDLE.evals_dir / HELD_OUT, CASES)
    assert held_out["answers"] == len(labelled) == 3 * len(CASES)
    assert {e.case.key for e in labelled} == {c.key for c in CASES}


def test_every_deciding_kind_is_shown_reliable_and_every_weak_one_is_not(held_out):
    for kind, figures in held_out["check_kinds"].items():
        if CHECK_DECIDES[kind] and figures["items"]:
            assert figures["precision"] >= MIN_PRECISION, f"{kind} decides but is right only {figures['precision']:.2f} of the time on the held-out set"
        if not CHECK_DECIDES[kind] and figures["items"] >= 10 and figures["precision"] is not None:
            # a kind left weak must really be weak, or the policy throws away good evidence
            assert figures["precision"] < MIN_PRECISION, f"{kind} is right {figures['precision']:.2f} of the time: let it decide"


def test_the_checks_meet_their_held_out_target(held_out):
    assert held_out["checks"]["kappa"] >= 0.8
    assert held_out["policy_checks_only"]["kappa"] >= 0.8 and held_out["policy_checks_only"]["fn"] == 0
