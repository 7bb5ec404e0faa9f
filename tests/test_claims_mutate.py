"""`mbskills mutate`: mutants generated from the text, killed by the checks that read it.

The unit tests use a toy skill whose checks compare with plain Python (no Megatron
import); the last test runs the real command on the bundle's skills, the gate CI holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.claims import mutate as mutate_module
from runner.claims.mutate import generate, load_allow_list, mutate_bundle
from runner.claims.plugins import load_checks_of
from runner.claims.registry import CHECKS, forget_skill
from runner.core import UsageError
from runner.load import Bundle

REPO = Path(__file__).resolve().parents[1]
TOY = "toy-skill"

SKILL_MD = """---
name: toy-skill
description: A toy. Use when testing.
---

# Toy

Framing outside any claim.

<!-- claim: toy-answer -->
The answer is 42, and it is `True` that it is not 41. Read it twice.

<!-- claim: toy-loose -->
The loose value is 7.
"""

CARD = """name: toy-skill
claims:
  - id: toy-answer
    statement: The answer is 42.
  - id: toy-loose
    statement: A value nobody compares.
"""


# The toy skill's own checks, in its checks/ folder as any skill carries them.
TOY_CHECKS = """from runner.claims.kit import claim


@claim("toy-answer")
def answer(ctx) -> None:
    r = ctx.read("The answer is {n:int}, and it is `{flag:code}` that it is not {m:int}.")
    ctx.expect(r.n == 6 * 7, f"the answer is 42, not {r.n}")
    ctx.expect(r.flag == str(r.m != r.n) and r.m == r.n - 1, f"it is {r.flag} that 42 is not {r.m}")
    ctx.says("Read it twice.")


@claim("toy-loose")
def loose(ctx) -> None:
    ctx.read("The loose value is {n:int}.")  # read, never compared: its mutants survive
