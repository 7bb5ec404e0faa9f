"""Outside claim sections a skill holds only reviewed framing sentences: validate reports a
changed or added sentence there, a listed sentence that is gone, a missing list, and a
SKILL.md body over the size budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, copy_bundle
from runner.claims.framing import framing_sentences, load_framing

FSDP = "nemo-mbridge-perf-megatron-fsdp"


def test_sentences_outside_claims_are_headings_list_items_and_sentences():
    text = "---\nname: x\n---\n# Title\n\nFirst one. Second one.\n- item one\n- item two\n\n<!-- claim: a-b -->\nInside `x`. Not framing.\n\n## Next\n```\ncode. Here.\n```\n"
    got = [s for _, s in framing_sentences(text)]
    assert got == ["# Title", "First one.", "Second one.", "- item one", "- item two", "## Next"]


def test_every_skill_with_claims_lists_its_framing_and_nothing_else():
    for skill in sorted((REPO / "skills").iterdir()):
        reviewed = load_framing(skill)
        assert reviewed.sentences
        documents = [skill / "SKILL.md", *sorted((skill / "references").glob("*.md"))]
        found = {s for d in documents if d.is_file() for _, s in framing_sentences(d.read_text("utf-8"))}
        assert found == set(reviewed.sentences), skill.name


def validate(bundle: Path, skill: str = FSDP) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", "validate", str(bundle / "skills" / skill)], capture_output=True, text=True, timeout=300)


def test_a_changed_word_outside_claim_sections_is_reported_with_its_line(tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    text = skill_md.read_text("utf-8")
    line, heading = next((n, s) for n, s in framing_sentences(text) if s.startswith("## "))
    skill_md.write_text(text.replace(heading, heading + " without VPP", 1), "utf-8")
    done = validate(bundle)
    assert done.returncode == 1
    assert f"SKILL.md:{line}: skill/unreviewed-sentence" in done.stdout
    assert "skill/stale-framing" in done.stdout  # the reviewed heading no longer occurs
    assert "Traceback" not in done.stderr


def test_a_missing_or_unsigned_list_is_one_line(tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    framing = bundle / "skills" / FSDP / "checks" / "framing.yaml"
    data = yaml.safe_load(framing.read_text("utf-8"))
    framing.write_text(yaml.safe_dump({"sentences": data["sentences"]}), "utf-8")
    done = validate(bundle)
    assert done.returncode == 1 and "skill/framing-list" in done.stdout and "reviewed" in done.stdout
    framing.unlink()
    done = validate(bundle)
    assert done.returncode == 1 and "checks/framing.yaml:1: skill/framing-list" in done.stdout and "Traceback" not in done.stderr


def test_a_skill_md_body_over_about_5000_tokens_is_reported(tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    skill_md = bundle / "skills" / FSDP / "SKILL.md"
    assert len(skill_md.read_text("utf-8")) // 4 < 5000
    skill_md.write_text(skill_md.read_text("utf-8") + "\n<!-- claim: fsdp-release -->\n" + "word " * 5000, "utf-8")
    done = validate(bundle)
    assert "skill/body-size" in done.stdout
