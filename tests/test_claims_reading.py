"""Checks read the values they test out of the skill's sentences; after a check, whatever it
did not read is reported (runner/claims/registry.py). No Megatron import here."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.claims.registry import ClaimFailed, Context, Template, arithmetic, assignment, call, literal, threshold
from runner.claims.sections import fact_tokens, read_sections


def context(tmp_path: Path, body: str, claim_id: str = "toy") -> Context:
    skill_md = tmp_path / "SKILL.md"
    skill_md.write_text(f"---\nname: toy\n---\n\n# Toy\n\n<!-- claim: {claim_id} -->\n{body}\n", "utf-8")
    sections = read_sections(skill_md)
    return Context("toy", tmp_path, sections[claim_id], sections)


def test_read_returns_typed_values_and_the_sentence_is_fully_read(tmp_path: Path):
    ctx = context(tmp_path, 'With PP > 1, Bridge sets `overlap_p2p_comm=True`\nand raises `ValueError` with\n"bad layout".')
    r = ctx.read('With PP {op:>=|>} {pp:int}, Bridge sets `{setting:code}` and raises `{exc:exc}` with "{message:quote}".')
    assert (r.op, r.pp, r.setting, r.exc, r.message) == (">", 1, "overlap_p2p_comm=True", ValueError, "bad layout")
    assert assignment(r.setting) == ("overlap_p2p_comm", True)
    assert ctx.unread() == []


def test_a_value_matched_as_literal_text_is_reported(tmp_path: Path):
    ctx = context(tmp_path, "The bucket holds `134217728` parameters.")
    ctx.says("The bucket holds `134217728` parameters.")  # pinned, not read as a value
    assert ctx.unread() == ["its check reads '134217728' as literal text, not as a value it compares"]


def test_prose_the_check_never_matched_is_reported(tmp_path: Path):
    ctx = context(tmp_path, "First sentence. Second sentence is unread.")
    ctx.says("First sentence.")
    assert ctx.unread() == ["its check does not read 'Second sentence is unread.'"]


def test_a_code_block_never_run_is_reported(tmp_path: Path):
    ctx = context(tmp_path, "Run this:\n\n```python\ncfg.a = 1\n```\n")
    ctx.says("Run this:")
    assert ctx.unread() == ["its check never runs code block #1"]
    ctx.code(0)
    assert ctx.unread() == []


def test_read_fails_when_the_sentence_changed_or_repeats(tmp_path: Path):
    ctx = context(tmp_path, "It is `on`. It is `on`.")
    with pytest.raises(ClaimFailed, match="matches 2 places"):
        ctx.read("It is `{state:code}`.")
    with pytest.raises(ClaimFailed, match="no longer says"):
        ctx.read("It was `{state:code}`.")


def test_template_rejects_unknown_kinds_and_dict_method_names():
    with pytest.raises(ValueError, match="unknown placeholder kind"):
        Template.compile("{x:float}")
    with pytest.raises(ValueError, match="shadows a dict method"):
        Template.compile("`{update:code}`")


def test_exception_names_must_be_builtin(tmp_path: Path):
    ctx = context(tmp_path, "It raises `MadeUpError`.")
    with pytest.raises(ClaimFailed, match="no built-in exception"):
        ctx.read("It raises `{exc:exc}`.")


def test_parsers_never_execute_and_reject_what_is_not_their_shape():
    assert literal('"bf16_mixed"') == "bf16_mixed" and arithmetic("128 * 1024 * 1024") == 134217728
    assert call("CommOverlapConfig(tp_comm_overlap=False, bucket_size=1234)") == ("CommOverlapConfig", {"tp_comm_overlap": False, "bucket_size": 1234})
    for bad in ("__import__('os').system('true')", "open('x')"):
        with pytest.raises(ClaimFailed):
            literal(bad)
        with pytest.raises(ClaimFailed):
            arithmetic(bad)
    with pytest.raises(ClaimFailed, match="keyword value that is not a literal"):
        call("CommOverlapConfig(bucket_size=size())")
    with pytest.raises(ClaimFailed, match="assignment"):
        assignment("not an assignment")
    assert threshold(">", 1) == (2, 1) and threshold(">=", 2) == (2, 1) and threshold("<", 3) == (2, 3)
    with pytest.raises(ClaimFailed):
        threshold("~", 1)


def test_fact_tokens_count_content_of_backticks_and_quotes():
    tokens = [t.text for t in fact_tokens('Set `cfg.a = 4` to "fix it": TP >= 2 raises ValueError, True or None; v0.6.2 h100.')]
    assert tokens == ["cfg.a = 4", "fix it", "2", "ValueError", "True", "None"]
