"""Aggregation, reports and gates: numbers checked against hand-computed expectations,
then the whole `eval -> grade` path against a scripted judge, the exit codes, and the
HTML report rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from model_server import CaseInfo, ModelServer
from runner import stats
from runner.core import check_schema
from runner.grade import BehaviourGrade, RecordGrade
from runner.report import aggregate
from runner.cli import main
from runner.load import bundle_cases
from runner.grade.transcript import routing_outcome
from runner.report import benchmark_md, gates, junit_xml
from runner.load import Bundle

from conftest import REPO, admit_every_grader

CASES = bundle_cases(Bundle(REPO))
CALIBRATION = REPO / "evals" / "calibration"

# case: (owner, expected skill, baseline trials, skills trials, skills activations)
PLAN = {
    "A/a1": ("A", "sk-a", [False, False], [True, True], [["sk-a"], ["sk-a"]]),
    "A/a2": ("A", "sk-a", [True, False], [True, True], [["sk-a"], ["sk-b"]]),
    "A/a3": ("A", "sk-a", [True, True], [True, False], [[], []]),
    "B/b1": ("B", None, [False, False], [False, False], [[], ["sk-a"]]),
}


def synthetic() -> tuple[dict, list[RecordGrade]]:
    grades = []
    for case, (owner, expected, base, skilled, activations) in PLAN.items():
        for condition, results in (("baseline", base), ("skills", skilled)):
            for trial, passed in enumerate(results):
                activated = activations[trial] if condition == "skills" else []
                grades.append(RecordGrade(
                    key=f"{case}#{condition}#{trial}", case=case, owner=owner, case_id=case.split("/")[1], condition=condition, trial=trial,
                    expected_skill=expected, activated=activated,
                    routing=routing_outcome(expected, activated) if condition == "skills" else None,
                    input_tokens=100 if condition == "baseline" else 300, output_tokens=0, cost_usd=None, turns=1 if condition == "baseline" else 2,
                    behaviours=[
                        BehaviourGrade(0, "Sets x.", "content", check=passed, check_why="", verdict=passed, source="check"),
                        BehaviourGrade(1, "Mentions y.", "content", check=True, check_why="", verdict=True, source="check"),
                    ],
                    behaviour_rate=(int(passed) + 1) / 2, passed=passed,
                ))
    info = {"model": {"provider": "openai", "model": "m"}, "conditions": ["baseline", "skills"], "trials": 2, "bundle_fingerprint": "f"}
    return info, grades


@pytest.fixture(scope="module")
def report():
    info, grades = synthetic()
    complete = {"expected": 16, "finished": 16, "errors": 0, "missing": 0, "in_progress": False, "complete": True}
    return aggregate.build(info, grades, skill_names=["sk-a", "sk-b"], judge=None, fingerprint_now="f", checks_cases=4, completeness=complete, resamples=2000, seed=3)


def test_case_rates_wilson_and_pass_at_k(report):
    a2 = next(r for r in report["cases"] if r["case"] == "A/a2")["conditions"]["baseline"]
    assert (a2["n"], a2["passes"], a2["pass_rate"]) == (2, 1, 0.5)
    assert a2["wilson"] == list(stats.wilson_interval(1, 2))
    assert a2["pass_at_k"] == {"1": 0.5, "2": 1.0} and a2["pass_hat_k"] == {"1": 0.5, "2": 0.0}
    changes = {r["case"]: r["change"]["skills"] for r in report["cases"]}
    assert changes == {"A/a1": "improved", "A/a2": "improved", "A/a3": "regressed", "B/b1": "unchanged"}


def test_overall_uplift_and_sign_test(report):
    overall = report["overall"]
    assert overall["conditions"]["skills"]["pass_rate"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert overall["conditions"]["baseline"]["pass_rate"] == pytest.approx((0 + 0.5 + 1 + 0) / 4)
    assert (overall["conditions"]["skills"]["passes"], overall["conditions"]["skills"]["records"]) == (5, 8)
    # the pooled interval counts each case once, at its own rate: not 8 independent trials
    assert overall["conditions"]["skills"]["wilson"] == list(stats.wilson_over_clusters([1, 1, 0.5, 0]))
    assert overall["conditions"]["skills"]["wilson"] != list(stats.wilson_interval(5, 8))
    uplift = overall["uplift"]["skills"]
    assert uplift["mean"] == pytest.approx(0.25)
    assert (uplift["improved"], uplift["regressed"], uplift["unchanged"]) == (2, 1, 1)
    assert uplift["p_value"] == pytest.approx(1.0)  # 2 of 3 discordant: every outcome is at most as likely
    assert (uplift["lo"], uplift["hi"]) == pytest.approx(stats.paired_bootstrap([1, 0.5, -0.5, 0], resamples=2000, seed=3)[1:])
    group = report["groups"]["A"]
    assert group["uplift"]["skills"]["mean"] == pytest.approx(1 / 3) and group["cases"] == 3
    assert overall["conditions"]["skills"]["tokens"] == 300 and overall["conditions"]["baseline"]["turns"] == 1


def test_routing_matrix_precision_recall(report):
    routing = report["routing"]
    assert routing["labels"] == ["sk-a", "sk-b", "none"]
    assert routing["matrix"]["sk-a"] == {"sk-a": 3, "sk-b": 1, "none": 2}
    assert routing["matrix"]["none"] == {"sk-a": 1, "sk-b": 0, "none": 1}
    assert routing["accuracy"] == pytest.approx(4 / 8)
    assert routing["per_label"]["sk-a"] == {"precision": pytest.approx(3 / 4), "recall": pytest.approx(3 / 6)}
    assert routing["per_label"]["none"] == {"precision": pytest.approx(1 / 3), "recall": pytest.approx(1 / 2)}
    assert routing["per_label"]["sk-b"]["recall"] is None
    # a1 x2, a2 t0 and b1 t0 (nothing, as expected) are correct; a2 t1 and b1 t1 wrong; a3 x2 missed
    assert routing["outcomes"] == {"correct": 4, "wrong": 2, "missed": 2}


def test_behaviours_that_do_not_discriminate_are_flagged(report):
    flags = {(b["case"], b["index"]): b["flag"] for b in report["behaviours"]}
    assert flags[("A/a1", 1)] == "always-passes" and flags[("B/b1", 0)] == "never-passes"
    assert flags[("A/a1", 0)] is None and flags[("A/a3", 0)] is None


def test_report_validates_and_the_markdown_and_junit_say_the_same(report):
    assert check_schema("report", report) == []
    text = benchmark_md(report)
    assert "| pass rate (every content verdict passes) | 38% | 62% | +25 pts [" in text
    assert "(+2/-1, p=1)" in text
    assert "| A/a3 | skills | regressed | 100% | 50% |" in text
    assert "`B/b1` #1 (never-passes)" in text
    _, grades = synthetic()
    root = ET.fromstring(junit_xml(report, grades))
    suites = {s.get("name"): s for s in root}
    assert suites["skills"].get("tests") == "4" and suites["skills"].get("failures") == "2"
    assert suites["baseline"].get("failures") == "3"
    failed = [t.get("name") for t in suites["skills"] if t.find("failure") is not None]
    assert failed == ["a3", "b1"]


def test_gates(report):
    assert gates(report, fail_under_pass=0.6, fail_under_uplift=None, fail_on_regression=False) == []
    # +25 pts over 4 cases, interval [-25, +75]: the mean clears a +20 gate, but these cases
    # detect only about +90 pts, so the run could not have told +20 from nothing
    (underpowered,) = gates(report, fail_under_uplift=0.2, fail_under_pass=0.6, fail_on_regression=False)
    assert underpowered.startswith("underpowered: uplift skills - baseline +0.250, interval [-0.250, +0.750] includes 0, and 4 cases detect only +0.904")
    uplift = report["overall"]["uplift"]["skills"]
    assert gates(report, fail_under_uplift=uplift["mde"] + 0.01, fail_under_pass=None, fail_on_regression=False) == [f"uplift skills - baseline +0.250 < {uplift['mde'] + 0.01:+.3f}"]
    failed = gates(report, fail_under_uplift=0.3, fail_under_pass=0.7, fail_on_regression=True)
    assert len(failed) == 3
    assert failed[0].startswith("uplift skills - baseline +0.250 < +0.300")
    assert "1 cases regressed under skills: A/a3" in failed[2]


# -- the CLI path ------------------------------------------------------------------------

KEY = "sk-test-judge-0123456789"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in CASES}, {}).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory, admitted_repo) -> Path:
    # the known-bad answers under baseline, the known-good ones under skills: a real difference
    # in content, graded with every grader admitted (these tests are about the reports)
    out = tmp_path_factory.mktemp("replay") / "run"
    assert main(["eval", "--bundle", str(admitted_repo), "--model", f"replay:{CALIBRATION}?baseline=bad-1", "--conditions", "baseline,skills", "--out", str(out), "--progress", "plain"]) == 0
    return out


def copy_run(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(source, target)
    return target


BUNDLE = REPO  # the admitted copy (admitted_repo) while a test runs


@pytest.fixture(autouse=True)
def admitted(admitted_repo, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BUNDLE", admitted_repo)


def grade(run: Path, *extra: str) -> int:
    return main(["grade", str(run), "--bundle", str(BUNDLE), "--resamples", "1000", *extra])


def test_grade_with_a_scripted_judge_writes_four_reports(tmp_path, server, replay_run, capsys):
    run = copy_run(replay_run, tmp_path)
    judge = ["--judge", "openai:judge", "--judge-base-url", server.openai_url, "--cache", str(tmp_path / "c.sqlite")]
    assert grade(run, *judge) == 0
    for name in ("grades.jsonl", "report.json", "BENCHMARK.md", "report.html", "junit.xml"):
        assert (run / name).is_file(), name
    report = json.loads((run / "report.json").read_text())
    assert check_schema("report", report) == []
    assert report["grading"]["judge"]["model"] == "judge" and report["grading"]["judge"]["settings"] == {"temperature": 0.0, "max_tokens": 2048}
    assert all(r["body"]["temperature"] == 0 and r["body"]["response_format"]["type"] == "json_schema" for r in server.requests)
    grades = [json.loads(line) for line in (run / "grades.jsonl").read_text().splitlines()]
    # each answer's content verdicts are exactly what the judge said about it
    said = {v["answer"]: v for v in server.verdicts}
    records = {json.loads(line)["key"]: json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()}
    for g in grades:
        if g["status"] == "process_only":
            continue  # no content behaviour: the judge is not asked
        verdict = said[records[g["key"]]["answer"]]
        content = [b for b in g["behaviours"] if b["kind"] == "content"]
        assert [b["judge"] for b in content] == verdict["behaviours"]
        assert g["correct"]["judge"] == verdict["correct"]
        # the judge outranks a check, except where the check found a forbidden value; an unsupported YES decides nothing
        for b in content:
            if b["check_kind"] in ("tripwire", "reversed") or b["judge"] is False:
                assert b["verdict"] is False
            elif b["evidence_found"]:
                assert (b["verdict"], b["source"]) == (True, "judge")
            else:
                assert b["source"] in ("check", "field", "execute", None) and b["unsupported"]
        # a YES counts only where its quote is in the answer, has substance and shares a term with the behaviour
        assert all(b["evidence_found"] == (b["evidence_problem"] is None) for b in content if b["judge"])
        assert all(b["unsupported"] == (bool(b["judge"]) and not b["evidence_found"]) for b in content)
        assert g["disagreements"] == [b["index"] for b in content if b["check"] is not None and b["check"] != b["judge"]]
    assert len(report["disagreements"]) == sum(len(g["disagreements"]) for g in grades)
    uplift = report["overall"]["uplift"]["skills"]
    shown = f"interval undefined: {uplift['undefined']}" if uplift["undefined"] else f"[{100 * uplift['lo']:+.0f}, {100 * uplift['hi']:+.0f}]"
    assert f"{100 * uplift['mean']:+.0f} pts {shown}" in (run / "BENCHMARK.md").read_text()
    # regrading asks the judge nothing new
    made = server.count()
    assert grade(run, *judge) == 0 and server.count() == made


def test_gate_exit_codes(tmp_path, replay_run, capsys):
    run = copy_run(replay_run, tmp_path)
    assert grade(run) == 0  # no gate: the reports say what is ungraded, the exit does not
    report = json.loads((run / "report.json").read_text())
    skills, baseline = report["overall"]["conditions"]["skills"], report["overall"]["conditions"]["baseline"]
    assert 0 < baseline["coverage"] < 1 and 0 < skills["coverage"] < 1  # without a judge, graders settle only some answers
    uplift = report["overall"]["uplift"]["skills"]
    # any gate demands full coverage unless told otherwise
    assert grade(run, "--fail-under-uplift", "0") == 1
    assert "gate failed: coverage under skills" in capsys.readouterr().err
    floor = ["--min-coverage", f"{min(baseline['coverage'], skills['coverage']) - 0.01}"]
    # an uplift over fewer cases than --min-cases is underpowered, whatever its size
    assert uplift["cases"] < 10 and grade(run, "--fail-under-uplift", "0", *floor) == 1
    assert f"gate failed: underpowered: uplift skills - baseline over {uplift['cases']} cases < --min-cases 10" in capsys.readouterr().err
    # every counted case went from fail to pass: a constant difference has no interval, so it is no evidence
    assert uplift["undefined"] and uplift["lo"] is None and uplift["mean"] == 1
    assert grade(run, "--fail-under-uplift", "0", "--min-cases", str(uplift["cases"]), *floor) == 1
    assert "has no interval (every case differs by +100 pts" in capsys.readouterr().err
    rate = skills["pass_rate"]
    assert skills["cases_counted"] >= 10
    assert grade(run, "--fail-under-pass", f"{rate - 0.01}", *floor) == 0
    assert grade(run, "--fail-under-pass", "1", *floor) == (1 if rate < 1 else 0)
    assert grade(run, "--fail-under-pass", f"{rate - 0.01}", "--min-cases", str(skills["cases_counted"] + 1), *floor) == 1
    assert "gate failed: underpowered: pass rate under skills" in capsys.readouterr().err
    assert grade(run, "--fail-on-regression", *floor) == (1 if uplift["regressed"] else 0)
    assert grade(run, "--min-coverage", f"{max(baseline['coverage'], skills['coverage']) + 0.01}") == 1
    assert grade(run, "--min-cases", "0") == 2


@pytest.mark.parametrize("option, value", [("--fail-under-uplift", "10"), ("--fail-under-uplift", "-1.5"), ("--fail-under-pass", "1.2"), ("--min-coverage", "-0.1"), ("--min-coverage", "nan")])
def test_gate_thresholds_out_of_range_are_refused_before_grading(tmp_path, replay_run, capsys, option, value):
    run = copy_run(replay_run, tmp_path)
    assert grade(run, option, value) == 2
    err = capsys.readouterr().err
    assert f"{option} " in err and "must be between" in err and err.count("\n") == 1
    assert not (run / "report.json").exists()


def test_harness_failures_exit_3_and_bad_input_exit_2(tmp_path, server, replay_run, capsys):
    run = copy_run(replay_run, tmp_path)
    assert grade(run, "--judge", "openai:judge-text", "--judge-base-url", server.openai_url, "--no-cache") == 3
    err = capsys.readouterr().err
    total = len((run / "records.jsonl").read_text().splitlines())  # cases x baseline, skills
    judged = total - 2 * 2  # the two routing-only cases have no content behaviour to ask a judge about
    assert f"could not be graded (judge_error:judge {judged})" in err
    assert f"{judged} the judge could not grade" in (run / "BENCHMARK.md").read_text()
    # a record that failed to run makes the run incomplete: exit 3 before any grading, even with every gate met
    lines = (run / "records.jsonl").read_text().splitlines()
    broken = json.loads(lines[0]) | {"status": "error", "error": {"kind": "timeout", "message": "read timed out", "status": None}}
    (run / "records.jsonl").write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    assert grade(run, "--fail-under-uplift", "-1") == 3
    assert f"incomplete: {total - 1} of {total} records (0 missing, 1 ended in an error)" in capsys.readouterr().err
    assert grade(tmp_path / "nothing") == 2
    assert main(["grade", str(run), "--bundle", str(tmp_path)]) == 2
    assert grade(run, "--judge", "gpt-4o") == 2
    assert grade(run, "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--judge-temperature", "cold") == 2
    err = capsys.readouterr().err
    assert "not a run directory" in err and "not a bundle" in err and "expected a number or 'omit'" in err


def test_warns_when_the_judge_is_the_model_under_test(tmp_path, server, capsys):
    out = tmp_path / "run"
    assert main(["eval", "--bundle", str(REPO), "--model", "openai:judge", "--base-url", server.openai_url, "--conditions", "baseline", "--limit", "2", "--out", str(out), "--no-cache"]) == 0
    assert main(["grade", str(out), "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache", "--resamples", "100"]) == 0
    assert "the judge openai:judge is the model under test" in capsys.readouterr().err
    assert json.loads((out / "report.json").read_text())["grading"]["judge_is_model_under_test"] is True
    assert "the judge is the model under test" in (out / "BENCHMARK.md").read_text()


# -- calibration -------------------------------------------------------------------------


def test_calibrate_against_hand_labels(tmp_path, server, capsys):
    folder = tmp_path / "answers" / "nemo-mbridge-perf-megatron-fsdp"
    folder.mkdir(parents=True)
    (folder / "fsdp-minimal-override.md").write_text(
        "Set cfg.ddp.use_megatron_fsdp = True, cfg.ddp.data_parallel_sharding_strategy = 'optim_grads_params' and "
        "cfg.checkpoint.ckpt_format = 'fsdp_dtensor' (checkpoint.save is set; torch_dist fails validation). Leave use_torch_fsdp2 alone.\n"
    )
    (folder / "fsdp-minimal-override.bad-1.md").write_text(
        "---\nfails:\n  - 'Sets cfg.checkpoint.ckpt_format = \"fsdp_dtensor\" because checkpoint.save is set.'\n"
        "  - Says the recipe default torch_dist would fail validation with save enabled.\ncorrect: false\n---\n"
        "Set cfg.ddp.use_megatron_fsdp = True and cfg.ddp.data_parallel_sharding_strategy = 'optim_grads_params'.\n"
    )
    out = tmp_path / "calibration.json"
    args = ["calibrate", "--bundle", str(REPO), "--answers", str(tmp_path / "answers"), "--judge", "openai:judge", "--judge-base-url", server.openai_url, "--no-cache", "--out", str(out)]
    assert main(args) == 0
    result = json.loads(out.read_text())
    # judge: 9 of 10 behaviour items agree (it says NO to the unmentioned use_torch_fsdp2 item of the bad answer)
    result = result["sets"][0]
    judged = result["judge_behaviours"]
    assert (judged["items"], judged["accuracy"], judged["fn"], judged["fp"]) == (10, 0.9, 1, 0)
    assert judged["kappa"] == pytest.approx((0.9 - 0.62) / (1 - 0.62))
    assert result["judge_correct"]["items"] == 2
    shown = capsys.readouterr().out
    assert "2 labelled answers (1 good, 1 bad)" in shown and "accuracy  90.0%  kappa 0.737" in shown
    # the checks' score is the agreement of their own verdicts with the labels
    pairs = [(b["label"], b["check"]) for item in result["items"] for b in item["behaviours"]]
    assert result["checks"]["items"] == len(pairs) and result["checks"]["accuracy"] == pytest.approx(sum(a == b for a, b in pairs) / len(pairs))
    assert main([*args, "--min-kappa", "0.8"]) == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("---\nfails: []\ncorrect: true\n---\nx\n", "calibration/labels: a bad answer must fail a behaviour or be incorrect"),
        ("---\nfails: oops\ncorrect: false\n---\nx\n", "calibration/labels: a labelled answer needs 'fails'"),
        ("---\nfails: [Says something else.]\ncorrect: false\n---\nx\n", "has no behaviour 'Says something else.'"),
        ("---\nfails: [Sets cfg.ddp.use_megatron_fsdp = True.]\ncorrect: maybe\n---\nx\n", "'correct' must be true or false"),
        ("no frontmatter\n", "needs frontmatter with 'fails' and 'correct'"),
    ],
)
def test_bad_calibration_labels_are_one_line_errors(tmp_path, capsys, text, message):
    folder = tmp_path / "answers" / "nemo-mbridge-perf-megatron-fsdp"
    folder.mkdir(parents=True)
    (folder / "fsdp-minimal-override.md").write_text("good\n")
    (folder / "fsdp-minimal-override.bad-1.md").write_text(text)
    assert main(["calibrate", "--bundle", str(REPO), "--answers", str(tmp_path / "answers")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "fsdp-minimal-override.bad-1.md:" in err and len(err.splitlines()) == 1


def test_shipped_calibration_sets_are_complete_and_the_held_out_one_comes_first(capsys):
    assert main(["calibrate", "--bundle", str(REPO)]) == 0
    shown = capsys.readouterr().out
    names = [line.split(" set (", 1)[0] for line in shown.splitlines() if " set (" in line]
    rounds = sorted(p.name for p in (REPO / "evals" / "rounds").iterdir() if p.is_dir())
    assert rounds and names == ["held-out", *(f"round {r}" for r in rounds), "dev", "training"]
    cases = len(bundle_cases(Bundle(REPO)))
    for name in rounds:  # each fresh round answers every case with one right answer and one or two wrong ones
        each = len(list((REPO / "evals" / "rounds" / name).rglob("*.held-*.md"))) // cases
        assert each in (2, 3), (name, each)
        assert f"round {name} set" in shown and f"{cases * each} labelled answers ({cases} good, {cases * (each - 1)} bad)" in shown.split(f"round {name} set", 1)[1].splitlines()[0]
    assert "training set" in shown and f"{cases * 3} labelled answers ({cases} good, {cases * 2} bad)" in shown.split("training set", 1)[1]


# -- the HTML report in a real browser ---------------------------------------------------


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


# In CI (CI set) a missing browser is a failure, not a skip.
@pytest.mark.skipif(chromium() is None and not os.environ.get("CI"), reason="no chromium on PATH (bash run.sh test installs Debian's chromium where it can)")
def test_report_html_renders_in_headless_chromium(tmp_path, replay_run):
    from PIL import Image

    assert chromium(), "CI needs chromium for this test (bash run.sh test installs it)"
    run = copy_run(replay_run, tmp_path)
    assert grade(run) == 0
    html = run / "report.html"
    assert "<script" not in html.read_text() and "http" not in html.read_text().split("</style>")[0]
    browser = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run([*browser, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "Skill uplift" in dom and "Routing (skills condition)" in dom and dom.count("<circle") >= 2
    shot = tmp_path / "report.png"
    subprocess.run([*browser, "--window-size=1200,1400", f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=120)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1400)
    colours = image.getcolors(maxcolors=1 << 20)
    count = {rgb: n for n, rgb in colours}
    assert len(colours) > 50  # text, bars and cells drew, not a blank page
    # the uplift dot (#2f855a) is on screen, and the interval bar (#2b6cb0) exactly where an interval is defined
    report = json.loads((run / "report.json").read_text())
    defined = [e for e in [report["overall"]["uplift"]["skills"], *(g["uplift"]["skills"] for g in report["groups"].values())] if e["mean"] is not None]
    assert count.get((0x2F, 0x85, 0x5A), 0) > 20
    assert (count.get((0x2B, 0x6C, 0xB0), 0) > 20) == any(e["undefined"] is None and e["lo"] != e["hi"] for e in defined)
    assert ("interval undefined" in dom) == any(e["undefined"] for e in defined)


@pytest.mark.skipif(not os.environ.get("MBSKILLS_JUDGE"), reason="set MBSKILLS_JUDGE (and its API key) to calibrate a real judge")
def test_calibrate_a_real_judge(tmp_path, capsys):
    out = tmp_path / "calibration.json"
    code = main(["calibrate", "--bundle", str(REPO), "--judge", os.environ["MBSKILLS_JUDGE"], "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0 and not result["judge_errors"]
    assert result["judge_behaviours"]["items"] > 100


def test_scripted_run_numbers_match_hand_computed_expectations(tmp_path, good_bundle, monkeypatch, capsys):
    """demo-1..4 expect demo-skill, demo-5..6 expect none; the `skilled` model activates the
    expected skill and says which SKILL.md it saw, and the sidecar checks that. By hand:
    skills passes 12/12 records, baseline 4/12 (only demo-5, demo-6, whose content needs no
    skill: without the skill the first check finds `saw-skill:none`, a definite fail);
    per case uplift is 1,1,1,1,0,0 -> mean 4/6, 4 improved, 0 regressed, sign test p = 2/2^4.
    The process behaviours ("Reads the demo skill.") count in activation, not in these rates."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # every content behaviour has a check, so every record is graded through
    (good_bundle / "skills/demo-skill/evals/checks.yaml").write_text(
        "".join(
            f"demo-{i}:\n  - behaviour: Sets cfg.widget.enabled = True.\n    must: ['saw-skill:demo-skill']\n    must_not: ['saw-skill:none']\n"
            "  - behaviour: Does not invent other settings.\n    must_not: ['invented']\n"
            "  - behaviour: Explains the setting in one sentence.\n    must: ['answer to']\n"
            for i in range(1, 5)
        )
        + "".join(
            f"demo-{i}:\n  - behaviour: Does not mention the widget.\n    must_not: ['saw-skill:demo-skill']\n"
            "  - behaviour: Says the bundle does not cover it.\n    must: ['answer to']\n"
            "  - behaviour: Answers briefly.\n    must: ['answer to']\n"
            for i in (5, 6)
        )
    )
    admit_every_grader(good_bundle)
    cases = bundle_cases(Bundle(good_bundle))
    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in cases}, {"demo-skill": "# Demo skill"}).start()
    try:
        out = tmp_path / "run"
        assert main(["eval", "--bundle", str(good_bundle), "--model", "openai:skilled", "--base-url", served.openai_url, "--case", "demo-skill/*",
                     "--conditions", "baseline,skills", "--trials", "2", "--out", str(out), "--no-cache", "--progress", "plain"]) == 0
    finally:
        served.stop()
    assert main(["grade", str(out), "--resamples", "2000", "--seed", "1", "--fail-under-uplift", "0.6", "--fail-on-regression", "--min-cases", "6"]) == 0
    report = json.loads((out / "report.json").read_text())
    overall = report["overall"]
    assert (overall["conditions"]["skills"]["passes"], overall["conditions"]["skills"]["records"]) == (12, 12)
    assert (overall["conditions"]["baseline"]["passes"], overall["conditions"]["baseline"]["records"]) == (4, 12)
    assert overall["conditions"]["baseline"]["wilson"] == pytest.approx(list(stats.wilson_over_clusters([0, 0, 0, 0, 1, 1])))
    assert overall["conditions"]["skills"]["activation"] == {"records": 12, "passes": 12, "rate": 1.0}
    assert overall["conditions"]["baseline"]["activation"] is None  # no skill tool: nothing to measure
    uplift = overall["uplift"]["skills"]
    assert uplift["mean"] == pytest.approx(4 / 6) and (uplift["improved"], uplift["regressed"], uplift["unchanged"]) == (4, 0, 2)
    assert uplift["p_value"] == pytest.approx(2 / 2**4)
    assert (uplift["lo"], uplift["hi"]) == pytest.approx(stats.paired_bootstrap([1, 1, 1, 1, 0, 0], resamples=2000, seed=1)[1:])
    routing = report["routing"]
    assert routing["matrix"] == {"demo-skill": {"demo-skill": 8, "none": 0}, "none": {"demo-skill": 0, "none": 4}} and routing["accuracy"] == 1.0
    flags = {(b["case"], b["text"]): b["flag"] for b in report["behaviours"]}
    # a process behaviour has a verdict only where a skill tool was offered (skills), so it flags nothing
    assert flags[("demo-skill/demo-5", "Activates no skill.")] is None
    assert flags[("demo-skill/demo-1", "Reads the demo skill.")] is None
    demo1 = next(r for r in report["cases"] if r["case"] == "demo-skill/demo-1")["conditions"]
    assert demo1["baseline"]["pass_at_k"] == {"1": 0.0, "2": 0.0} and demo1["skills"]["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    text = (out / "BENCHMARK.md").read_text()
    assert "| pass rate (every content verdict passes) | 33% | 100% | +67 pts [" in text and "(+4/-0, p=0.125)" in text
    assert "| activation: process behaviours pass (skill tool offered) | no skill tool | 12/12 (100%) |" in text
    assert "| routing: expected skill only | n/a | 100% |" in text
    suites = {s.get("name"): s for s in ET.fromstring((out / "junit.xml").read_text())}
    assert (suites["skills"].get("tests"), suites["skills"].get("failures")) == ("6", "0")
    assert suites["baseline"].get("failures") == "4"
    html = (out / "report.html").read_text()
    assert "+67 [" in html and "demo-skill (skills)" in html
    assert main(["grade", str(out), "--fail-under-uplift", "0.7", "--min-cases", "6"]) == 1
    assert main(["grade", str(out), "--fail-under-uplift", "0.6"]) == 1  # 6 cases: underpowered at the default --min-cases


def test_the_reports_carry_the_gates_verdict(replay_run, capsys):
    assert main(["grade", str(replay_run), "--min-cases", "1"]) == 0
    report = json.loads((replay_run / "report.json").read_text())
    assert report["gates"] == {"given": False, "state": None, "failed": []}
    assert main(["grade", str(replay_run), "--fail-under-uplift", "0", "--min-coverage", "0", "--min-cases", "1"]) == 1
    report = json.loads((replay_run / "report.json").read_text())
    assert report["gates"]["state"] == "failed" and report["gates"]["failed"][0].startswith("uplift skills - baseline +1.000 has no interval")
    assert "**Gates: failed.**" in (replay_run / "BENCHMARK.md").read_text()
    assert "Gates: failed." in (replay_run / "report.html").read_text()
    capsys.readouterr()
