"""The skill tools a model gets under the `skills` condition: what they serve, and what
they refuse (anything outside the named skill's folder, its evals/, huge or binary files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runner.providers import ToolCall
from runner.run.skill_tools import MAX_FILE_BYTES, SkillTools, catalogue, visible_files
from runner.load import Bundle, load_skill

FSDP = "nemo-mbridge-perf-megatron-fsdp"


@pytest.fixture
def tools(repo_bundle: Path) -> SkillTools:
    return SkillTools([load_skill(d) for d in Bundle(repo_bundle).skill_dirs()])


def call(tools: SkillTools, tool: str, **arguments) -> tuple[str, bool]:
    return tools.run(ToolCall("c1", tool, json.dumps(arguments)))


def test_catalogue_lists_name_and_description_without_paths(repo_bundle):
    skills = [load_skill(d) for d in Bundle(repo_bundle).skill_dirs()]
    text = catalogue(skills)
    assert text.startswith("<available_skills>") and text.count("<skill>") == 3
    assert f"<name>{FSDP}</name>" in text and str(repo_bundle) not in text


def test_activate_returns_the_body_and_lists_files_but_not_evals(tools, repo_bundle):
    content, error = call(tools, "activate_skill", name=FSDP)
    assert not error and "# Megatron FSDP in Megatron-Bridge" in content
    assert not content.startswith("---")  # frontmatter stays out
    assert "- scripts/fsdp_preflight.py" in content
    listing = content.split("Files in this skill")[1]
    assert "evals" not in listing and "- card.yaml" in listing
    assert tools.activated == [FSDP]


def test_read_serves_a_file_inside_the_skill(tools, repo_bundle):
    content, error = call(tools, "read_skill_file", name=FSDP, path="scripts/fsdp_preflight.py")
    assert not error and content == (repo_bundle / "skills" / FSDP / "scripts" / "fsdp_preflight.py").read_text()
    assert tools.files_read == [f"{FSDP}/scripts/fsdp_preflight.py"]


@pytest.mark.parametrize(
    "path, message",
    [
        ("../nemo-mbridge-perf-tp-dp-comm-overlap/SKILL.md", "outside the skill's folder"),
        ("scripts/../../../card.yaml", "outside the skill's folder"),
        ("scripts/../evals/evals.json", "not readable"),
        ("/etc/passwd", "relative to the skill's folder"),
        ("~/.ssh/id_rsa", "relative to the skill's folder"),
        ("evals/evals.json", "not readable"),
        ("./evals/../evals/evals.json", "not readable"),
        ("evals", "not readable"),
        ("scripts%2F..%2F..%2Fcard.yaml", "no such file"),
        ("scripts/fsdp_preflight.py\x00.txt", "not a usable file name"),
        ("a" * 600, "not a usable file name"),
        ("scripts", "not a regular file"),
        ("", "non-empty string"),
        ("missing.md", "no such file"),
    ],
)
def test_read_refuses(tools, path, message):
    content, error = call(tools, "read_skill_file", name=FSDP, path=path)
    assert error and message in content
    assert tools.files_read == []


def test_read_refuses_symlinks_out_and_loops_big_and_binary_files(tools, repo_bundle, tmp_path):
    root = repo_bundle / "skills" / FSDP
    secret = tmp_path / "secret.txt"
    secret.write_text("the key")
    os.symlink(secret, root / "link.txt")
    os.symlink(root / "loop-b", root / "loop-a")
    os.symlink(root / "loop-a", root / "loop-b")
    (root / "big.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    (root / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    assert call(tools, "read_skill_file", name=FSDP, path="link.txt") == ("error: link.txt: outside the skill's folder", True)
    assert "no such file" in call(tools, "read_skill_file", name=FSDP, path="loop-a")[0]
    assert "files over" in call(tools, "read_skill_file", name=FSDP, path="big.md")[0]
    assert "not a UTF-8 text file" in call(tools, "read_skill_file", name=FSDP, path="blob.bin")[0]
    listing = visible_files(load_skill(root))
    assert "link.txt" not in listing and "big.md" in listing


def test_bad_calls_are_tool_errors(tools):
    assert call(tools, "activate_skill", name="nope") == (f"error: no skill named 'nope'; available: {FSDP}, nemo-mbridge-perf-moe-ep-comm-overlap, nemo-mbridge-perf-tp-dp-comm-overlap", True)
    assert call(tools, "activate_skill")[1]
    assert call(tools, "run_shell", cmd="ls") == ("error: unknown tool 'run_shell'", True)
    assert tools.run(ToolCall("c", "activate_skill", "{not json")) == ("error: arguments are not a JSON object", True)
    assert tools.run(ToolCall("c", "activate_skill", "[1, 2]")) == ("error: arguments are not a JSON object", True)
    assert tools.activated == []


def test_tools_not_offered_are_unknown(repo_bundle):
    tools = SkillTools([load_skill(d) for d in Bundle(repo_bundle).skill_dirs()], offered=[])
    assert call(tools, "activate_skill", name=FSDP) == ("error: unknown tool 'activate_skill'", True)
    assert tools.activated == []
