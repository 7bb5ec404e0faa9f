"""The A/A and placebo arms: `NAME@2` repeats a condition with its own requests and cache
key, and the report gives its flip rate; `placebo` and `inline-placebo` add a decoy skill as
long as the real ones, on a topic no case is about, and the report separates the content of
a skill from more context."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO
from runner.cli import main
from runner.load import Bundle, bundle_cases, load_skill
from runner.providers import ToolCall
from runner.providers.cache import request_key
from runner.report.aggregate import OTHER, routing
from runner.run.conditions import base_condition, is_replica, setup
from runner.run.placebo import DECOY, decoy_skill, decoy_text
from runner.run.skill_tools import SkillTools

CALIBRATION = REPO / "evals" / "calibration"
SKILLS = [load_skill(p) for p in Bundle(REPO).skill_dirs()]
CASES = bundle_cases(Bundle(REPO))


@pytest.mark.parametrize(("name", "base"), [("baseline", "baseline"), ("baseline@2", "baseline"), ("skills@10", "skills"), ("inline-placebo@3", "inline-placebo"), ("baseline@1", None), ("baseline@02", None), ("nope@2", None), ("baseline@x", None)])
def test_an_arm_names_a_condition_and_a_copy_from_two(name, base):
    assert base_condition(name) == base
    assert is_replica(name) == (base is not None and "@" in name)


def test_a_second_arm_has_its_own_cache_key_and_sees_the_same_prompt():
    case = CASES[0]
    first, second = setup("baseline", case, SKILLS), setup("baseline@2", case, SKILLS)
    assert first == second
    identity = {"provider": "openai", "model": "m"}
    one = request_key(identity, first.system, [{"role": "user", "content": "q"}], first.tools, 0)
    assert one == request_key(identity, first.system, [{"role": "user", "content": "q"}], first.tools, 0, None)
    assert one != request_key(identity, first.system, [{"role": "user", "content": "q"}], first.tools, 0, "baseline@2")


@pytest.mark.parametrize(("conditions", "message"), [("baseline,baseline@1", "unknown baseline@1"), ("baseline,baseline", "baseline given twice")])
def test_bad_arms_are_refused_in_one_line(tmp_path, capsys, conditions, message):
    code = main(["eval", "--bundle", str(REPO), "--model", f"replay:{CALIBRATION}", "--conditions", conditions, "--out", str(tmp_path / "run"), "--progress", "plain"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_the_flip_rate_of_an_a_a_arm_is_reported(tmp_path, capsys, admitted_repo):  # graded with every grader admitted
    run = tmp_path / "run"
    # the second baseline arm answers with the known-good set: every counted case flips
    spec = f"replay:{CALIBRATION}?baseline=bad-1&baseline@2=bad-1"
    assert main(["eval", "--bundle", str(admitted_repo), "--model", spec, "--conditions", "baseline,baseline@2", "--case", "nemo-mbridge-perf-tp-dp-comm-overlap/*", "--out", str(run), "--progress", "plain"]) == 0
    assert main(["grade", str(run), "--min-cases", "1"]) == 0
    noise = json.loads((run / "report.json").read_text())["overall"]["noise"]["baseline@2"]
    assert noise["of"] == "baseline" and noise["pairs"] >= 1 and noise["flips"] == 0 and noise["rate"] == 0  # the same answers: no flip
    flipped = tmp_path / "flipped"
    owner = "nemo-mbridge-perf-tp-dp-comm-overlap"
    answers = tmp_path / "answers" / owner
    answers.mkdir(parents=True)
    for path in (CALIBRATION / owner).glob("*.md"):
        answers.joinpath(path.name).write_bytes(path.read_bytes())
        if path.name.count(".") == 1:  # the known-good answer, under a variant name of its own
            answers.joinpath(path.stem + ".good.md").write_bytes(path.read_bytes())
    spec = f"replay:{tmp_path / 'answers'}?baseline=bad-1&baseline@2=good"  # the second arm answers with the known-good set
    assert main(["eval", "--bundle", str(admitted_repo), "--model", spec, "--conditions", "baseline,baseline@2", "--case", "nemo-mbridge-perf-tp-dp-comm-overlap/*", "--out", str(flipped), "--progress", "plain"]) == 0
    capsys.readouterr()
    assert main(["grade", str(flipped), "--min-cases", "1"]) == 0
    report = json.loads((flipped / "report.json").read_text())
    noise = report["overall"]["noise"]["baseline@2"]
    assert noise["flips"] == noise["pairs"] >= 1 and noise["rate"] == 1.0
    assert re.search(r"A/A arm baseline@2: \d+ of \d+ records \(100%\)", (flipped / "BENCHMARK.md").read_text())


def test_the_decoy_is_as_long_as_the_skills_and_about_nothing_they_cover():
    decoy = decoy_skill(SKILLS)
    mean_body = sum(len(s.body) for s in SKILLS) / len(SKILLS)
    assert decoy.name == DECOY and abs(len(decoy.body) - mean_body) < 40
    assert decoy_skill(SKILLS).body == decoy.body and decoy_text(900) == decoy_text(900) and len(decoy_text(900)) <= 900
    words = set(re.findall(r"[a-z]+", (decoy.body + decoy.description).lower()))
    domain = {"megatron", "bridge", "fsdp", "overlap", "parallel", "tensor", "expert", "experts", "nccl", "gpu", "gpus", "checkpoint", "optimizer", "gradient", "pipeline", "dispatcher", "transformer", "training", "model", "config", "skill", "communication"}
    assert not words & domain, words & domain
    for case in CASES:  # no case's question names anything the decoy talks about
        assert not re.search(r"\b(?:aquarium|tank|fish|algae)\b", case.prompt.lower()), case.key


def test_placebo_lists_the_decoy_beside_the_skills_and_serves_it():
    case = next(c for c in CASES if c.expected_skill)
    plan = setup("placebo", case, SKILLS)
    assert plan.system.count("<skill>") == len(SKILLS) + 1 and f"<name>{DECOY}</name>" in plan.system
    tools = SkillTools([*SKILLS, *plan.extra], offered=[t.name for t in plan.tools])
    text, failed = tools.run(ToolCall("c1", "activate_skill", json.dumps({"name": DECOY})))
    assert not failed and decoy_skill(SKILLS).body.strip()[:200] in text


def test_inline_placebo_puts_an_equally_long_decoy_where_inline_puts_the_skill():
    case = next(c for c in CASES if c.expected_skill)
    skill = next(s for s in SKILLS if s.name == case.expected_skill)
    inline, placebo = setup("inline", case, SKILLS), setup("inline-placebo", case, SKILLS)
    assert skill.body.strip() in inline.system and skill.body.strip() not in placebo.system
    assert abs(len(placebo.system) - len(inline.system)) < 60 and placebo.inlined == DECOY
    none = next(c for c in CASES if not c.expected_skill)
    assert setup("inline-placebo", none, SKILLS) == setup("baseline", none, SKILLS)


def test_the_report_separates_content_from_context(tmp_path, capsys, admitted_repo):  # graded with every grader admitted
    run = tmp_path / "run"
    spec = f"replay:{CALIBRATION}?baseline=bad-1&inline-placebo=bad-1"
    assert main(["eval", "--bundle", str(admitted_repo), "--model", spec, "--conditions", "baseline,inline,inline-placebo", "--case", "nemo-mbridge-perf-tp-dp-comm-overlap/*", "--out", str(run), "--progress", "plain"]) == 0
    capsys.readouterr()
    assert main(["grade", str(run), "--min-cases", "1"]) == 0
    placebo = json.loads((run / "report.json").read_text())["overall"]["placebo"]
    assert placebo["content"]["of"] == "inline" and placebo["content"]["against"] == "inline-placebo" and placebo["content"]["mean"] == 1.0
    assert placebo["context"]["mean"] == 0.0  # the decoy's answers are the baseline's
    assert "- content: inline - inline-placebo +100 pts" in (run / "BENCHMARK.md").read_text()


def test_a_decoy_activation_routes_to_a_label_of_its_own():
    grade = lambda expected, activated: SimpleNamespace(routing="wrong", counted=True, expected_skill=expected, activated=activated)  # noqa: E731
    names = [s.name for s in SKILLS]
    table = routing([grade(names[0], [DECOY]), grade(names[0], [names[0]])], names)
    assert table["labels"][-1] == OTHER and table["matrix"][names[0]][OTHER] == 1 and table["accuracy"] == 0.5
