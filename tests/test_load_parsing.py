"""Line tracking in JSON and YAML, which every finding depends on."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.core import LoadError
from runner.load import load_json, load_yaml, split_frontmatter


def test_json_lines_follow_key_paths():
    text = '[\n  {"id": 1,\n   "b": {\n     "c": 3}},\n  {"id": 2}\n]\n'
    located = load_json(Path("x.json"), text)
    assert located.line((0, "b", "c")) == 4
    assert located.line((1,)) == 5
    assert located.line((1, "id")) == 5
    assert located.line((9, "nope")) == 1  # unresolvable paths fall back to a usable line


def test_json_duplicate_keys_are_reported():
    located = load_json(Path("x.json"), '{\n "a": 1,\n "a": 2\n}')
    assert located.data == {"a": 2}
    assert located.duplicates == [("a", 1)]


def test_yaml_lines_and_offset():
    located = load_yaml(Path("x.yaml"), "a: 1\nb:\n  - x\n  - y: 2\n", line_offset=10)
    assert located.line(("b", 1, "y")) == 14


def test_yaml_tags_are_not_executed():
    with pytest.raises(LoadError) as info:
        load_yaml(Path("x.yaml"), "a: !!python/object/apply:os.system ['true']\n")
    assert info.value.finding.rule == "yaml/syntax"


def test_frontmatter_body_start_line():
    doc = split_frontmatter(Path("SKILL.md"), "---\nname: x\n---\nfirst body line\n")
    assert doc.frontmatter.data == {"name": "x"} and doc.body_start_line == 4
    assert doc.body.startswith("first body line")


def test_bom_is_tolerated(tmp_path: Path):
    path = tmp_path / "e.json"
    path.write_bytes("\ufeff[]".encode())
    assert load_json(path).data == []
