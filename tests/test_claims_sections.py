"""Reading claim sections out of SKILL.md (light: no megatron)."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO
from runner.claims.sections import read_sections


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
        sections = read_sections(skill / "SKILL.md")
        assert [c["id"] for c in card["claims"]] == list(sections), skill.name
        assert len(sections) >= 8, skill.name
