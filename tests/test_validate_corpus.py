"""The bad-input corpus: every malformed file gets its one-line finding, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import BAD, GOOD_BUNDLE, place_bad_file
from runner.validate import RULES
from runner.validate import validate_path

EXPECTED = yaml.safe_load((BAD / "EXPECTED.yaml").read_text())
LINE_FORMAT = re.compile(r"^[^\n]+:\d+: [a-z]+/[a-z-]+: [^\n]+$")


def test_corpus_is_large_and_fully_described():
    files = sorted(p.name for p in BAD.iterdir() if p.name != "EXPECTED.yaml")
    assert len(files) >= 25
    assert sorted(EXPECTED) == files


def test_good_bundle_is_clean():
    assert validate_path(GOOD_BUNDLE) == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_gets_its_finding(name: str, tmp_path: Path):
    expected = EXPECTED[name]
    findings = validate_path(place_bad_file(name, tmp_path))
    got = [(f.rule, f.line, Path(f.path).name) for f in findings]
    assert (expected["rule"], expected["line"], expected["file"]) in got, got
    for finding in findings:
        assert finding.rule in RULES, finding
        assert LINE_FORMAT.match(finding.format(tmp_path)), finding.format(tmp_path)
