"""Uplift that measures the skill (issue 21): each hole a reviewer found, reproduced through
the CLI and seen closed. Runs are replayed from the labelled answers or made against the
scripted models on 127.0.0.1, then graded as a user would."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, copy_bundle
from model_server import CaseInfo, ModelServer
from runner.cli import main
from runner.load import Bundle, bundle_cases

CALIBRATION = REPO / "evals" / "calibration"
FSDP, OVERLAP = "nemo-mbridge-perf-megatron-fsdp", "nemo-mbridge-perf-tp-dp-comm-overlap"

pytestmark = pytest.mark.usefixtures("sentinel_keys")


# The shipped bundle with every grader admitted: these tests are about what graders decide.
BUNDLE = REPO


@pytest.fixture(autouse=True)
def admitted(admitted_repo, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BUNDLE", admitted_repo)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    # calibrations are cached under XDG_CACHE_HOME: each test starts with none
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def replay(out: Path, model: str = f"replay:{CALIBRATION}", *extra: str, bundle: Path | None = None) -> int:
    return main(["eval", "--bundle", str(bundle or BUNDLE), "--model", model, "--conditions", "baseline,skills", "--out", str(out), "--progress", "plain", *extra])


def grade(run: Path, *extra: str, bundle: Path | None = None) -> int:
    return main(["grade", str(run), "--bundle", str(bundle or BUNDLE), "--resamples", "200", *extra])


def report_of(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


def lines_of(run: Path) -> list[str]:
    return (run / "records.jsonl").read_text().splitlines()


# -- content and process apart ---------------------------------------------------------------


def test_identical_answers_under_every_condition_give_content_uplift_zero_and_pass_no_gate(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["eval", "--bundle", str(BUNDLE), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline,skills,inline", "--out", str(run), "--progress", "plain"]) == 0
    assert grade(run) == 0
    report = report_of(run)
    for condition in ("skills", "inline"):
        uplift = report["overall"]["uplift"][condition]
        assert uplift["mean"] == 0 and (uplift["improved"], uplift["regressed"]) == (0, 0)
        assert uplift["undefined"] and uplift["lo"] is None and uplift["hi"] is None
        for group in report["groups"].values():
            assert group["uplift"][condition]["mean"] in (0, None)
    # before the split, every "improved" case was one whose baseline failed "Read the ... skill"
    assert report["overall"]["conditions"]["skills"]["activation"]["rate"] > 0
    assert report["overall"]["conditions"]["baseline"]["activation"] is None
    capsys.readouterr()
    for threshold in ("0", "-0.5"):
        assert grade(run, "--fail-under-uplift", threshold, "--min-coverage", "0") == 1
        assert "has no interval (every case differs by +0 pts" in capsys.readouterr().err


def test_different_answer_sets_per_condition_show_a_real_difference(tmp_path):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}?baseline=bad-1") == 0
    assert grade(run) == 0
    overall = report_of(run)["overall"]
    assert overall["conditions"]["baseline"]["pass_rate"] < overall["conditions"]["skills"]["pass_rate"]
    assert overall["uplift"]["skills"]["mean"] > 0 and overall["uplift"]["skills"]["improved"] > 0
    assert replay(tmp_path / "bad", f"replay:{CALIBRATION}?nosuch=bad-1") == 2
    assert replay(tmp_path / "bad2", f"replay:{CALIBRATION}?baseline=bad-9") == 2


# -- 1. the identity of a run ---------------------------------------------------------------


def test_a_second_eval_with_other_trials_or_conditions_on_the_same_out_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--trials", "2") == 0
    before = (run / "records.jsonl").read_bytes()
    capsys.readouterr()
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--trials", "1") == 2
    assert "made by a different command (trials: 2 there, 1 now)" in capsys.readouterr().err
    assert main(["eval", "--bundle", str(BUNDLE), "--model", f"replay:{CALIBRATION}", "--conditions", "skills", "--case", "fsdp-minimal-override", "--trials", "2", "--out", str(run)]) == 2
    assert "(conditions:" in capsys.readouterr().err
    assert (run / "records.jsonl").read_bytes() == before


@pytest.mark.parametrize("damage, message", [
    ("duplicate", "appears again (first on line 1)"),
    ("other-model", "was written by openai:gpt-4.1, this run is replay:"),
    ("trials-in-run-json", "is outside this run's plan"),
    ("conditions-in-run-json", "is outside this run's plan"),
    ("key-mismatch", "which is another record"),
])
def test_records_that_are_not_this_runs_plan_are_refused_with_one_line(tmp_path, capsys, damage, message):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--trials", "2") == 0
    lines, info = lines_of(run), json.loads((run / "run.json").read_text())
    first = json.loads(lines[0])
    if damage == "duplicate":
        lines.append(lines[0])
    elif damage == "other-model":
        lines[0] = json.dumps(first | {"model": {"provider": "openai", "api": "chat", "base_url": None, "model": "gpt-4.1", "settings": {}}})
    elif damage == "trials-in-run-json":
        info["trials"] = 1
    elif damage == "conditions-in-run-json":
        info["conditions"] = ["skills"]
    else:
        lines[0] = json.dumps(first | {"trial": 1 - first["trial"]})
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    (run / "run.json").write_text(json.dumps(info))
    capsys.readouterr()
    assert grade(run, "--fail-under-pass", "0.9") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "records.jsonl:" in err
    assert not (run / "report.json").exists()
    assert main(["show", str(run)]) == 2  # show reads the run the same way


def test_coverage_counts_the_planned_records_not_lines(tmp_path):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-*", "--trials", "2") == 0
    lines = lines_of(run)
    (run / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # one planned record missing
    assert grade(run, "--allow-incomplete") == 0
    report = report_of(run)
    for condition in report["overall"]["conditions"].values():
        assert condition["coverage"] is None or condition["coverage"] <= 1
    for row in report["cases"]:
        for cell in row["conditions"].values():
            assert cell["coverage"] is None or cell["coverage"] <= 1 and cell["records"] <= 2


# -- 2. evidence with substance -----------------------------------------------------------------


def test_a_judge_quoting_markup_or_a_stopword_supports_nothing(tmp_path, repo_server, capsys):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}?baseline=bad-1&skills=bad-2") == 0  # known-bad answers only
    assert grade(run) == 0
    without = report_of(run)["overall"]["conditions"]
    trivial = ["--judge", "openai:judge-trivial", "--judge-base-url", repo_server.openai_url, "--no-cache"]
    assert grade(run, *trivial) == 0
    report = report_of(run)
    verdicts = report["grading"]["judge_verdicts"]
    assert verdicts["yes"] > 0 and verdicts["unsupported"] == verdicts["yes"]
    assert {u["problem"] for u in report["unsupported"]} <= {"the quote is empty or only markup and punctuation", "the quote 'e' is too short to show anything", "the quote 'the' is too short to show anything"}
    for condition in ("baseline", "skills"):
        assert report["overall"]["conditions"][condition]["passes"] <= without[condition]["passes"]
    capsys.readouterr()
    assert grade(run, *trivial, "--fail-under-pass", "0.5", "--min-coverage", "0") == 1


def test_a_judge_without_a_calibration_decides_no_gate(tmp_path, repo_server, capsys):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}?baseline=bad-1") == 0
    judge = ["--judge", "openai:judge", "--judge-base-url", repo_server.openai_url, "--no-cache"]
    gate = ["--fail-under-pass", "0", "--min-coverage", "0", "--min-cases", "1"]
    capsys.readouterr()
    assert grade(run, *judge, *gate) == 1
    err = capsys.readouterr().err
    assert "gate failed: judge openai:judge is not calibrated" in err and "mbskills calibrate --judge openai:judge" in err
    assert grade(run, *judge) == 0  # no gate: the reports say it, the exit does not
    # a calibration of that judge on this bundle's held-out set, with its kappa, settles it
    calibration = tmp_path / "calibration.json"
    code = main(["calibrate", "--bundle", str(BUNDLE), "--judge", "openai:judge", "--judge-base-url", repo_server.openai_url, "--no-cache", "--out", str(calibration)])
    assert code == 0
    kappa = json.loads(calibration.read_text())["sets"][0]["policy_with_judge"]["kappa"]
    assert json.loads(calibration.read_text())["sets"][0]["name"] == "held-out"
    below, above = f"{max(kappa - 0.05, 0):.3f}", f"{min(kappa + 0.05, 1):.3f}"
    assert grade(run, *judge, *gate, "--calibration", str(calibration), "--min-kappa", below) == 0
    assert grade(run, *judge, *gate, "--calibration", str(calibration), "--min-kappa", above) == 1
    assert f"is under --min-kappa {float(above)}" in capsys.readouterr().err
    assert grade(run, *judge, *gate, "--min-kappa", below) == 0  # calibrate cached it for this judge and bundle
    # another judge, or the same judge on another bundle, is not calibrated by it
    other = ["--judge", "openai:judge-liar", "--judge-base-url", repo_server.openai_url, "--no-cache"]
    assert grade(run, *other, *gate, "--calibration", str(calibration)) == 1
    assert "calibrates another judge" in capsys.readouterr().err


# -- 3. forbidden-only checks, answers that say nothing, patterns that cannot be trusted --------


def _answer_run(tmp_path: Path, case: str, answer: str) -> Path:
    """A replay run of one case whose every answer is `answer`."""
    answers = tmp_path / "answers"
    owner, _, case_id = case.partition("/")
    (answers / owner).mkdir(parents=True)
    (answers / owner / f"{case_id}.md").write_text(answer)
    run = tmp_path / "run"
    assert replay(run, f"replay:{answers}", "--case", case) == 0
    return run


@pytest.mark.parametrize("answer", ["I do not know.", "", "**", "Not sure, sorry."])
def test_an_answer_that_says_nothing_fails_every_content_behaviour(tmp_path, answer):
    run = _answer_run(tmp_path, f"{FSDP}/fsdp-minimal-override", answer)
    assert grade(run) == 0
    grades = [json.loads(line) for line in (run / "grades.jsonl").read_text().splitlines()]
    for g in grades:
        assert g["passed"] is False and g["says_nothing"]
        assert all(b["verdict"] is False and b["source"] == "answer" for b in g["behaviours"] if b["kind"] == "content")


def test_a_forbidden_only_check_passes_nothing_on_its_own(tmp_path):
    # the answer avoids use_torch_fsdp2 but says nothing any check finds: the clear stays ungraded
    run = _answer_run(tmp_path, f"{FSDP}/fsdp-minimal-override", "Turn on the sharded data parallel wrapper and pick the dtensor checkpoint format; then launch as usual.")
    assert grade(run) == 0
    g = json.loads((run / "grades.jsonl").read_text().splitlines()[0])
    forbidden = next(b for b in g["behaviours"] if b["text"] == "Does not tell the user to set use_torch_fsdp2.")
    assert forbidden["check_kind"] == "clear" and forbidden["verdict"] is None
    assert g["passed"] is None and g["status"] == "ungraded"


@pytest.mark.parametrize("placement", [
    "Also set `cfg.dist.use_torch_fsdp2 = True` so both wrappers agree.",
    "- also set cfg.dist.use_torch_fsdp2 = True",
    "```python\ncfg.ddp.use_megatron_fsdp = True\ncfg.dist.use_torch_fsdp2 = True\n```",
])
def test_a_forbidden_statement_trips_in_prose_list_and_code(tmp_path, placement):
    good = (CALIBRATION / FSDP / "fsdp-minimal-override.md").read_text().split("---", 2)[2]
    run = _answer_run(tmp_path, f"{FSDP}/fsdp-minimal-override", good + "\n\n" + placement + "\n")
    assert grade(run) == 0
    g = json.loads((run / "grades.jsonl").read_text().splitlines()[0])
    forbidden = next(b for b in g["behaviours"] if b["text"] == "Does not tell the user to set use_torch_fsdp2.")
    assert (forbidden["check_kind"], forbidden["verdict"]) == ("tripwire", False) and g["passed"] is False


def test_every_shipped_forbidden_pattern_is_found_wherever_its_statement_stands():
    # whatever a must_not pattern finds in a code line, it finds in a sentence and in a list item
    import re

    from runner.load import load_checks

    cases = bundle_cases(Bundle(REPO))
    probes = 0
    for checks in load_checks(cases).values():
        for check in checks:
            for pattern in check.must_not:
                for answer in (CALIBRATION.rglob("*.md")):
                    for line in answer.read_text().splitlines():
                        found = pattern.search(line.strip())
                        if not found or not found.group(0).strip():
                            continue
                        statement = found.group(0).strip()
                        for placed in (f"Also, {statement} here.", f"- {statement}", f"    {statement}"):
                            assert pattern.search(placed), f"/{pattern.pattern}/ misses {placed!r}"
                        probes += 1
                        break
    assert probes > 0


@pytest.mark.parametrize("field, pattern, rule", [
    ("must", "x?", "checks/empty-match"),
    ("must", "(?=.*)", "checks/empty-match"),
    ("must_not", "^\\s*cfg\\.dist\\.use_torch_fsdp2\\s*=\\s*True", "checks/anchored-forbidden"),
    ("must_not", "use_torch_fsdp2 = True$", "checks/anchored-forbidden"),
    ("must_not", "(?:\\A|foo)use_torch_fsdp2", "checks/anchored-forbidden"),
    ("must_not", "", "checks/empty-match"),
])
def test_validate_refuses_patterns_that_cannot_be_trusted(tmp_path, capsys, field, pattern, rule):
    bundle = copy_bundle(tmp_path)
    sidecar = bundle / "skills" / FSDP / "evals" / "checks.yaml"
    text = sidecar.read_text().replace("fsdp-minimal-override:\n", f"fsdp-minimal-override:\n  - behaviour: \"Does not tell the user to set use_torch_fsdp2.\"\n    {field}: [{json.dumps(pattern)}]\n", 1)
    sidecar.write_text(text)
    assert main(["validate", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert f"checks.yaml:" in out and rule in out
    # and nothing runs or grades with it: eval refuses the bundle with the same rule, and so
    # does grade of a run made before the sidecar was changed
    assert replay(tmp_path / "run", f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", bundle=bundle) == 2
    assert rule in capsys.readouterr().err
    assert replay(tmp_path / "run", f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override") == 0
    assert grade(tmp_path / "run", bundle=bundle) == 2
    assert rule in capsys.readouterr().err


# -- 4. a bundle that changed since the run ---------------------------------------------------


@pytest.mark.parametrize("change, named", [
    ("skill", f"skills/{FSDP}/SKILL.md changed"),
    ("checks", f"skills/{FSDP}/evals/checks.yaml changed"),
    ("behaviours", f"skills/{FSDP}/evals/evals.json changed"),
    ("reference", f"skills/{OVERLAP}/references/dp-overlap.md changed"),
])
def test_grading_with_a_changed_bundle_exits_2_naming_what_changed(tmp_path, capsys, change, named):
    bundle = copy_bundle(tmp_path)
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--case", "overlap-*", bundle=bundle) == 0
    if change == "skill":
        path = bundle / "skills" / FSDP / "SKILL.md"
        path.write_text(path.read_text() + "\nOne more line.\n")
    elif change == "checks":
        path = bundle / "skills" / FSDP / "evals" / "checks.yaml"
        path.write_text(path.read_text() + "\n# edited\n")
    elif change == "behaviours":
        path = bundle / "skills" / FSDP / "evals" / "evals.json"
        data = json.loads(path.read_text())
        for case in data["evals"] if isinstance(data, dict) else data:
            key = "expected_behavior" if "expected_behavior" in case else "expectations"
            kept = [b for b in case[key] if not b.startswith("Read the")]  # the process behaviours go
            case[key] = kept or case[key]
        path.write_text(json.dumps(data, indent=2))
    else:
        path = bundle / "skills" / OVERLAP / "references" / "dp-overlap.md"
        path.write_text(path.read_text() + "\n")
    capsys.readouterr()
    assert grade(run, "--fail-under-pass", "0", bundle=bundle) == 2
    err = capsys.readouterr().err
    assert "the bundle changed since this run" in err and named in err and "--allow-changed-bundle" in err and err.count("\n") == 1
    assert not (run / "report.json").exists()
    assert grade(run, "--allow-changed-bundle", bundle=bundle) == 0
    report = report_of(run)
    assert report["run"]["bundle_changed_since_run"] and named in report["run"]["bundle_changes"]
    assert (run / "BENCHMARK.md").read_text().splitlines()[2].startswith("> **Graded with a bundle that changed since the run")
    assert 'id="changed"' in (run / "report.html").read_text()
    first = ET.fromstring((run / "junit.xml").read_text())[0]
    assert first.get("name") == "bundle" and named in first.find("testcase/skipped").get("message")


# -- 5. small samples ---------------------------------------------------------------------------


def test_one_case_one_trial_is_underpowered_and_has_no_interval(tmp_path, capsys):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}?baseline=bad-2", "--case", "fsdp-minimal-override") == 0
    assert grade(run) == 0
    uplift = report_of(run)["overall"]["uplift"]["skills"]
    assert uplift["cases"] == 1 and uplift["lo"] is None and "an interval needs at least two" in uplift["undefined"]
    assert "interval undefined" in (run / "BENCHMARK.md").read_text()
    capsys.readouterr()
    assert grade(run, "--fail-under-uplift", "0.1") == 1
    assert "underpowered: uplift skills - baseline over 1 cases < --min-cases 10" in capsys.readouterr().err
    assert grade(run, "--fail-under-pass", "0.5") == 1
    assert "underpowered: pass rate under skills over 1 cases" in capsys.readouterr().err
    assert grade(run, "--fail-under-uplift", "0.1", "--min-cases", "1") == 1
    assert "has no interval" in capsys.readouterr().err


def test_twenty_trials_of_one_case_are_one_case_in_the_pooled_interval(tmp_path):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--trials", "20") == 0
    assert grade(run) == 0
    skills = report_of(run)["overall"]["conditions"]["skills"]
    assert skills["records"] == 20 and skills["cases_counted"] == 1 and skills["wilson"] is None
    assert "1 cases, undefined" in (run / "BENCHMARK.md").read_text()


# -- 6. order-aware routing ----------------------------------------------------------------------


def test_rather_than_fails_when_the_other_skill_was_activated_first(tmp_path):
    cases = bundle_cases(Bundle(REPO))
    case = next(c for c in cases if any("rather than the Megatron FSDP skill" in b.text for b in c.behaviours))

    def both(kind, body, seen):  # the other skill first, then the right one, then an answer
        if len(seen.calls) == 0:
            return "", [("activate_skill", {"name": FSDP})]
        if len(seen.calls) == 1:
            return "", [("activate_skill", {"name": OVERLAP})]
        return "An answer.", []

    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in cases}, {}, script=both).start()
    try:
        run = tmp_path / "run"
        assert main(["eval", "--bundle", str(BUNDLE), "--model", "openai:any", "--base-url", served.openai_url, "--conditions", "skills", "--case", case.key,
                     "--out", str(run), "--no-cache", "--progress", "plain"]) == 0
    finally:
        served.stop()
    assert grade(run) == 0
    g = json.loads((run / "grades.jsonl").read_text().splitlines()[0])
    assert g["activated"] == [FSDP, OVERLAP]
    rather = next(b for b in g["behaviours"] if "rather than" in b["text"])
    assert rather["verdict"] is False and f"{FSDP} was read before {OVERLAP}" in rather["transcript_why"]
    assert g["process_passed"] is False


# -- 7. a reply the output limit cut off ------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_an_empty_reply_cut_off_by_the_output_limit_is_truncated_and_fails(tmp_path, repo_server, api):
    repo_server.failures = ["length"]
    model = ["--model", "anthropic:plain" if api == "anthropic" else "openai:plain", "--base-url", repo_server.anthropic_url if api == "anthropic" else repo_server.openai_url]
    if api == "responses":
        model += ["--api", "responses"]
    run = tmp_path / "run"
    assert main(["eval", "--bundle", str(BUNDLE), *model, "--conditions", "baseline", "--case", "route-none-hf-conversion", "--case", "fsdp-minimal-override",
                 "--out", str(run), "--no-cache", "--progress", "plain", "-j", "1"]) == 0
    records = [json.loads(line) for line in lines_of(run)]
    assert [r["status"] for r in records].count("truncated") == 1
    assert grade(run, "--allow-incomplete") == 0
    grades = {json.loads(line)["key"]: json.loads(line) for line in (run / "grades.jsonl").read_text().splitlines()}
    cut = next(r for r in records if r["status"] == "truncated")
    assert grades[cut["key"]]["status"] == "truncated" and grades[cut["key"]]["passed"] is False
    assert report_of(run)["health"]["truncated"] == 1
    # and an eval that runs it again keeps it: the model's outcome, not a harness error
    assert main(["eval", "--bundle", str(BUNDLE), *model, "--conditions", "baseline", "--case", "route-none-hf-conversion", "--case", "fsdp-minimal-override",
                 "--out", str(run), "--no-cache", "--progress", "plain"]) == 0
    assert [json.loads(line)["status"] for line in lines_of(run)].count("truncated") == 1


# -- 8. JUnit --------------------------------------------------------------------------------------


def test_junit_is_well_formed_with_control_characters_and_fails_ungraded_records_under_a_gate(tmp_path):
    run = tmp_path / "run"
    assert replay(run, f"replay:{CALIBRATION}", "--case", "fsdp-*") == 0
    lines = lines_of(run)
    broken = json.loads(lines[0]) | {"status": "error", "error": {"kind": "protocol", "message": "bad byte \x00 bell \x07 escape \x1b[31m end", "status": None}}
    (run / "records.jsonl").write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    assert grade(run, "--allow-incomplete", "--fail-under-pass", "0") == 1
    text = (run / "junit.xml").read_text()
    root = ET.fromstring(text)  # well-formed
    assert "\\x00" in text and "\\x07" in text and "\\x1b" in text
    assert not any(ch in text for ch in "\x00\x07\x1b")
    failures = [t for t in root.iter("testcase") if t.find("failure") is not None]
    assert any("not graded, and a gate was given" in t.find("failure").get("message") for t in failures)
    assert not any(t.find("skipped") is not None and "ungraded" in t.find("skipped").get("message") for t in root.iter("testcase"))


def test_no_labelled_answer_that_says_something_is_taken_for_one_that_says_nothing():
    # every answer in the three labelled sets says something (the bad ones say wrong things):
    # the "says nothing" rule must not fail any of them by construction
    from runner.grade.checks import says_nothing
    from runner.load import DEV, HELD_OUT, TRAINING, load_labelled

    cases = bundle_cases(Bundle(REPO))
    answers = [entry for folder in (HELD_OUT, DEV, TRAINING) for entry in load_labelled(REPO / "evals" / folder, cases)]
    assert len(answers) > 500
    assert [str(e.path) for e in answers if says_nothing(e.answer)] == []
    for nothing in ("", "   ", "**", "...", "I do not know.", "I don't know", "Sorry, I am not sure.", "N/A", "ok"):
        assert says_nothing(nothing), nothing
    for something in ("Set `cfg.ddp.use_megatron_fsdp = True`.", "fsdp_dtensor", "Use the optim_grads_params strategy.", "No: validate() accepts it and _ddp_wrap fails later."):
        assert says_nothing(something) is None, something
