"""Validation rules on targeted edits of the good fixture bundle, and on this repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from runner.core import UsageError
from runner.validate import RULES
from runner.validate import validate_path


def rules_of(path: Path) -> set[str]:
    return {f.rule for f in validate_path(path)}


def test_repository_bundle_is_clean():
    findings = validate_path(REPO)
    assert findings == [], [f.format(REPO) for f in findings]


def test_repository_skills_pass_the_reference_validator():
    from skills_ref.validator import validate as reference_validate

    for skill in sorted((REPO / "skills").iterdir()):
        assert reference_validate(skill) == [], skill.name


def test_each_skill_validates_alone():
    for skill in sorted((REPO / "skills").iterdir()):
        assert validate_path(skill) == []


def test_unlisted_skill_and_missing_files(good_bundle: Path):
    extra = good_bundle / "skills" / "extra-skill"
    extra.mkdir()
    found = rules_of(good_bundle)
    assert {"bundle/unlisted-skill", "skill/missing", "card/missing", "evals/missing"} <= found


def test_reference_validator_is_consulted_when_own_rules_pass(good_bundle: Path, monkeypatch):
    # A problem only the reference validator knows about must still surface.
    import skills_ref.validator

    monkeypatch.setattr(skills_ref.validator, "validate", lambda root: ["pretend spec rule broken"])
    findings = validate_path(good_bundle)
    assert [(f.rule, f.message) for f in findings] == [("skill/spec", "skills-ref: pretend spec rule broken")]


def test_inline_code_paths_inside_fences_are_not_checked(good_bundle: Path):
    skill_md = good_bundle / "skills/demo-skill/SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\n```bash\necho `scripts/not-here.py`\n```\n")
    assert validate_path(good_bundle) == []
    skill_md.write_text(skill_md.read_text() + "\nRun `scripts/not-here.py`.\n")
    assert rules_of(good_bundle) == {"skill/missing-file"}


def test_duplicate_claim_marker(good_bundle: Path):
    skill_md = good_bundle / "skills/demo-skill/SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\n<!-- claim: demo-enable -->\n")
    assert rules_of(good_bundle) == {"skill/duplicate-claim"}


def test_expected_skill_may_name_another_skill_of_the_bundle(repo_bundle: Path):
    evals = repo_bundle / "skills/nemo-mbridge-perf-megatron-fsdp/evals/evals.json"
    cases = json.loads(evals.read_text())
    assert any(c["expected_skill"] == "nemo-mbridge-perf-tp-dp-comm-overlap" for c in cases)
    assert validate_path(repo_bundle) == []


def test_unusable_paths_raise_usage_error(tmp_path: Path):
    with pytest.raises(UsageError, match="no such file"):
        validate_path(tmp_path / "absent")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="not a skill"):
        validate_path(tmp_path / "plain")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UsageError, match="cannot validate"):
        validate_path(tmp_path / "notes.txt")


def test_docs_document_every_rule():
    table = (REPO / "docs" / "validation.md").read_text()
    missing = [rule for rule in RULES if f"| `{rule}` | {RULES[rule]} |" not in table]
    assert missing == []


def test_bundle_without_card_or_skills(tmp_path: Path):
    (tmp_path / "skills").mkdir()
    assert rules_of(tmp_path) == {"bundle/card-missing", "bundle/empty"}


def test_unreadable_file_is_a_finding(good_bundle: Path, monkeypatch):
    # Root can read anything, so simulate the permission error the OS would raise.
    target = (good_bundle / "skills/demo-skill/SKILL.md").resolve()
    original = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.resolve() == target:
            raise PermissionError(13, "Permission denied")
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    findings = validate_path(good_bundle)
    assert [(f.rule, f.message) for f in findings] == [("file/unreadable", "cannot read file: Permission denied")]


# Rules covered here rather than by a file in tests/fixtures/bad/.
COVERED_BY_TESTS = {"file/too-large", "checks/schema", "checks/unknown-case", "checks/unknown-behaviour", "checks/regex", "checks/empty-match", "checks/anchored-forbidden", "yaml/alias", "calibration/labels", "bundle/card-missing", "bundle/empty", "bundle/unlisted-skill", "skill/missing", "card/missing", "evals/missing", "skill/spec", "skill/duplicate-claim", "file/unreadable",
                     # tests/test_framing.py and tests/test_census.py
                     "skill/unreviewed-sentence", "skill/stale-framing", "skill/framing-list", "skill/body-size",
                     "census/missing", "census/schema", "census/id", "census/draw", "census/answered-by"}


def test_every_rule_has_a_failing_fixture():
    import yaml

    from conftest import BAD

    corpus = {entry["rule"] for entry in yaml.safe_load((BAD / "EXPECTED.yaml").read_text()).values()}
    assert set(RULES) - corpus - COVERED_BY_TESTS == set()


@pytest.mark.parametrize(
    "where, text, rule, line",
    [
        ("skills/demo-skill/evals/checks.yaml", "demo-9:\n  - behaviour: x\n    must: [a]\n", "checks/unknown-case", 1),
        ("skills/demo-skill/evals/checks.yaml", "demo-1:\n  - behaviour: Sets something else.\n    must: [a]\n", "checks/unknown-behaviour", 2),
        ("skills/demo-skill/evals/checks.yaml", "demo-1:\n  - behaviour: Sets cfg.widget.enabled = True.\n    must: ['[a-']\n", "checks/regex", 3),
        ("skills/demo-skill/evals/checks.yaml", "demo-1:\n  - behaviour: Sets cfg.widget.enabled = True.\n    must: ['(?:enabled)?']\n", "checks/empty-match", 3),
        ("skills/demo-skill/evals/checks.yaml", "demo-1:\n  - behaviour: Sets cfg.widget.enabled = True.\n    must: [x]\n    must_not: ['^cfg\\.widget\\.enabled = False']\n", "checks/anchored-forbidden", 4),
        ("evals/routing.checks.yaml", "two:\n  - behaviour: Names cfg.widget.enabled.\n", "checks/schema", 2),
        ("evals/calibration/demo-skill/demo-1.bad-1.md", "---\nfails: [Sets nothing.]\ncorrect: false\n---\nx\n", "calibration/labels", 2),
    ],
)
def test_sidecar_and_calibration_findings(good_bundle: Path, where, text, rule, line):
    target = good_bundle / where
    target.parent.mkdir(parents=True, exist_ok=True)
    if rule == "calibration/labels":
        (target.parent / "demo-1.md").write_text("good answer\n")
    target.write_text(text)
    findings = validate_path(good_bundle)
    assert [(f.rule, f.line, Path(f.path).name) for f in findings] == [(rule, line, target.name)]


def test_a_huge_file_is_refused_before_it_is_read(good_bundle: Path):
    evals = good_bundle / "evals" / "routing.json"
    with open(evals, "ab") as handle:
        handle.truncate(17 * 1024 * 1024)
    findings = validate_path(good_bundle)
    assert [(f.rule, Path(f.path).name) for f in findings] == [("file/too-large", "routing.json")]


def review(bundle: Path, *sentences: str) -> None:
    """Add framing sentences to the demo skill's reviewed list."""
    import yaml

    framing = bundle / "skills" / "demo-skill" / "checks" / "framing.yaml"
    data = yaml.safe_load(framing.read_text())
    data["sentences"] += list(sentences)
    framing.write_text(yaml.safe_dump(data))


