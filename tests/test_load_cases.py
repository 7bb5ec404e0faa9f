"""One loader for both evals formats, normalised into Case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import GOOD_BUNDLE, REPO, SHARED_FORMATS
from runner.load import AGENTSKILLS, FLAT, load_cases, read_evals
from runner.core import LoadError


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_flat_format_fields(tmp_path: Path):
    path = write(tmp_path / "e.json", [{"id": 7, "question": "Q?", "expected_skill": None, "expected_script": None, "ground_truth": "G", "expected_behavior": ["a", "b"], "should_trigger": False}])
    (case,) = load_cases(path)
    assert (case.id, case.prompt, case.expected_skill, case.ground_truth, case.format) == (7, "Q?", None, "G", FLAT)
    assert [b.text for b in case.behaviours] == ["a", "b"]
    assert case.should_trigger is False
    assert case.key == "e/7"


def test_agentskills_format_both_spellings_and_item_shapes(tmp_path: Path):
    data = {"skill_name": "demo", "evals": [
        {"id": 1, "prompt": "P1", "expected_output": "O1", "assertions": ["plain", {"name": "n", "text": "named"}]},
        {"id": "two", "prompt": "P2", "expectations": [{"text": "unnamed object"}], "should_trigger": False},
    ]}
    first, second = load_cases(write(tmp_path / "a.json", data))
    assert first.format == AGENTSKILLS and first.expected_skill == "demo" and first.ground_truth == "O1"
    assert [(b.name, b.text) for b in first.behaviours] == [(None, "plain"), ("n", "named")]
    assert second.id == "two" and second.expected_skill is None and second.ground_truth == ""
    assert [b.text for b in second.behaviours] == ["unnamed object"]


def test_owner_of_a_skill_file_is_the_skill():
    cases = load_cases(GOOD_BUNDLE / "skills/demo-skill/evals/evals.json")
    assert {c.owner for c in cases} == {"demo-skill"}
    assert cases[0].key == "demo-skill/demo-1"


def test_repository_evals_load():
    total = 0
    for path in sorted(REPO.glob("skills/*/evals/evals.json")) + sorted(REPO.glob("evals/*.json")):
        total += len(load_cases(path))
    assert total >= 18


@pytest.mark.skipif(not SHARED_FORMATS.is_dir(), reason="shared/formats is not beside this checkout")
@pytest.mark.parametrize("name", ["flat-format.evals.json", "agentskills-format.evals.json"])
def test_real_catalogue_files_load(name: str):
    evals = read_evals(SHARED_FORMATS / name)
    assert evals.findings == []
    assert evals.cases and all(c.prompt and c.behaviours for c in evals.cases)


def test_load_cases_raises_with_location(tmp_path: Path):
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"id": 1}\n]\n')
    with pytest.raises(LoadError) as info:
        load_cases(path)
    assert info.value.finding.rule == "evals/schema" and info.value.finding.line == 2
