"""The bundle's own admissions hold up: every round recorded in evals/admissions.yaml is in
the repository, its figures are what the same graders give on it today (so the record is
the measurement, not a claim), and whatever decides today cleared today's bar there."""

from __future__ import annotations

import asyncio

import pytest

from conftest import REPO
from runner.grade.calibrate import calibrate
from runner.grade.grading import _Executor, _cases_and_checks
from runner.load import Bundle, load_admissions, load_labelled, meets_bar

BUNDLE = Bundle(REPO)
ADMISSIONS = load_admissions(BUNDLE.evals_dir)


def test_the_bundle_records_its_rounds():
    assert ADMISSIONS.rounds, "no round has measured the field and execute graders"


@pytest.mark.parametrize("name", sorted(ADMISSIONS.rounds))
def test_a_recorded_round_reproduces(name):
    entry = ADMISSIONS.rounds[name]
    folder = REPO / entry["answers"]
    assert folder.is_dir(), f"round {name}: {entry['answers']} is not in the repository"
    cases, every = _cases_and_checks(BUNDLE, all_graders=True)
    labelled = load_labelled(folder, cases)
    measured = {c.fingerprint(key) for key, found in every.items() for c in found if c.grader in ("field", "execute") and key in {e.case.key for e in labelled}}
    recorded = set(entry["admitted"]) | set(entry.get("not_admitted", []))
    # graders added since were not measured on this round; those measured then are unchanged or gone
    still = {fp for fp in recorded if fp in measured}
    executor = _Executor(every)
    try:
        result = asyncio.run(calibrate(labelled, [d.name for d in BUNDLE.skill_dirs()], {k: [c for c in v if c.fingerprint(k) in still] for k, v in every.items()}, None, observe=executor.observe))
    finally:
        executor.close()
    if still == recorded:
        for kind, figures in entry["figures"].items():
            now = result["graders"][kind]
            assert (now["passes"], now["fails"], now["pass_precision"], now["fail_precision"]) == (figures["passes"], figures["fails"], figures["pass_precision"], figures["fail_precision"]), f"{name}/{kind}: recorded {figures}, measured {now}"
    for fingerprint in ADMISSIONS.admitted & recorded:  # what decides today cleared today's bar
        assert any(meets_bar(f) for f in entry["figures"].values()), fingerprint
