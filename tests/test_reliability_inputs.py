"""No traceback, no leaked key, nothing half-written (issue 22): one named test per fault a
reviewer reproduced, each through the CLI. The generated inputs are in
tests/test_fuzz_inputs.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import REPO, SENTINEL_KEY, copy_bundle
from runner.cli import main

CALIBRATION = REPO / "evals" / "calibration"
FSDP = "nemo-mbridge-perf-megatron-fsdp"

pytestmark = pytest.mark.usefixtures("sentinel_keys")


def replay(out: Path, *extra: str) -> int:
    return main(["eval", "--bundle", str(REPO), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline,skills", "--case", "fsdp-minimal-override",
                 "--case", "route-none-hf-conversion", "--out", str(out), "--progress", "plain", *extra])


def one_line_exit_2(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mbskills: error: "), err
    for needle in needles:
        assert needle in last, last
    return last


# -- a server's content in other shapes ---------------------------------------------------------


@pytest.mark.parametrize("fault, status", [("content-parts", "ok"), ("content-int", "error"), ("content-dict", "error")])
def test_message_content_as_parts_is_joined_and_other_shapes_are_error_records(tmp_path, repo_server, capsys, fault, status):
    repo_server.failures = [fault] * 3  # the request and both protocol retries
    run = tmp_path / "run"
    code = main(["eval", "--bundle", str(REPO), "--model", "openai:plain", "--base-url", repo_server.openai_url, "--conditions", "baseline", "--case", "fsdp-minimal-override",
                 "--max-retries", "0", "--no-cache", "--out", str(run), "--progress", "plain"])
    record = json.loads((run / "records.jsonl").read_text())
    assert record["status"] == status and code == (0 if status == "ok" else 1)
    if status == "ok":
        assert isinstance(record["answer"], str) and record["answer"].startswith("[plain] answer to")
    else:
        assert record["error"]["kind"] == "protocol" and "message.content is" in record["error"]["message"] and "not text" in record["error"]["message"]
    assert main(["grade", str(run), "--allow-incomplete", "--resamples", "100"]) == 0
    assert main(["show", str(run), "--case", "*"]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["content-parts", "content-dict"])
def test_a_judge_reply_of_another_shape_is_graded_or_a_judge_error(tmp_path, repo_server, capsys, fault):
    run = tmp_path / "run"
    assert replay(run) == 0
    repo_server.failures = [fault] * 6
    code = main(["grade", str(run), "--resamples", "100", "--judge", "openai:judge", "--judge-base-url", repo_server.openai_url, "--no-cache", "--max-retries", "0"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # parts are joined into the judge's JSON; an object is a judge error: exit 3 (harness), never 1 (a gate)
    assert code == (0 if fault == "content-parts" else 3), err


# -- run directories ------------------------------------------------------------------------------

RUN_JSON = [("trials", "abc"), ("trials", None), ("trials", [1]), ("cases", None), ("cases", 3), ("conditions", None), ("model", "DELETE"), ("bundle", 7)]
RECORD = [("case", "DELETE"), ("usage", "DELETE"), ("usage", None), ("answer", 5), ("turns", 5), ("activated_skills", None), ("tools_offered", None), ("cost_usd", "free"),
          ("messages", [{"role": "tool"}]), ("finish", "DELETE"), ("model", "DELETE")]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("template") / "run"
    assert replay(out) == 0
    return out


@pytest.mark.parametrize("field, value", RUN_JSON, ids=[f"run.json-{f}-{v!r}" for f, v in RUN_JSON])
def test_a_malformed_run_json_is_one_line_exit_2(tmp_path, template, capsys, field, value):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    data = json.loads((run / "run.json").read_text())
    if value == "DELETE":
        del data[field]
    else:
        data[field] = value
    (run / "run.json").write_text(json.dumps(data))
    capsys.readouterr()
    one_line_exit_2(capsys, main(["grade", str(run), "--resamples", "100"]), "run.json", field)
    one_line_exit_2(capsys, main(["show", str(run)]), "run.json", field)


@pytest.mark.parametrize("whole", [b"[1, 2]", b'"a run"', b"\xff\xfe", b""])
def test_a_run_json_that_is_not_an_object_is_one_line_exit_2(tmp_path, template, capsys, whole):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    (run / "run.json").write_bytes(whole)
    capsys.readouterr()
    one_line_exit_2(capsys, main(["grade", str(run), "--resamples", "100"]), "run.json")
    one_line_exit_2(capsys, main(["eval", "--bundle", str(REPO), "--model", f"replay:{CALIBRATION}", "--out", str(run)]), "run.json")


def test_a_byte_order_mark_in_run_json_is_read(tmp_path, template):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    (run / "run.json").write_bytes(b"\xef\xbb\xbf" + (run / "run.json").read_bytes())
    assert main(["grade", str(run), "--resamples", "100"]) == 0


@pytest.mark.parametrize("field, value", RECORD, ids=[f"record-{f}-{v!r}" for f, v in RECORD])
def test_a_malformed_record_is_one_line_exit_2_naming_its_line(tmp_path, template, capsys, field, value):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    lines = (run / "records.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    if value == "DELETE":
        del record[field]
    else:
        record[field] = value
    lines[1] = json.dumps(record)
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    one_line_exit_2(capsys, main(["grade", str(run), "--resamples", "100"]), "records.jsonl:2:", field)
    one_line_exit_2(capsys, main(["show", str(run), "--case", "*"]), "records.jsonl:2:")
    # and eval, resuming into it, refuses it the same way, leaving it as it was
    before = (run / "records.jsonl").read_bytes()
    one_line_exit_2(capsys, replay(run), "records.jsonl:2:")
    assert (run / "records.jsonl").read_bytes() == before


def test_an_error_record_without_its_error_is_one_line_exit_2(tmp_path, template, capsys):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    lines = (run / "records.jsonl").read_text().splitlines()
    lines[0] = json.dumps(json.loads(lines[0]) | {"status": "error", "error": None})
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    one_line_exit_2(capsys, main(["grade", str(run), "--resamples", "100", "--allow-incomplete"]), "records.jsonl:1:", "error")


# -- disk full, read-only folders -------------------------------------------------------------------


def _in_tmpfs(tmp_path: Path, script: str, size: str = "64k") -> subprocess.CompletedProcess:
    mount = tmp_path / "small"
    mount.mkdir()
    shell = f"mount -t tmpfs -o size={size} tmpfs {mount} && cd {mount} && {script}"
    return subprocess.run(["unshare", "--mount", "sh", "-c", shell], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPENAI_API_KEY": SENTINEL_KEY, "PYTHONPATH": str(REPO)})


def _can_mount(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        return subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs {probe}"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_eval_and_grade_on_a_full_disk_say_so_in_one_line_and_leave_nothing_half_written(tmp_path):
    if not _can_mount(tmp_path):
        pytest.skip("no mount namespace here (unshare --mount); the injected-fault tests below cover the write sites")
    cli = f"{sys.executable} -m runner.cli"
    # a 64 KiB disk: the run starts, fills it and stops with one line; what is there is whole
    script = (f"{cli} eval --bundle {REPO} --model replay:{CALIBRATION} --conditions baseline,skills,inline --out run --progress plain; echo EXIT=$?; "
              "python3 -c \"import json,sys; [json.loads(l) for l in open('run/records.jsonl')]; print('RECORDS', sum(1 for _ in open('run/records.jsonl')))\"; "
              "ls run; cp -r run /tmp/saved-run-$$ 2>/dev/null; echo SAVED=/tmp/saved-run-$$")
    done = _in_tmpfs(tmp_path, script)
    out, err = done.stdout, done.stderr
    assert "Traceback" not in err, err
    assert "EXIT=2" in out and "No space left on device, errno 28" in err and err.strip().splitlines()[-1].startswith("mbskills: error: "), (out, err)
    assert "RECORDS" in out  # every line that is there parses: no partial record
    assert not any(name.startswith(("run.json.tmp", "records.jsonl.tmp")) for name in out.split())
    saved = Path(out.split("SAVED=")[1].split()[0])
    try:
        # with space again, the same command resumes and finishes
        assert main(["eval", "--bundle", str(REPO), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline,skills,inline", "--out", str(saved), "--progress", "plain"]) == 0
        assert main(["grade", str(saved), "--resamples", "100"]) == 0
    finally:
        shutil.rmtree(saved, ignore_errors=True)


def test_grade_into_a_read_only_run_folder_is_one_line_and_writes_nothing(tmp_path, template, capsys):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    before = sorted(p.name for p in run.iterdir())
    run.chmod(0o555)
    try:
        if os.access(run, os.W_OK):  # root ignores the mode: inject the fault the kernel would give
            real = os.replace

            def read_only(src, dst):
                raise OSError(30, "Read-only file system")

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(os, "replace", read_only)
                code = main(["grade", str(run), "--resamples", "100"])
            assert os.replace is real
        else:
            code = main(["grade", str(run), "--resamples", "100"])
        one_line_exit_2(capsys, code, "cannot write")
        assert sorted(p.name for p in run.iterdir()) == before  # no report, no temporary
    finally:
        run.chmod(0o755)


def test_a_record_that_cannot_be_appended_is_cut_back_and_the_run_resumes(tmp_path, capsys, monkeypatch):
    from runner.run import rundir

    run = tmp_path / "run"
    real = os.write
    calls = {"n": 0}

    def fills_up(fd, data):
        calls["n"] += 1
        if calls["n"] == 4:  # after the lock's pid and two records: half a line goes to disk, then the disk is full
            real(fd, data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(rundir.os, "write", fills_up)
    one_line_exit_2(capsys, replay(run), "records.jsonl: cannot write (No space left on device, errno 28)")
    lines = (run / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)  # the half line is gone
    monkeypatch.setattr(rundir.os, "write", real)
    assert replay(run) == 0 and len((run / "records.jsonl").read_text().splitlines()) == 4


# -- options checked before any work ------------------------------------------------------------------


@pytest.mark.parametrize("option, value, message", [("--resamples", "0", "0 is under 100"), ("-j", "-1", "-1 is under 1"), ("-j", "0", "0 is under 1"), ("--timeout", "nan", "not a finite number"),
                                                     ("--max-retries", "-1", "-1 is under 0"), ("--min-cases", "0", "0 is under 1")])
def test_grade_options_out_of_range_are_refused_at_once(tmp_path, template, option, value, message):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "runner.cli", "grade", str(template), option, value], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert time.perf_counter() - started < 30  # -j 0 once hung for ever


def test_eval_refuses_a_case_whose_expected_skill_the_bundle_lacks(tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    path = bundle / "evals" / "routing.json"
    cases = json.loads(path.read_text())
    cases[0]["expected_skill"] = "no-such-skill"
    path.write_text(json.dumps(cases, indent=2))
    code = main(["eval", "--bundle", str(bundle), "--model", f"replay:{CALIBRATION}", "--out", str(tmp_path / "run")])
    one_line_exit_2(capsys, code, "evals/unknown-skill", "no-such-skill")
    assert not (tmp_path / "run").exists()


def test_rate_limit_waits_stop_at_the_deadline(tmp_path, repo_server, capsys):
    repo_server.failures = ["429-slow"] * 10
    run = tmp_path / "run"
    started = time.perf_counter()
    code = main(["eval", "--bundle", str(REPO), "--model", "openai:plain", "--base-url", repo_server.openai_url, "--conditions", "baseline", "--case", "fsdp-minimal-override",
                 "--max-retries", "0", "--rate-limit-rounds", "5", "--rate-limit-deadline", "1.5", "--no-cache", "--out", str(run), "--progress", "plain"])
    assert time.perf_counter() - started < 20
    record = json.loads((run / "records.jsonl").read_text())
    assert code == 1 and record["error"]["kind"] == "rate_limit" and "would pass --rate-limit-deadline 1.5 s" in record["error"]["message"]
    assert record["requests"] == 2  # the first attempt and one after a 1 s wait; the next 1 s would pass the deadline


# -- keys --------------------------------------------------------------------------------------------


def _forms(key: str) -> list[str]:
    forms = [key, urllib.parse.quote(key, safe=""), base64.b64encode(key.encode()).decode().rstrip("="), base64.b64encode(f"user:{key}".encode()).decode()[8:-4]]
    return [f for f in forms if len(f) >= 8]


def test_a_key_echoed_by_a_debugging_proxy_is_never_written(tmp_path, repo_server, capsys):
    repo_server.failures = ["200-echo"] * 6
    run = tmp_path / "run"
    main(["eval", "--bundle", str(REPO), "--model", "openai:plain", "--base-url", repo_server.openai_url, "--conditions", "baseline", "--case", "fsdp-minimal-override",
          "--case", "fsdp-verify-before-launch", "--max-retries", "0", "--cache", str(tmp_path / "cache.sqlite"), "--out", str(run), "--progress", "plain"])
    repo_server.failures = ["200-echo"] * 6
    main(["grade", str(run), "--allow-incomplete", "--resamples", "100", "--judge", "openai:judge", "--judge-base-url", repo_server.openai_url, "--max-retries", "0",
          "--cache", str(tmp_path / "cache.sqlite")])
    out, err = capsys.readouterr()
    record = json.loads((run / "records.jsonl").read_text().splitlines()[0])
    assert record["error"]["kind"] == "not_json" and "[redacted]" in record["error"]["message"]  # the echo was there, and was cut
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"records.jsonl", "run.json", "grades.jsonl", "report.json", "BENCHMARK.md", "report.html", "junit.xml", "cache.sqlite"}
    for form in _forms(SENTINEL_KEY):
        assert form not in out + err, form
        for path in written:
            assert form.encode() not in path.read_bytes(), (form, path)


# -- YAML ---------------------------------------------------------------------------------------------


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_in_under_a_second(tmp_path, capsys):
    bundle = copy_bundle(tmp_path)
    assert main(["eval", "--bundle", str(bundle), "--model", f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--out", str(tmp_path / "run")]) == 0
    sidecar = bundle / "skills" / FSDP / "evals" / "checks.yaml"
    sidecar.write_text(_alias_bomb() + sidecar.read_text())
    capsys.readouterr()
    for argv in (["validate", str(bundle)], ["grade", str(tmp_path / "run"), "--bundle", str(bundle), "--resamples", "100"],
                 ["eval", "--bundle", str(bundle), "--model", f"replay:{CALIBRATION}", "--case", "fsdp-minimal-override", "--out", str(tmp_path / "run2")]):
        started = time.perf_counter()
        code = main(argv)
        assert time.perf_counter() - started < 1.0, argv
        out, err = capsys.readouterr()
        assert "yaml/alias" in out + err and code in (1, 2), argv
    card = bundle / "skills" / FSDP / "card.yaml"
    card.write_text(_alias_bomb() + card.read_text())
    started = time.perf_counter()
    assert main(["validate", str(card)]) == 1
    assert time.perf_counter() - started < 1.0 and "yaml/alias" in capsys.readouterr().out
    # an answer's YAML block with aliases is left as text, not expanded
    from runner.grade.checks import normalise

    started = time.perf_counter()
    normalise("```yaml\n" + _alias_bomb() + "```\n")
    assert time.perf_counter() - started < 1.0


def test_a_run_whose_trials_is_a_float_is_one_line_not_a_traceback(tmp_path, capsys):
    # JSON Schema counts 1.0 as an integer; the plan needs a whole number (found by the fuzzer)
    from runner.cli import main as cli

    calibration = REPO / "evals" / "calibration"
    run = tmp_path / "run"
    assert cli(["eval", "--bundle", str(REPO), "--model", f"replay:{calibration}", "--case", "route-fsdp-oom", "--out", str(run), "--progress", "plain"]) == 0
    info = json.loads((run / "run.json").read_text())
    info["trials"] = 1.0
    (run / "run.json").write_text(json.dumps(info))
    capsys.readouterr()
    assert cli(["grade", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("run.json: field 'trials' 1.0 is not a whole number") and "\n" not in err
