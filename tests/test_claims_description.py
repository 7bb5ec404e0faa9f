"""The front-matter description as a claim section (metadata.description-claim) and the
word-level mutation operators: a description is read and mutated like any section, and a
changed word or a cut quote in it fails its check against the real library."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, copy_bundle
from runner.claims.mutate import generate
from runner.claims.run import FAILED, PASSED, load_checks, run_checks
from runner.claims.sections import DuplicateClaim, description_lines, description_section, read_skill_sections
from runner.load import Bundle

FSDP = "nemo-mbridge-perf-megatron-fsdp"

TEXT = """---
name: toy
description: >-
  Use when testing. It fails "with this message" before the run.
metadata:
  description-claim: toy-description
---

# Toy
"""


def test_the_description_is_a_section_when_the_front_matter_names_its_claim():
    claim, first, last = description_lines(TEXT)
    assert (claim, first, last) == ("toy-description", 3, 4)
    section = description_section(Path("SKILL.md"), TEXT)
    assert section.claim_id == "toy-description" and section.text == 'Use when testing. It fails "with this message" before the run.'
    assert description_lines(TEXT.replace("  description-claim: toy-description\n", "")) is None


def test_description_mutants_include_word_level_operators():
    by = {(m.claim, m.operator, m.was, m.now) for m in generate("toy", TEXT)}
    assert ("toy-description", "word", "before", "after") in by
    assert ("toy-description", "word", "fails", "passes") in by
    assert ("toy-description", "message", "with this message", "with this") in by


def test_two_named_objects_of_a_sentence_trade_places():
    text = "# T\n\n<!-- claim: c -->\nSet `a.b` before `c.d` is read.\n"
    by = {(m.operator, m.was, m.now) for m in generate("s", text)}
    assert ("swap", "a.b` before `c.d", "c.d` before `a.b") in by
    assert ("word", "before", "after") in by


def test_a_marker_with_the_description_claim_id_is_a_duplicate(tmp_path: Path):
    skill = tmp_path / "toy"
    skill.mkdir()
    (skill / "SKILL.md").write_text(TEXT + "\n<!-- claim: toy-description -->\nAgain.\n", "utf-8")
    with pytest.raises(DuplicateClaim, match="names the description"):
        read_skill_sections(skill)


def test_every_skill_of_the_bundle_checks_its_description():
    for skill in sorted((REPO / "skills").iterdir()):
        sections = read_skill_sections(skill)
        assert any(s.line < 25 and s.path.name == "SKILL.md" and s.claim_id.endswith("-description") for s in sections.values()), skill.name


@pytest.fixture(scope="module")
def checks():
    from runner.claims.plugins import skill_roots

    return load_checks(skill_roots(REPO))


@pytest.mark.parametrize(
    "old, new, because",
    [
        ("moves from DDP\n  to FSDP", "moves from FSDP\n  to DDP", "no longer says"),
        ('"use_tp_pp_dp_mapping is not supported with Megatron FSDP"', '"use_tp_pp_dp_mapping is not supported with Megatron"', "raise no message"),
        ("sees optim_grads run out", "sees optim_grads_params run out", "memory section is not about optim_grads_params"),
        ("Not for PyTorch FSDP2 (use_torch_fsdp2)", "Not for PyTorch FSDP2 (use_megatron_fsdp)", "is not the PyTorch FSDP2 switch"),
    ],
)
def test_a_changed_description_fails_its_check(checks, tmp_path: Path, old: str, new: str, because: str):
    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    text = skill_md.read_text("utf-8")
    assert text.count(old) == 1, old
    skill_md.write_text(text.replace(old, new), "utf-8")
    result = {r.claim: r for r in run_checks(Bundle(bundle), skills=[FSDP], pattern="fsdp-description")}["fsdp-description"]
    assert result.status == FAILED and because in result.message, result.message


def test_the_descriptions_pass(checks):
    results = {r.claim: r for r in run_checks(Bundle(REPO), pattern="*-description")}
    assert {c for c, r in results.items() if r.status == PASSED} == {"fsdp-description", "moe-description", "overlap-description"}
