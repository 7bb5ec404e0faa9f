"""Verdicts that fail closed: a gate never passes on evidence that is not there. Runs are
made by the real CLI against scripted models on 127.0.0.1 (or replayed), then graded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SENTINEL_KEY, admit_every_grader
from model_server import CaseInfo, ModelServer
from runner.cli import main
from runner.grade.checks import normalise, run_check
from runner.load import Bundle, Check, bundle_cases

CASES = bundle_cases(Bundle(REPO))
CALIBRATION = REPO / "evals" / "calibration"
REPORTS = ("grades.jsonl", "report.json", "BENCHMARK.md", "report.html", "junit.xml")


pytestmark = pytest.mark.usefixtures("sentinel_keys")  # a sentinel key: no file may hold it


@pytest.fixture
def server(repo_server):  # the scripted models, under the short name the tests use
    return repo_server


# The shipped bundle with every grader admitted: these tests are about what graders decide.
BUNDLE = REPO


@pytest.fixture(autouse=True)
def admitted(admitted_repo, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BUNDLE", admitted_repo)


def replay(out: Path, *extra: str) -> None:
    assert main(["eval", "--bundle", str(BUNDLE), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline,skills", "--out", str(out), "--progress", "plain", *extra]) == 0


def grade(run: Path, *extra: str) -> int:
    return main(["grade", str(run), "--bundle", str(BUNDLE), "--resamples", "200", *extra])


def report_of(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


# -- 1. completeness ---------------------------------------------------------------------


def test_a_run_with_records_removed_exits_3_naming_the_counts_and_the_command(tmp_path, capsys):
    run = tmp_path / "run"
    replay(run)
    lines = (run / "records.jsonl").read_text().splitlines()
    total, kept = len(lines), len(lines) // 2
    (run / "records.jsonl").write_text("\n".join(lines[:kept]) + "\n")
    summary = f"incomplete: {kept} of {total} records"
    capsys.readouterr()
    assert grade(run, "--fail-under-uplift", "0", "--fail-on-regression") == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{summary} ({total - kept} missing, 0 ended in an error)" in err
    assert f"--out {run}" in err and "mbskills eval" in err  # the command that finishes it
    assert not any((run / name).exists() for name in REPORTS)
    # with --allow-incomplete every report says so at the top, and the gates decide
    assert grade(run, "--allow-incomplete", "--fail-under-uplift", "0") == 1
    assert "gate failed: coverage under baseline" in capsys.readouterr().err
    assert (run / "BENCHMARK.md").read_text().splitlines()[2].startswith(f"> **Incomplete: {kept} of {total} records")
    assert 'id="incomplete"' in (run / "report.html").read_text() and summary in (run / "report.html").read_text()
    suites = (run / "junit.xml").read_text()
    assert 'name="completeness"' in suites and summary in suites
    assert report_of(run)["completeness"] == {"expected": total, "finished": kept, "errors": 0, "missing": total - kept, "in_progress": False, "complete": False}
    assert grade(run, "--allow-incomplete") == 0  # no gate: the reports carry the verdict


def test_a_run_graded_while_eval_writes_it_is_in_progress(tmp_path, server, capsys):
    server.latency_s = 0.5  # eight records, about 4 s: grading runs well inside that
    run = tmp_path / "run"
    command = [sys.executable, "-m", "runner.cli", "eval", "--bundle", str(BUNDLE), "--model", "openai:skilled", "--base-url", server.openai_url,
               "--conditions", "baseline", "--limit", "8", "-j", "1", "--out", str(run), "--no-cache", "--progress", "plain"]
    writer = subprocess.Popen(command, env={**os.environ, "OPENAI_API_KEY": SENTINEL_KEY}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not ((run / "records.jsonl").is_file() and (run / "records.jsonl").read_text().strip()):
            time.sleep(0.05)
        assert grade(run, "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache") == 3
        err = capsys.readouterr().err
        assert "an eval is still writing it" in err and "incomplete:" in err
        assert not (run / "report.json").exists()
    finally:
        assert writer.wait(60) == 0
    assert grade(run, "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache") == 0


# -- 2. coverage -------------------------------------------------------------------------


def test_a_case_with_one_checked_behaviour_is_ungraded_without_a_judge(tmp_path, good_bundle, server, capsys):
    # demo cases: one process behaviour and three content ones; only one content behaviour has a check
    (good_bundle / "skills/demo-skill/evals/checks.yaml").write_text(
        "".join(f"demo-{i}:\n  - behaviour: Sets cfg.widget.enabled = True.\n    must: ['answer to']\n" for i in range(1, 5))
    )
    admit_every_grader(good_bundle)
    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in bundle_cases(Bundle(good_bundle))}, {"demo-skill": "# Demo skill"}).start()
    try:
        run = tmp_path / "run"
        assert main(["eval", "--bundle", str(good_bundle), "--model", "openai:skilled", "--base-url", served.openai_url, "--case", "demo-skill/demo-1",
                     "--conditions", "baseline,skills", "--out", str(run), "--no-cache", "--progress", "plain"]) == 0
    finally:
        served.stop()
    capsys.readouterr()
    assert main(["grade", str(run), "--resamples", "100", "--fail-under-pass", "0"]) == 1
    err = capsys.readouterr().err
    assert "gate failed: coverage under skills 0.000 < 1.000 (0 of 1 records counted; 1 ungraded" in err
    report = report_of(run)
    skills = report["overall"]["conditions"]["skills"]
    assert skills["pass_rate"] is None and skills["coverage"] == 0 and skills["ungraded"] == 1
    # baseline failed its process behaviour ("Reads the demo skill."), which is not content:
    # its content is as ungraded as under skills, and the process verdict shows as no activation figure
    baseline = report["overall"]["conditions"]["baseline"]
    assert (baseline["records"], baseline["ungraded"], baseline["activation"]) == (0, 1, None)
    assert skills["activation"] == {"records": 1, "passes": 1, "rate": 1.0}
    needs = {b["text"] for b in report["grading"]["needs_judge"]}
    assert needs == {"Does not invent other settings.", "Explains the setting in one sentence."}
    text = (run / "BENCHMARK.md").read_text()
    assert "## Behaviours that need a judge" in text and "Does not invent other settings." in text
    # a gate was given: JUnit fails what nobody graded, instead of skipping it
    assert 'failure message="not graded, and a gate was given: 1 of 1 trials ungraded' in (run / "junit.xml").read_text()
    assert main(["grade", str(run), "--resamples", "100"]) == 0
    assert 'skipped message="1 of 1 trials ungraded' in (run / "junit.xml").read_text()
    # a judge settles more, but its quotes must show something: the scripted judge quotes the
    # answer's first words for behaviours that name nothing, which support nothing
    judged = ["grade", str(run), "--resamples", "100", "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache"]
    assert main(judged) == 0
    report = report_of(run)
    assert report["grading"]["judge_verdicts"]["unsupported"] >= 2
    assert {u["problem"] for u in report["unsupported"]} == {"the quote shares no key term with what it is said to show"}


# -- 3. evidence -------------------------------------------------------------------------


def test_a_lying_judge_raises_no_pass_rate(tmp_path, server, capsys):
    run = tmp_path / "run"
    replay(run)
    assert grade(run) == 0
    without = report_of(run)["overall"]["conditions"]
    liar = ["--judge", "openai:judge-liar", "--judge-base-url", server.openai_url, "--no-cache"]
    assert grade(run, *liar) == 0
    report = report_of(run)
    lied = report["overall"]["conditions"]
    for condition in ("baseline", "skills"):
        assert lied[condition]["passes"] <= without[condition]["passes"]
    verdicts = report["grading"]["judge_verdicts"]
    assert verdicts["yes"] > 0 and verdicts["unsupported"] == verdicts["yes"] and verdicts["unsupported_rate"] == 1.0
    assert len(report["unsupported"]) == verdicts["yes"]
    grades = [json.loads(line) for line in (run / "grades.jsonl").read_text().splitlines()]
    assert all(b["verdict"] is not True or b["source"] != "judge" for g in grades for b in g["behaviours"])
    assert "the judge's YES was unsupported" in (run / "BENCHMARK.md").read_text()
    assert "the judge's YES was unsupported" in capsys.readouterr().err
    # and as a gate it cannot pass on those verdicts
    assert grade(run, *liar, "--fail-under-pass", "0.5") == 1


def test_a_check_that_finds_a_forbidden_value_outranks_a_judge_yes(tmp_path, server):
    run = tmp_path / "run"
    replay(run, "--case", "fsdp-minimal-override")
    record = json.loads((run / "records.jsonl").read_text().splitlines()[0])
    record["answer"] += "\n\ncfg.dist.use_torch_fsdp2 = True\n"
    (run / "records.jsonl").write_text("\n".join([json.dumps(record), *(run / "records.jsonl").read_text().splitlines()[1:]]) + "\n")
    assert grade(run, "--judge", "openai:judge-liar", "--judge-base-url", server.openai_url, "--no-cache") == 0
    grades = {json.loads(line)["key"]: json.loads(line) for line in (run / "grades.jsonl").read_text().splitlines()}
    tripped = next(b for b in grades[record["key"]]["behaviours"] if b["text"] == "Does not tell the user to set use_torch_fsdp2.")
    assert (tripped["check_kind"], tripped["judge"], tripped["verdict"], tripped["source"]) == ("tripwire", True, False, "check")
    assert grades[record["key"]]["passed"] is False
    assert report_of(run)["disagreement_counts"]["judge says YES, check says NO"] >= 1


# -- 4. polarity and normalising ----------------------------------------------------------


def check(must=(), must_not=()) -> Check:
    return Check("b", tuple(re.compile(p, re.MULTILINE) for p in must), tuple(re.compile(p, re.MULTILINE) for p in must_not))


@pytest.mark.parametrize(
    "answer, kind",
    [
        ("Transformer Engine is required for TP overlap.", "presence"),
        ("Transformer Engine is not required for TP overlap.", "reversed"),
        ("You don't need Transformer Engine; TE is never checked.", "reversed"),
        ("Transformer Engine only matters when you run FP8.", "reversed"),
        ("It isn't an error, just a warning: Transformer Engine is required.", "presence"),
        ("Nothing about it here.", "absence"),
    ],
)
def test_a_reversed_statement_in_the_right_words_fails(answer, kind):
    assert run_check(check(must=[r"(?i)Transformer Engine|\bTE\b"]), answer).kind == kind


@pytest.mark.parametrize(
    "answer, kind",
    [
        ("People often say Transformer Engine is required. In 0.6.2 it is not.", "reversed"),  # a claim reported, then denied
        ("People often say Transformer Engine is optional. It is not: Transformer Engine is required.", "presence"),
        ("delay_wgrad_compute cannot be used on its own: it requires the EP overlap flag.", "presence"),  # a double negative states the rule
        ("TE is not what FP8 needs here. For TP overlap, Transformer Engine is required.", "presence"),  # one affirmative match is enough
    ],
)
def test_denials_and_double_negatives(answer, kind):
    must = [r"(?i)Transformer Engine is required|\bTE\b|delay_wgrad_compute[^\n]{0,60}requires"]
    assert run_check(check(must=must), answer).kind == kind


def test_a_forbidden_statement_that_is_denied_trips_nothing():
    tripwire = check(must_not=[r"(?i)torch_dist is fine"])
    assert run_check(tripwire, "People sometimes assume torch_dist is fine for saving. It is not: use fsdp_dtensor.").kind == "clear"
    assert run_check(tripwire, "For saving, torch_dist is fine.").kind == "tripwire"


def test_a_pattern_that_spells_the_negation_expects_it():
    assert run_check(check(must=[r"(?i)\bnot\b[^.\n]{0,20}\bfields?\b"]), "These are not CommOverlapConfig fields.").kind == "presence"


@pytest.mark.parametrize(
    "answer",
    [
        "Set the number of *parameters* with `bucket_size`.",
        "ddp = cfg.ddp\nddp.bucket_size = 5",
        "```yaml\nddp:\n  bucket_size: 5\n```",
        "| field | value |\n|---|---|\n| `cfg.ddp.bucket_size` | `5` |",
        '{"ddp.bucket_size": 5}',
        "```diff\n-cfg.ddp.bucket_size = 9\n+cfg.ddp.bucket_size = 5\n```",
    ],
)
def test_answers_are_normalised_before_matching(answer):
    text = normalise(answer)
    assert "*" not in text.replace("**", "") and "`" not in text
    if "bucket_size" in answer and "parameters" not in answer:
        assert re.search(r"ddp\.bucket_size\s*(?:=|:)\s*5\b", text), text
        assert "= 9" not in text  # a diff's removed line is not advice


def test_aliases_contractions_and_continuations_are_resolved():
    text = normalise("import megatron.bridge.training.comm_overlap as co\ncfg.comm_overlap = co.CommOverlapConfig()\nIt isn't set.\npython x.py \\\n  --validate")
    assert "megatron.bridge.training.comm_overlap.CommOverlapConfig()" in text and "is not set" in text and "x.py --validate" in text
    window = Check("b", (re.compile(r"save(?:[^.\n]|(?<=\w)\.(?=\w)){0,40}fsdp_dtensor"),), ())
    assert run_check(window, "once checkpoint.save is set, use fsdp_dtensor").kind == "presence"  # the dot in checkpoint.save is no sentence end


# -- 5. one rule for errors, 6. transcripts ----------------------------------------------


def test_error_and_ungraded_records_are_in_no_rate_mean_or_routing_figure(tmp_path, capsys):
    run = tmp_path / "run"
    replay(run)
    lines = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    skills = [r for r in lines if r["condition"] == "skills" and r["expected_skill"]][:3]
    for r in skills:  # three records that did not run, with absurd turn counts
        r.update(status="error", error={"kind": "server", "message": "x", "status": 500}, turns=[{}] * 50, activated_skills=[])
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert grade(run, "--allow-incomplete") == 0
    report = report_of(run)
    cell = report["overall"]["conditions"]["skills"]
    assert cell["errors"] == 3 and cell["turns"] < 50 / 3  # the 50-turn records are in no mean
    assert report["routing"]["records"] == cell["records"] and report["routing"]["outcomes"].get("missed", 0) == 0
    assert "3 that did not run" in (run / "BENCHMARK.md").read_text()


def test_reading_skill_md_through_read_skill_file_is_an_activation(tmp_path, server):
    from runner.grade.transcript import activations, process_behaviour, routing_outcome

    record = {"activated_skills": [], "files_read": ["nemo-mbridge-perf-megatron-fsdp/SKILL.md"], "inlined_skill": None}
    assert activations(record) == ["nemo-mbridge-perf-megatron-fsdp"]
    assert routing_outcome("nemo-mbridge-perf-megatron-fsdp", activations(record)) == "correct"
    names = [d.name for d in Bundle(REPO).skill_dirs()]
    assert process_behaviour("Uses ckpt_format from the skill: fsdp_dtensor", names) is None
    assert process_behaviour("Reads the bucket size from the skill", names) is None
    assert process_behaviour("Read the nemo-mbridge-perf-megatron-fsdp skill before answering.", names) == ("positive", "nemo-mbridge-perf-megatron-fsdp", None)
    # and at run time the tool itself counts the read
    from runner.load import load_skill
    from runner.providers import ToolCall
    from runner.run.skill_tools import SkillTools

    tools = SkillTools([load_skill(d) for d in Bundle(REPO).skill_dirs()])
    content, error = tools.run(ToolCall("1", "read_skill_file", json.dumps({"name": "nemo-mbridge-perf-megatron-fsdp", "path": "SKILL.md"})))
    assert not error and tools.activated == ["nemo-mbridge-perf-megatron-fsdp"]


# -- 7. cost -----------------------------------------------------------------------------


def test_tokens_and_cost_per_condition_record_and_uplift_point_and_missing_usage_is_unknown(tmp_path, server, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  - {provider: openai-compatible, match: skilled, input: 2.0, cached_input: 1.0, output: 8.0}\n")
    run = tmp_path / "run"
    base = ["eval", "--bundle", str(BUNDLE), "--model", "openai:skilled", "--base-url", server.openai_url, "--conditions", "baseline,skills", "--pricing", str(prices), "--no-cache", "--progress", "plain"]
    assert main([*base, "--out", str(run)]) == 0
    assert grade(run, "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache") == 0
    report = report_of(run)
    overall = report["overall"]
    for condition in ("baseline", "skills"):
        cell = overall["conditions"][condition]
        assert cell["cost_usd"] > 0 and cell["cost_per_record"] > 0 and cell["tokens"] > 0 and cell["tokens_unknown"] == 0
    assert overall["conditions"]["skills"]["cost_per_record"] > overall["conditions"]["baseline"]["cost_per_record"]  # the skills are read
    uplift = overall["uplift"]["skills"]
    if uplift["mean"] and uplift["mean"] > 0:
        expected = (overall["conditions"]["skills"]["cost_per_record"] - overall["conditions"]["baseline"]["cost_per_record"]) / (100 * uplift["mean"])
        assert uplift["cost_per_point"] == pytest.approx(expected)
    text = (run / "BENCHMARK.md").read_text()
    assert "| cost per record, USD |" in text and "| cost of the records, USD |" in text
    assert "cost / record" in (run / "report.html").read_text()
    # a server that reports no usage: tokens and cost are unknown, never 0
    server.failures[:] = ["nousage"] * 200
    silent = tmp_path / "silent"
    assert main([*base, "--out", str(silent), "--limit", "2"]) == 0
    assert "tokens unknown (no reply reported usage); cost of this invocation unknown" in capsys.readouterr().err
    recs = [json.loads(line) for line in (silent / "records.jsonl").read_text().splitlines()]
    assert all(r["usage"]["unreported"] >= 1 and r["cost_usd"] is None for r in recs)
    server.failures[:] = []
    assert grade(silent, "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache") == 0
    cell = report_of(silent)["overall"]["conditions"]["skills"]
    assert cell["tokens"] is None and cell["cost_usd"] is None and cell["tokens_unknown"] == cell["records"]
    assert "| tokens per record | unknown | unknown |" in (silent / "BENCHMARK.md").read_text()