def test_facts_outside_claim_sections_are_found_in_references_too(good_bundle: Path):
    references = good_bundle / "skills" / "demo-skill" / "references"
    references.mkdir(exist_ok=True)
    (references / "more.md").write_text("# More\n\nAdvice only.\n\nRaises `ValueError` past 3 widgets.\n\n<!-- claim: demo-more -->\nHeld: `x`.\n")
    review(good_bundle, "# More", "Advice only.")
    findings = [f for f in validate_path(good_bundle) if f.rule != "skill/unreviewed-sentence"]
    assert [(f.rule, f.line, Path(f.path).name) for f in findings] == [("skill/unclaimed-fact", 5, "more.md"), ("skill/claim-unknown", 7, "more.md")]
    assert "'ValueError', '3' stated outside any claim section" in findings[0].message


def test_a_claim_marked_in_skill_md_and_a_reference_is_a_duplicate(good_bundle: Path):
    references = good_bundle / "skills" / "demo-skill" / "references"
    references.mkdir(exist_ok=True)
    (references / "again.md").write_text("# Again\n\n<!-- claim: demo-enable -->\nHeld.\n")
    review(good_bundle, "# Again")
    findings = validate_path(good_bundle)
    assert [(f.rule, f.line, Path(f.path).name) for f in findings] == [("skill/duplicate-claim", 3, "again.md")]
    assert "already stands at SKILL.md:" in findings[0].message
