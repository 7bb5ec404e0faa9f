"""Reading claim sections out of SKILL.md (light: no megatron)."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO
import pytest

from runner.claims.sections import DuplicateClaim, read_sections, read_skill_sections


def test_sections_stop_at_next_marker_or_heading(tmp_path: Path):
    skill_md = tmp_path / "SKILL.md"
    skill_md.write_text(
        "---\nname: x\n---\n\n<!-- claim: first -->\nSay `a`.\n\n```python\ncfg.a = 1\n```\n"
        "<!-- claim: second -->\nSecond text\nwraps here.\n\n## Heading\nNot part of second.\n"
        "```\n<!-- claim: inside-fence -->\n```\n"
    )
    sections = read_sections(skill_md)
    assert list(sections) == ["first", "second"]
    assert sections["first"].line == 5
    assert sections["first"].code_blocks == ["cfg.a = 1\n"]
    assert sections["second"].text == "Second text wraps here."


def test_every_card_claim_has_a_section_in_both_skills():
    for skill in sorted((REPO / "skills").iterdir()):
        card = yaml.safe_load((skill / "card.yaml").read_text())
        sections = read_skill_sections(skill)  # SKILL.md, then references/*.md
        ids = [c["id"] for c in card["claims"]]
        assert len(ids) == len(set(ids)) and set(ids) == set(sections), skill.name
        assert len(sections) >= 8, skill.name


def test_skill_sections_join_references_and_refuse_a_claim_marked_twice(tmp_path: Path):
    (tmp_path / "references").mkdir()
    (tmp_path / "SKILL.md").write_text("---\nname: x\n---\n\n<!-- claim: a -->\nOne.\n")
    (tmp_path / "references" / "more.md").write_text("# More\n\n<!-- claim: b -->\nTwo.\n")
    sections = read_skill_sections(tmp_path)
    assert list(sections) == ["a", "b"] and sections["b"].path.name == "more.md"
    replaced = read_skill_sections(tmp_path, {tmp_path / "references" / "more.md": "# More\n\n<!-- claim: c -->\nThree.\n"})
    assert list(replaced) == ["a", "c"]
    (tmp_path / "references" / "again.md").write_text("# Again\n\n<!-- claim: a -->\nOnce more.\n")
    with pytest.raises(DuplicateClaim, match="again.md:3: claim a is also marked in SKILL.md"):
        read_skill_sections(tmp_path)
