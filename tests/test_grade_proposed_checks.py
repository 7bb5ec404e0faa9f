"""Proposed checks (skills/*/evals/checks.proposed.yaml) are kept well-formed, but the grader
never reads them: a case whose checks are only proposed is graded without them."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO
from runner.load import Bundle, bundle_cases
from runner.load.checks import read_checks

SKILLS = sorted(p for p in (REPO / "skills").iterdir() if (p / "evals" / "checks.proposed.yaml").is_file())


def test_proposed_checks_parse_against_their_cases_and_are_not_admitted():
    assert SKILLS, "no proposed checks file"
    cases = bundle_cases(Bundle(REPO))
    for skill in SKILLS:
        own = [c for c in cases if c.key.startswith(f"{skill.name}/")]
        proposed, findings = read_checks(skill / "evals" / "checks.proposed.yaml", own)
        assert findings == [] and proposed, skill.name
        sidecar = skill / "evals" / "checks.yaml"  # a skill may have only proposed checks
        admitted = (yaml.safe_load(sidecar.read_text()) or {}) if sidecar.is_file() else {}
        # a pattern check in checks.yaml is admitted; field and execute entries beside a
        # proposed check are admitted by a held-out round instead (runner/load/admissions.py)
        patterns = {(case, entry["behaviour"]) for case, entries in admitted.items() for entry in entries if "must" in entry or "must_not" in entry}
        both = {(key.split("/", 1)[1], c.behaviour) for key, found in proposed.items() for c in found} & patterns
        assert not both, f"{skill.name}: a behaviour has an admitted and a proposed pattern check: {sorted(both)[:2]}"


def test_the_grader_does_not_read_proposed_checks(tmp_path: Path):
    from runner.load.checks import sidecar_for

    for skill in SKILLS:
        assert sidecar_for(skill / "evals" / "evals.json").name == "checks.yaml"
