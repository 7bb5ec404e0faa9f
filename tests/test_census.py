"""The census of real problems: its files load against their schema, its held-out third is
the seeded draw recorded in draw.yaml, and validate reports a broken file, a tampered draw
or an answered_by naming an unknown claim as one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, copy_bundle
from runner.load.census import CENSUS_DIR, draw_heldout, load_census


def census():
    return load_census(REPO / CENSUS_DIR)


def test_the_census_holds_at_least_100_problems_over_the_three_topics():
    problems = census().problems
    assert len(problems) >= 100
    assert {p["topic"] for p in problems.values()} == {"megatron-fsdp", "tp-dp-pp-overlap", "moe-ep-overlap"}
    # one problem per tracker thread
    urls = [p["source"]["url"].rstrip("/").replace("/pull/", "/issues/") for p in problems.values()]
    assert len(urls) == len(set(urls))


def test_the_heldout_third_is_the_seeded_draw_over_the_recorded_population():
    c = census()
    assert c.draw is not None
    assert set(c.draw["population"]) <= set(c.problems)
    assert sorted(c.draw["heldout"]) == draw_heldout(c.draw["population"], c.draw["seed"])
    assert set(c.heldout) == set(c.draw["heldout"]) | {i for r in c.draw.get("rounds", []) for i in r["heldout"]}
    assert len(c.draw["heldout"]) == len(c.draw["population"]) // 3
    assert not set(c.heldout) & set(c.training)
    # another seed draws another third
    assert draw_heldout(c.draw["population"], c.draw["seed"] + 1) != sorted(c.draw["heldout"])


def test_answered_problems_name_claims_the_skill_cards_list():
    c = census()
    answered = [p for p in c.problems.values() if p["answered_by"]]
    assert answered
    for problem in answered:
        card = yaml.safe_load((REPO / "skills" / problem["answered_by"]["skill"] / "card.yaml").read_text("utf-8"))
        ids = {claim["id"] for claim in card["claims"]}
        assert set(problem["answered_by"]["claims"]) <= ids, problem["id"]


def validate(bundle: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", "validate", str(bundle)], capture_output=True, text=True, timeout=300)


def test_validate_reports_a_tampered_draw_a_broken_problem_and_an_unknown_claim(tmp_path: Path):
    bundle = copy_bundle(tmp_path)
    root = bundle / CENSUS_DIR
    draw = yaml.safe_load((root / "draw.yaml").read_text("utf-8"))
    kept = draw["heldout"][0]
    draw["heldout"][0] = next(i for i in draw["population"] if i not in draw["heldout"])
    (root / "draw.yaml").write_text(yaml.safe_dump(draw), "utf-8")
    done = validate(bundle)
    assert done.returncode == 1
    assert "census/draw" in done.stdout and "is not the draw of seed" in done.stdout and "Traceback" not in done.stderr
    draw["heldout"][0] = kept
    (root / "draw.yaml").write_text(yaml.safe_dump(draw), "utf-8")

    problem = sorted(root.glob("moe-*.yaml"))[0]
    text = problem.read_text("utf-8")
    problem.write_text(text.replace("topic: moe-ep-overlap", "topic: moe"), "utf-8")
    done = validate(bundle)
    assert done.returncode == 1 and f"{problem.name}:" in done.stdout and "census/schema" in done.stdout and "$.topic" in done.stdout
    problem.write_text(text, "utf-8")

    answered = next(p for p in sorted(root.glob("*.yaml")) if p.name != "draw.yaml" and yaml.safe_load(p.read_text("utf-8"))["answered_by"])
    data = yaml.safe_load(answered.read_text("utf-8"))
    data["answered_by"]["claims"] = ["no-such-claim"]
    answered.write_text(yaml.safe_dump(data), "utf-8")
    done = validate(bundle)
    assert done.returncode == 1 and "census/answered-by" in done.stdout and "'no-such-claim'" in done.stdout


def test_a_problem_outside_every_round_and_a_missing_folder_are_one_line_errors(tmp_path: Path):
    import pytest

    from runner.core import LoadError

    bundle = copy_bundle(tmp_path)
    root = bundle / CENSUS_DIR
    stray = root / "moe-stray-problem.yaml"
    first = next(p for p in sorted(root.glob("moe-*.yaml")))
    stray.write_text(first.read_text("utf-8").replace(f"id: {first.stem}", "id: moe-stray-problem"), "utf-8")
    with pytest.raises(LoadError, match="moe-stray-problem is in neither the draw's population nor a later round"):
        load_census(root)
    with pytest.raises(LoadError, match="no census folder"):
        load_census(tmp_path / "nowhere")
