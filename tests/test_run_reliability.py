"""Faults held: a run under 30% faulted requests, SIGKILL at random moments, two runs on
one directory, a model probing the skill tools, and API keys that must never be written."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_server import CaseInfo, ModelServer
from runner.cli import main
from runner.load import bundle_cases
from runner.run.rundir import read_records
from runner.load import Bundle

from conftest import REPO, SENTINEL_KEY

MARKERS = {
    "nemo-mbridge-perf-megatron-fsdp": "# Megatron FSDP in Megatron-Bridge",
    "nemo-mbridge-perf-tp-dp-comm-overlap": "# TP, DP and PP communication overlap in Megatron-Bridge",
}
CASES = bundle_cases(Bundle(REPO))
KEY = SENTINEL_KEY
CONTENT = ("key", "status", "answer", "messages", "activated_skills", "files_read", "usage", "finish")


def serve(bundle: Path = REPO, **options) -> ModelServer:
    cases = bundle_cases(Bundle(bundle))
    return ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in cases}, MARKERS, **options).start()


@pytest.fixture(autouse=True)
def keys(sentinel_keys):
    return sentinel_keys


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def load(out: Path) -> list[dict]:
    return [json.loads(line) for line in lines(out / "records.jsonl")]


def test_360_records_with_30_percent_of_requests_faulted(tmp_path, capsys):
    server = serve(fault_rate=0.3, seed=11, hang_s=1.0)
    out = tmp_path / "run"
    args = ["eval", "--bundle", str(REPO), "--model", "openai:skilled", "--base-url", server.openai_url, "--conditions", "baseline,skills,inline",
            "--trials", "5", "-j", "32", "--timeout", "0.5", "--max-retries", "1", "--rate-limit-rounds", "1",
            "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "--progress", "plain"]
    try:
        started = time.perf_counter()
        code = main(args)
        first_wall = time.perf_counter() - started
        first = load(out)
        keys = [r["key"] for r in first]
        assert len(keys) == len(set(keys)) == len(CASES) * 3 * 5
        errors = [r for r in first if r["status"] == "error"]
        assert code == (1 if errors else 0)
        assert errors, "with one retry, some requests should fail for good under 30% faults"
        for record in errors:
            assert record["error"]["kind"] in {"rate_limit", "server", "timeout", "connection", "protocol"} and record["error"]["message"]
            assert record["finish"] == "error" and record["answer"] == ""
        requests, faults = server.count(), sum(server.faults_served.values())
        assert set(server.faults_served) == set(server.fault_kinds)
        assert 0.25 < faults / requests < 0.35
        # failed records are the harness's failures, never the model's: the run is incomplete
        assert main(["grade", str(out), "--resamples", "200"]) == 3
        assert f"incomplete: {len(keys) - len(errors)} of {len(keys)} records (0 missing, {len(errors)} ended in an error)" in capsys.readouterr().err
        assert not (out / "report.json").exists()  # nothing half-graded is written
        assert main(["grade", str(out), "--resamples", "200", "--allow-incomplete"]) == 0
        report = json.loads((out / "report.json").read_text())
        assert report["health"]["record_errors"] == len(errors) and report["completeness"]["errors"] == len(errors)
        for condition in ("baseline", "skills", "inline"):
            ok = sum(1 for r in first if r["condition"] == condition and r["status"] == "ok")
            cell = report["overall"]["conditions"][condition]
            assert cell["records"] + cell["ungraded"] + cell["process_only"] == ok and cell["errors"] == len(CASES) * 5 - ok
        assert f"Incomplete: {len(keys) - len(errors)} of {len(keys)} records" in (out / "BENCHMARK.md").read_text()
        # rerunning the same command retries only the failed records, until none is left
        reruns = 0
        while any(r["status"] == "error" for r in load(out)) and reruns < 8:
            main(args)
            reruns += 1
        final = load(out)
    finally:
        server.stop()
    assert all(r["status"] == "ok" for r in final) and len({r["key"] for r in final}) == len(final) == len(CASES) * 3 * 5
    kept = {r["key"]: r for r in first if r["status"] == "ok"}
    assert all(r == kept[r["key"]] for r in final if r["key"] in kept)  # finished records never rewritten
    print(f"\nFIGURES faulted-run: records={len(final)} requests={requests} faults={faults} ({100 * faults / requests:.1f}%) by kind={dict(sorted(server.faults_served.items()))} "
          f"errors_first_pass={len(errors)} reruns_to_complete={reruns} first_pass_wall_s={first_wall:.1f}", file=sys.__stderr__)


def _command(out: Path, cache: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli", "eval", "--bundle", str(REPO), "--model", "openai:skilled", "--base-url", url,
            "--conditions", "baseline,skills,inline", "--trials", "4", "-j", "4", "--out", str(out), "--cache", str(cache), "--progress", "plain"]


def test_ten_kills_then_a_restart_equal_an_uninterrupted_run(tmp_path):
    server = serve(latency_s=0.02)
    env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(REPO))
    try:
        whole = tmp_path / "whole"
        assert subprocess.run(_command(whole, tmp_path / "whole.sqlite", server.openai_url), env=env, capture_output=True).returncode == 0
        killed, rng, kills = tmp_path / "killed", random.Random(5), 0
        records = killed / "records.jsonl"
        while kills < 10:
            before = len(lines(records)) if records.exists() else 0
            if before > len(CASES) * 3 * 4 - 25:
                break
            process = subprocess.Popen(_command(killed, tmp_path / "killed.sqlite", server.openai_url), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            target, deadline = before + rng.randint(1, 20), time.time() + 60
            while time.time() < deadline and process.poll() is None:
                if records.exists() and records.read_bytes().count(b"\n") >= target:
                    break
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))  # land anywhere: between records, mid-write, mid-request
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
        assert kills == 10
        assert subprocess.run(_command(killed, tmp_path / "killed.sqlite", server.openai_url), env=env, capture_output=True).returncode == 0
    finally:
        server.stop()
    raw = records.read_bytes()
    assert raw.endswith(b"\n")
    got, truncated = read_records(records)
    assert not truncated
    reference = {r["key"]: r for r in load(whole)}
    assert len(got) == len({r["key"] for r in got}) == len(reference) == len(CASES) * 3 * 4
    for record in got:
        assert {k: record[k] for k in CONTENT} == {k: reference[record["key"]][k] for k in CONTENT}
        assert len(record["turns"]) == len(reference[record["key"]]["turns"])


def test_a_second_process_on_the_same_run_directory_stops_and_harms_nothing(tmp_path):
    server = serve(latency_s=0.05)
    env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(REPO))
    out = tmp_path / "run"
    command = _command(out, tmp_path / "c.sqlite", server.openai_url)
    try:
        first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not ((out / "records.jsonl").exists() and (out / "records.jsonl").stat().st_size):
            time.sleep(0.01)
        second = subprocess.run(command, env=env, capture_output=True, text=True)
        assert first.wait(120) == 0
    finally:
        server.stop()
    assert second.returncode == 2
    assert second.stderr.strip() == f"mbskills: error: {out}: another mbskills eval is writing this run (pid {first.pid}); wait for it or choose another --out"
    records = load(out)
    assert len(records) == len({r["key"] for r in records}) == len(CASES) * 3 * 4


def test_an_adversarial_model_gets_tool_errors_and_the_run_goes_on(tmp_path, repo_bundle):
    skill = repo_bundle / "skills" / "nemo-mbridge-perf-megatron-fsdp"
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    os.symlink(secret, skill / "link-out.txt")
    os.symlink(skill / "loop", skill / "loop")
    (skill / "big.md").write_bytes(b"x" * (20 * 1024 * 1024))
    probes = ["../nemo-mbridge-perf-tp-dp-comm-overlap/SKILL.md", "/etc/passwd", str(secret), "scripts/../../../card.yaml", "evals/evals.json",
              "%2e%2e%2fcard.yaml", "..%2F..%2Fcard.yaml", "scripts/fsdp_preflight.py\x00.txt", "a" * 5000, "link-out.txt", "loop", "big.md", "~/.bashrc"]
    server = serve(repo_bundle, probe_paths=probes)
    try:
        out = tmp_path / "run"
        assert main(["eval", "--bundle", str(repo_bundle), "--model", "openai:prober", "--base-url", server.openai_url, "--conditions", "skills",
                     "--case", "fsdp-minimal-override", "--max-turns", "20", "--out", str(out), "--no-cache"]) == 0
    finally:
        server.stop()
    record = load(out)[0]
    results = [m for m in record["messages"] if m["role"] == "tool"]
    assert len(results) == len(probes)
    assert all(m["is_error"] and m["content"].startswith("error: ") and len(m["content"]) < 400 for m in results)
    assert record["files_read"] == [] and record["finish"] == "answered" and record["status"] == "ok"
    text = (out / "records.jsonl").read_text()
    assert "TOP-SECRET-CONTENT" not in text and "root:x:0:0" not in text


def test_tool_calls_with_invalid_json_arguments_are_tool_errors(tmp_path):
    server = serve(failures=["badargs"])
    try:
        out = tmp_path / "run"
        assert main(["eval", "--bundle", str(REPO), "--model", "openai:skilled", "--base-url", server.openai_url, "--conditions", "skills",
                     "--case", "fsdp-minimal-override", "--out", str(out), "--no-cache"]) == 0
    finally:
        server.stop()
    record = load(out)[0]
    assert record["messages"][1]["tool_calls"][0]["arguments"].startswith("{oops")
    assert record["messages"][2] == {"role": "tool", "tool_call_id": record["messages"][1]["tool_calls"][0]["id"], "name": "activate_skill",
                                      "content": "error: arguments are not a JSON object", "is_error": True}
    assert record["status"] == "ok" and record["finish"] == "answered"


def test_api_keys_are_in_no_byte_written_and_not_in_messages(tmp_path, capsys):
    server = serve(failures=["401-echo"])
    try:
        assert main(["eval", "--bundle", str(REPO), "--model", "openai:skilled", "--base-url", server.openai_url, "--conditions", "baseline",
                     "--limit", "1", "-j", "1", "--out", str(tmp_path / "refused"), "--cache", str(tmp_path / "c.sqlite")]) == 2
        err = capsys.readouterr().err
        assert "Incorrect API key provided: [redacted]" in err and KEY not in err
        out = tmp_path / "run"
        for spec, base in (("openai:skilled", server.openai_url), ("anthropic:skilled", server.anthropic_url)):
            assert main(["eval", "--bundle", str(REPO), "--model", spec, "--base-url", base, "--conditions", "baseline,skills", "--limit", "3",
                         "--out", str(tmp_path / spec.split(":")[0]), "--cache", str(tmp_path / "c.sqlite")]) == 0
        out = tmp_path / "openai"
        judge = ["--judge", "openai:judge", "--judge-base-url", server.openai_url, "--cache", str(tmp_path / "c.sqlite")]
        assert main(["grade", str(out), "--resamples", "100", *judge]) == 0
        assert main(["calibrate", "--bundle", str(REPO), *judge, "--out", str(tmp_path / "calibration.json")]) == 0
        # the judge that cannot answer in JSON: its errors are written too
        assert main(["grade", str(out), "--judge", "openai:judge-text", "--judge-base-url", server.openai_url, "--no-cache", "--resamples", "100"]) == 3
        everything = capsys.readouterr()
    finally:
        server.stop()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 12
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in everything.out + everything.err
    # the key did travel, to the server only
    sent = [{k.lower(): v for k, v in r["headers"].items()} for r in server.requests]
    assert all(KEY in (h.get("authorization", "") + h.get("x-api-key", "")) for h in sent)
    assert {r["kind"] for r in server.requests} == {"chat", "anthropic"}