"""


@pytest.fixture()
def toy_bundle(tmp_path: Path, monkeypatch):
    root = tmp_path / "bundle"
    skill = root / "skills" / TOY
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD, "utf-8")
    (skill / "card.yaml").write_text(CARD, "utf-8")
    (root / "card.yaml").write_text("skills: [toy-skill]\n", "utf-8")
    (skill / "checks").mkdir()
    (skill / "checks" / "toy.py").write_text(TOY_CHECKS, "utf-8")
    # the plug-ins without Megatron: a toy needs no Bridge
    monkeypatch.setattr("runner.claims.run.load_checks", lambda roots=(): (load_checks_of(list(roots)), CHECKS)[1])
    yield root
    forget_skill(TOY)


def test_generate_covers_every_operator_and_only_claim_sections():
    mutations = generate(TOY, SKILL_MD)
    assert {m.operator for m in mutations} == {"number", "boolean", "negation", "sentence"}
    assert all(m.claim in ("toy-answer", "toy-loose") for m in mutations)
    assert not any("Framing" in m.was for m in mutations)
    by = {(m.operator, m.was, m.now) for m in mutations}
    assert {("number", "42", "43"), ("boolean", "True", "False"), ("negation", "not ", ""), ("number", "7", "8")} <= by
    sentences = [m.was for m in mutations if m.operator == "sentence"]
    assert sentences == ["The answer is 42, and it is `True` that it is not 41.", "Read it twice.", "The loose value is 7."]
    text = mutations[0].apply(SKILL_MD)
    assert text != SKILL_MD and len(text.split("\n")) == len(SKILL_MD.split("\n"))


def test_generate_handles_messages_exceptions_comparisons_and_names():
    text = '# T\n\n<!-- claim: c -->\nWith TP >= 2 it raises `ValueError`: "bad layout here" from `a.b` or `c.d`.\n'
    by = {(m.operator, m.was, m.now) for m in generate("s", text)}
    assert ("comparison", ">=", ">") in by and ("exception", "ValueError", "AssertionError") in by
    assert ("message", "bad layout here", "bad layout") in by and ("name", "a.b", "c.d") in by and ("name", "c.d", "ValueError") in by


def test_mutate_kills_what_is_compared_and_lists_what_survives(toy_bundle: Path):
    run = mutate_bundle(Bundle(toy_bundle), min_kill=0.95)
    score = run.scores[0]
    survived = {(o.mutation.claim, o.mutation.operator, o.mutation.was) for o in score.survivors}
    assert survived == {("toy-loose", "number", "7")}
    assert score.total == score.killed + 1 and score.contradicted >= 3 and score.unrecognised >= 2
    assert not run.ok  # 1 of 7 survived: below 95%
    out = toy_bundle / "out"
    payload = json.loads(mutate_module.write_report(run, out).read_text())
    assert payload["skills"][0]["survived"] == 1 and payload["ok"] is False
    assert "survived: SKILL.md:14 [toy-loose] number: '7' -> '8'" in mutate_module.format_report(run)


def test_allow_list_marks_equivalent_mutants_and_flags_stale_entries(toy_bundle: Path, tmp_path: Path):
    allow = tmp_path / "allow.yaml"
    entry = '- {skill: toy-skill, claim: toy-loose, operator: number, was: "7", now: "8", near: "loose value", reason: any value is as loose}\n'
    allow.write_text(entry, "utf-8")
    run = mutate_bundle(Bundle(toy_bundle), allow_path=allow)
    assert run.ok and run.scores[0].equivalent == 1 and run.scores[0].rate == 1.0
    allow.write_text(entry + entry.replace('"7", now: "8"', '"42", now: "43"'), "utf-8")
    run = mutate_bundle(Bundle(toy_bundle), allow_path=allow)
    assert not run.ok and len(run.stale) == 1 and ":2: toy-skill/toy-loose number '42' -> '43' matches no surviving mutant" in run.stale[0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{a: 1}\n", "expected a list"),
        ("- just a string\n", "entry 0 is not a mapping"),
        ("- {skill: s, claim: c}\n", "entry 0 needs operator, was, now, near, reason"),
        ('- {skill: s, claim: c, operator: o, was: "1", now: "2", near: n, reason: "  "}\n', "gives no reason"),
    ],
)
def test_allow_list_errors_name_the_file_and_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "allow.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(UsageError, match=message) as caught:
        load_allow_list(path)
    assert str(caught.value).startswith(f"{path}:1: ")


def test_a_failing_claim_stops_mutation_before_it_starts(toy_bundle: Path):
    skill_md = toy_bundle / "skills" / TOY / "SKILL.md"
    skill_md.write_text(SKILL_MD.replace("42", "43"), "utf-8")
    with pytest.raises(UsageError, match="toy-answer is failed"):
        mutate_bundle(Bundle(toy_bundle))


def test_the_bundle_skills_kill_at_least_95_percent(tmp_path: Path):
    # The gate CI holds: every mutant of every skill, the real checks, one process.
    out = tmp_path / "mutate"
    result = subprocess.run([sys.executable, "-m", "runner.cli", "mutate", "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    payload = json.loads((out / "mutate.json").read_text())
    assert {s["skill"] for s in payload["skills"]} == {p.name for p in (REPO / "skills").iterdir() if (p / "SKILL.md").is_file()}
    assert all(s["rate"] >= 0.95 and s["total"] > 100 for s in payload["skills"])


def test_claims_in_references_are_checked_and_mutated(toy_bundle: Path, monkeypatch):
    from runner.claims.run import run_checks

    skill = toy_bundle / "skills" / TOY
    (skill / "references").mkdir()
    (skill / "references" / "extra.md").write_text("# Extra\n\n<!-- claim: toy-ref -->\nThe extra value is 5.\n", "utf-8")
    (skill / "card.yaml").write_text(CARD + "  - id: toy-ref\n    statement: The extra value is 5.\n", "utf-8")

    (skill / "checks" / "extra.py").write_text(
        "from runner.claims.kit import claim\n\n\n"
        "@claim('toy-ref')\n"
        "def extra(ctx):\n"
        "    ctx.expect(ctx.read('The extra value is {n:int}.').n == 5, 'the extra value is 5')\n",
        "utf-8",
    )
    assert {r.claim: r.status for r in run_checks(Bundle(toy_bundle))}["toy-ref"] == "passed"
    run = mutate_bundle(Bundle(toy_bundle))
    ref = [o for o in run.outcomes if o.mutation.file == "references/extra.md"]
    assert {(o.mutation.operator, o.mutation.was, o.killed) for o in ref} == {("number", "5", True), ("sentence", "The extra value is 5.", True)}
