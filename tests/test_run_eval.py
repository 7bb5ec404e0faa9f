"""`mbskills eval` and `show` against scripted models on a 127.0.0.1 server, through the
real openai and anthropic SDK clients (nothing patched)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_server import CaseInfo, ModelServer
from runner.cli import main
from runner.load import bundle_cases
from runner.run.rundir import RunDir
from runner.load import Bundle

from conftest import REPO, SENTINEL_KEY

MARKERS = {
    "nemo-mbridge-perf-megatron-fsdp": "# Megatron FSDP in Megatron-Bridge",
    "nemo-mbridge-perf-tp-dp-comm-overlap": "# TP, DP and PP communication overlap in Megatron-Bridge",
    "nemo-mbridge-perf-moe-ep-comm-overlap": "# MoE expert-parallel communication overlap in Megatron-Bridge",
}
CASES = bundle_cases(Bundle(REPO))
KEY = SENTINEL_KEY
FORMATS = {
    "chat": lambda s: ["--model", "openai:{m}", "--base-url", s.openai_url],
    "responses": lambda s: ["--model", "openai:{m}", "--base-url", s.openai_url, "--api", "responses"],
    "anthropic": lambda s: ["--model", "anthropic:{m}", "--base-url", s.anthropic_url],
}


@pytest.fixture
def server():
    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in CASES}, MARKERS).start()
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def keys(sentinel_keys):
    return sentinel_keys


def model_args(server: ModelServer, fmt: str, model: str) -> list[str]:
    return [a.replace("{m}", model) for a in FORMATS[fmt](server)]


def evaluate(tmp_path: Path, server: ModelServer, *extra: str, fmt: str = "chat", model: str = "skilled", out: str = "run", cache: str = "cache.sqlite") -> int:
    args = ["eval", "--bundle", str(REPO), *model_args(server, fmt, model), "--out", str(tmp_path / out), "--cache", str(tmp_path / cache), "--progress", "plain", *extra]
    return main(args)


def records(tmp_path: Path, out: str = "run") -> list[dict]:
    lines = (tmp_path / out / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def by_key(recs: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in recs}


# -- conditions --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["chat", "responses", "anthropic"])
def test_skills_condition_activates_reads_and_answers_in_every_wire_format(tmp_path, server, fmt):
    assert evaluate(tmp_path, server, "--conditions", "skills", fmt=fmt) == 0
    recs = records(tmp_path)
    assert len(recs) == len(CASES)
    for case in CASES:
        record = by_key(recs)[f"{case.key}#skills#0"]
        assert record["status"] == "ok" and record["finish"] == "answered"
        assert record["tools_offered"] == ["activate_skill", "read_skill_file"]
        expected = [case.expected_skill] if case.expected_skill else []
        assert record["activated_skills"] == expected
        assert record["files_read"] == ([f"{case.expected_skill}/{case.expected_script}"] if case.expected_script else [])
        assert record["answer"] == f"[skilled] answer to {case.key}; saw-skill:{case.expected_skill or 'none'}"
        assert len(record["turns"]) == 1 + len(expected) + (1 if case.expected_script else 0)
        assert record["usage"]["input_tokens"] > 0 and record["usage"]["output_tokens"] > 0
        assert "<available_skills>" in record["system"] and "<name>nemo-mbridge-perf-megatron-fsdp</name>" in record["system"]
    # the catalogue reached the server, the tools too, in that API's own shape
    first = server.requests[0]
    assert first["kind"] == {"chat": "chat", "responses": "responses", "anthropic": "anthropic"}[fmt]
    sent = json.dumps(first["body"])
    assert "<available_skills>" in sent and "activate_skill" in sent


def test_model_context_never_holds_eval_files_ground_truth_or_behaviours(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills,inline") == 0
    sent = "\n".join(json.dumps(r["body"]) for r in server.requests)
    for case in CASES:
        assert json.dumps(case.ground_truth)[1:-1] not in sent
        for behaviour in case.behaviours:
            assert json.dumps(behaviour.text)[1:-1] not in sent
    assert "expected_behavior" not in sent and "ground_truth" not in sent


def test_baseline_sees_no_skill_and_inline_sees_the_expected_one(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "baseline,inline", model="plain") == 0
    recs = by_key(records(tmp_path))
    for case in CASES:
        base, inline = recs[f"{case.key}#baseline#0"], recs[f"{case.key}#inline#0"]
        assert base["answer"].endswith("saw-skill:none") and base["tools_offered"] == []
        assert "<available_skills>" not in base["system"]
        assert inline["inlined_skill"] == case.expected_skill
        assert inline["answer"].endswith(f"saw-skill:{case.expected_skill or 'none'}")
        assert inline["tools_offered"] == [] and inline["activated_skills"] == []
    assert all("tools" not in r["body"] for r in server.requests)


def test_a_model_that_never_uses_skills_and_one_that_picks_the_wrong_skill(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "skills", model="plain", out="plain") == 0
    assert all(r["activated_skills"] == [] and r["answer"].endswith("saw-skill:none") for r in records(tmp_path, "plain"))
    assert evaluate(tmp_path, server, "--conditions", "skills", model="wrong", out="wrong") == 0
    for record in records(tmp_path, "wrong"):
        assert len(record["activated_skills"]) == 1 and record["activated_skills"][0] != record["expected_skill"]
        assert record["answer"].endswith(f"saw-skill:{record['activated_skills'][0]}")
        # the model's words before its tool call stay in the transcript
        assert record["messages"][1]["content"] == "Let me look at a skill first."


# -- cache, resume, filters --------------------------------------------------------------


def test_second_run_makes_no_requests_and_resume_skips_finished_records(tmp_path, server, capsys):
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--trials", "2") == 0
    made = server.count()
    first = records(tmp_path)
    assert len(first) == len(CASES) * 2 * 2 and made == sum(r["requests"] for r in first)
    # another run directory, same command: every response from the cache
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--trials", "2", out="again") == 0
    assert server.count() == made
    again = by_key(records(tmp_path, "again"))
    for record in first:
        twin = again[record["key"]]
        assert twin["messages"] == record["messages"] and twin["requests"] == 0 and twin["cached_responses"] == len(record["turns"])
    # the same run directory again: nothing to do at all
    capsys.readouterr()
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--trials", "2") == 0
    assert f"0 written now, {len(CASES) * 4} already there" in capsys.readouterr().err
    assert len(records(tmp_path)) == len(CASES) * 4


def test_trial_index_is_part_of_the_cache_key(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "2", "--trials", "3") == 0
    assert server.count() == 2 * 3


def test_resume_after_cut_off_file_retries_errors_and_never_duplicates(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--no-cache") == 0
    complete = records(tmp_path)
    path = tmp_path / "run" / "records.jsonl"
    kept = complete[:10]
    broken = dict(complete[10], status="error", error={"kind": "server", "message": "x", "status": 500})
    path.write_text("".join(json.dumps(r) + "\n" for r in kept) + json.dumps(broken) + "\n" + json.dumps(complete[11])[:50])
    before = server.count()
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--no-cache") == 0
    resumed = records(tmp_path)
    keys = [r["key"] for r in resumed]
    assert len(keys) == len(set(keys)) == len(complete)
    assert set(keys) == {r["key"] for r in complete}
    assert resumed[:10] == kept
    redone = [r for r in complete if r["key"] not in {k["key"] for k in kept}]
    assert server.count() - before == sum(len(r["turns"]) for r in redone)


def test_killed_run_continues_where_it_stopped(tmp_path, server):
    server.latency_s = 0.05
    out = tmp_path / "killed"
    env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "runner.cli", "eval", "--bundle", str(REPO), "--model", "openai:skilled", "--base-url", server.openai_url,
               "--conditions", "baseline,skills,inline", "-j", "2", "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "--progress", "plain"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        path = out / "records.jsonl"
        if path.exists() and path.read_text().count("\n") >= 8:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.3)  # let the server log any request that was already on the wire
    partial = records(tmp_path, "killed")
    assert 8 <= len(partial) < len(CASES) * 3
    made = server.count()
    finished = subprocess.run(command, env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    final = records(tmp_path, "killed")
    keys = [r["key"] for r in final]
    assert len(keys) == len(set(keys)) == len(CASES) * 3
    # records written before the kill are kept as they were
    assert final[: len(partial)] == partial
    # no answered request was paid for twice: only the turns of the missing records
    redone = [r for r in final[len(partial):]]
    assert server.count() - made == sum(r["requests"] for r in redone)


def test_filters_select_cases(tmp_path, server):
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--skill", "nemo-mbridge-perf-megatron-fsdp", out="a") == 0
    selected = {r["case"] for r in records(tmp_path, "a")}
    assert selected == {c.key for c in CASES if c.owner == "nemo-mbridge-perf-megatron-fsdp" or c.expected_skill == "nemo-mbridge-perf-megatron-fsdp"}
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--case", "routing/route-none-*", out="b") == 0
    assert {r["case"] for r in records(tmp_path, "b")} == {"routing/route-none-hf-conversion", "routing/route-none-context-parallel"}
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--case", "overlap-*", "--limit", "3", out="c") == 0
    # records land in completion order; the selection is the first three in file order
    assert sorted(r["case"] for r in records(tmp_path, "c")) == sorted([c.key for c in CASES if str(c.id).startswith("overlap-")][:3])


# -- faults ------------------------------------------------------------------------------


def test_rate_limits_server_errors_and_timeouts_are_retried(tmp_path, server):
    server.hang_s = 2.0
    server.failures = ["429", "500", "hang", "503", "429-no-header", "500"]
    assert evaluate(tmp_path, server, "--conditions", "skills", "--limit", "4", "--timeout", "0.5", "--max-retries", "6", "-j", "2") == 0
    recs = records(tmp_path)
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs)
    # every HTTP attempt is counted, the SDK's retries included: the records add up to what the server saw
    assert server.count() == sum(r["requests"] for r in recs) == 8 + 6


def test_429_after_the_sdk_gives_up_waits_as_told(tmp_path, server):
    server.failures = ["429", "429", "429"]
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1", "--max-retries", "0", "--rate-limit-rounds", "3") == 0
    assert records(tmp_path)[0]["status"] == "ok" and server.count() == 4


def test_a_request_that_fails_for_good_is_an_error_record_and_rerun_retries_it(tmp_path, server, capsys):
    server.failures = ["500"]
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "2", "--max-retries", "0", "-j", "1") == 1
    recs = records(tmp_path)
    errors = [r for r in recs if r["status"] == "error"]
    assert len(errors) == 1 and errors[0]["error"]["kind"] == "server" and errors[0]["error"]["status"] == 500
    assert "1 errors (server 1)" in capsys.readouterr().err
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "2", "--max-retries", "0") == 0
    recs = records(tmp_path)
    assert len(recs) == 2 and all(r["status"] == "ok" for r in recs)


def test_bad_key_stops_the_run_with_exit_2(tmp_path, server, capsys):
    server.failures = ["401"] * 3
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "3", "-j", "1") == 2
    err = capsys.readouterr().err
    assert "mbskills: error:" in err and "AuthenticationError" in err and "rerun the same command" in err
    assert KEY not in err


# -- input errors before any request -----------------------------------------------------


@pytest.mark.parametrize(
    "fmt, variable, base",
    [("chat", "OPENAI_API_KEY", False), ("anthropic", "ANTHROPIC_API_KEY", True)],
)
def test_missing_key_is_an_error_before_any_work(tmp_path, server, monkeypatch, capsys, fmt, variable, base):
    monkeypatch.delenv(variable)
    spec = "openai:gpt-x" if fmt == "chat" else "anthropic:claude-x"
    args = ["eval", "--bundle", str(REPO), "--model", spec, "--out", str(tmp_path / "run")]
    if base:
        args += ["--base-url", server.anthropic_url]
    assert main(args) == 2
    assert f"{variable} is not set" in capsys.readouterr().err
    assert server.count() == 0 and not (tmp_path / "run").exists()


def test_local_server_needs_no_key(tmp_path, server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1") == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gpt-4o"], "expected openai:MODEL, anthropic:MODEL or replay:DIR"),
        (["--model", "anthropic:x", "--api", "responses"], "only openai: models take --api"),
        (["--model", "openai:x", "--conditions", "baseline,oracle"], "unknown oracle"),
        (["--model", "openai:x", "--case", "nothing-*"], "no eval case matches"),
        (["--model", "openai:x", "--skill", "no-such-skill"], "no such skill"),
        (["--model", "openai:x", "--trials", "0"], "argument --trials: 0 is under 1"),
        (["--model", "replay:/nonexistent/answers"], "not a folder of recorded answers"),
        (["--model", "openai:x", "--limit", "-1"], "argument --limit: -1 is under 1"),
        (["--model", "openai:x", "--timeout", "-1"], "argument --timeout: -1 must be above 0"),
        (["--model", "openai:x", "--timeout", "nan"], "argument --timeout: nan is not a finite number"),
        (["--model", "openai:x", "--max-retries", "-1"], "argument --max-retries: -1 is under 0"),
        (["--model", "openai:x", "--temperature", "nan"], "argument --temperature: nan is not a finite number"),
        (["--model", "openai:x", "--rate-limit-deadline", "0"], "argument --rate-limit-deadline: 0 must be above 0"),
        (["--model", "openai:x", "--pricing", "/nonexistent.yaml"], "cannot read the pricing file"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, args, message):
    assert main(["eval", "--bundle", str(REPO), "--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_second_run_on_a_locked_directory_stops_cleanly(tmp_path, server, capsys):
    holder = RunDir(tmp_path / "run")
    holder.path.mkdir()
    holder._lock()
    try:
        assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1") == 2
    finally:
        holder.close()
    assert "another mbskills eval is writing this run" in capsys.readouterr().err
    assert server.count() == 0 and not (tmp_path / "run" / "records.jsonl").exists()


def test_a_run_directory_of_another_command_is_refused(tmp_path, server, capsys):
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1") == 0
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1", model="plain") == 2
    assert "made by a different command (model:" in capsys.readouterr().err
    assert len(records(tmp_path)) == 1
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("mine")
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1", out="stuff") == 2
    assert (tmp_path / "stuff" / "notes.txt").read_text() == "mine"


# -- settings, tokens, cost --------------------------------------------------------------


def test_generation_settings_are_sent_and_recorded(tmp_path, server):
    common = ["--conditions", "baseline", "--limit", "1", "--temperature", "0.2", "--max-tokens", "300", "--seed", "7", "--reasoning-effort", "low"]
    assert evaluate(tmp_path, server, *common, out="chat") == 0
    body = server.requests[-1]["body"]
    assert (body["temperature"], body["max_tokens"], body["seed"], body["reasoning_effort"]) == (0.2, 300, 7, "low")
    record = records(tmp_path, "chat")[0]
    assert record["model"]["settings"] == {"temperature": 0.2, "max_tokens": 300, "seed": 7, "reasoning_effort": "low"}
    assert record["ignored_settings"] == []
    assert evaluate(tmp_path, server, *common, fmt="responses", out="responses") == 0
    body = server.requests[-1]["body"]
    assert (body["temperature"], body["max_output_tokens"], body["reasoning"]) == (0.2, 300, {"effort": "low"}) and "seed" not in body
    assert records(tmp_path, "responses")[0]["ignored_settings"] == ["seed"]
    assert evaluate(tmp_path, server, *common, fmt="anthropic", out="anthropic") == 0
    body = server.requests[-1]["body"]
    assert (body["temperature"], body["max_tokens"], body["output_config"]) == (0.2, 300, {"effort": "low"}) and "seed" not in body
    assert records(tmp_path, "anthropic")[0]["ignored_settings"] == ["seed"]


def test_tokens_and_cost_from_a_user_price_table(tmp_path, server, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  - {provider: openai-compatible, match: skill, input: 2.0, cached_input: 1.0, output: 8.0}\n")
    assert evaluate(tmp_path, server, "--conditions", "skills", "--limit", "3", "--pricing", str(prices)) == 0
    recs = records(tmp_path)
    total = 0.0
    for record in recs:
        usage = record["usage"]
        assert usage["input_tokens"] == sum(t["usage"]["input_tokens"] for t in record["turns"])
        expected = (usage["input_tokens"] * 2.0 + usage["output_tokens"] * 8.0) / 1e6
        assert record["cost_usd"] == pytest.approx(expected, abs=1e-6)
        total += record["live_cost_usd"]
    assert f"${total:.4f}" in capsys.readouterr().err
    # the same command again: the answers cost nothing this time
    assert evaluate(tmp_path, server, "--conditions", "skills", "--limit", "3", "--pricing", str(prices), out="again") == 0
    assert all(r["live_cost_usd"] == 0 and r["cost_usd"] > 0 for r in records(tmp_path, "again"))


def test_unpriced_model_reports_unknown_cost(tmp_path, server, capsys):
    assert evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1") == 0
    assert records(tmp_path)[0]["cost_usd"] is None
    assert "cost of this invocation unknown" in capsys.readouterr().err


def test_api_key_is_in_no_file_written(tmp_path, server):
    server.failures = ["401"]
    evaluate(tmp_path, server, "--conditions", "baseline", "--limit", "1", "-j", "1", out="failed")
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--limit", "2") == 0
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert all(r["headers"].get("Authorization", r["headers"].get("X-Api-Key", "")).endswith(KEY) for r in server.requests)


# -- show --------------------------------------------------------------------------------


def test_show_lists_records_and_prints_a_transcript(tmp_path, server, capsys):
    assert evaluate(tmp_path, server, "--conditions", "baseline,skills", "--case", "fsdp-verify-before-launch") == 0
    capsys.readouterr()
    assert main(["show", str(tmp_path / "run")]) == 0
    table = capsys.readouterr().out
    recs = records(tmp_path)
    tokens = sum(r["usage"]["input_tokens"] for r in recs), sum(r["usage"]["output_tokens"] for r in recs)
    assert f"2 records, 0 errors, 0 out of turns, {tokens[0]} input + {tokens[1]} output tokens, cost unknown" in table
    assert "nemo-mbridge-perf-megatron-fsdp/fsdp-verify-before-launch  skills" in table and "answered" in table
    assert main(["show", str(tmp_path / "run"), "--case", "fsdp-verify-before-launch", "--condition", "skills"]) == 0
    text = capsys.readouterr().out
    assert '-> activate_skill({"name": "nemo-mbridge-perf-megatron-fsdp"})' in text
    assert "-> read_skill_file(" in text and "--- tool read_skill_file" in text
    assert "files read: nemo-mbridge-perf-megatron-fsdp/scripts/fsdp_preflight.py" in text
    assert main(["show", str(tmp_path / "run"), "--json", "--condition", "baseline"]) == 0
    assert json.loads(capsys.readouterr().out)["condition"] == "baseline"
    assert main(["show", str(tmp_path / "nothing")]) == 2
    assert main(["show", str(tmp_path / "run"), "--case", "no-such"]) == 2


def test_out_under_a_file_and_a_broken_evals_file_are_one_line_errors(tmp_path, server, repo_bundle, capsys):
    (tmp_path / "afile").write_text("x")
    assert evaluate(tmp_path, server, "--limit", "1", out="afile/run") == 2
    assert "cannot create the run directory" in capsys.readouterr().err
    assert evaluate(tmp_path, server, "--limit", "1", out="afile") == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    evals = repo_bundle / "evals" / "routing.json"
    evals.write_text(evals.read_text().replace('"question"', '"questoin"', 1))
    code = main(["eval", "--bundle", str(repo_bundle), "--model", "openai:skilled", "--base-url", server.openai_url, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{evals}:" in err and "evals/schema" in err and len(err.splitlines()) == 1
    assert server.count() == 0


def test_agentskills_format_cases_in_the_bundle_run_too(tmp_path, server, repo_bundle):
    agentskills = {
        "skill_name": "nemo-mbridge-perf-megatron-fsdp",
        "evals": [
            {"id": 1, "prompt": "Shard parameters too?", "expected_output": "use_megatron_fsdp", "assertions": ["Names use_megatron_fsdp."]},
            {"id": "two", "prompt": "Which checkpoint format?", "expectations": [{"name": "format", "text": "Answers fsdp_dtensor."}]},
            {"id": 3, "prompt": "Convert a HF checkpoint?", "should_trigger": False, "assertions": []},
        ],
    }
    (repo_bundle / "evals" / "more.json").write_text(json.dumps(agentskills))
    args = ["eval", "--bundle", str(repo_bundle), "--model", "openai:plain", "--base-url", server.openai_url, "--conditions", "baseline", "--case", "more/*", "--out", str(tmp_path / "run"), "--no-cache"]
    assert main(args) == 0
    recs = records(tmp_path)
    assert len(recs) == 3 and {r["owner"] for r in recs} == {"more"}
    assert {r["case_id"]: r["expected_skill"] for r in recs} == {1: "nemo-mbridge-perf-megatron-fsdp", "two": "nemo-mbridge-perf-megatron-fsdp", 3: None}
    sent = [r["body"]["messages"][1]["content"] for r in server.requests]
    data = json.loads((repo_bundle / "evals" / "more.json").read_text())
    assert sorted(sent) == sorted(e["prompt"] for e in data["evals"])


def test_a_malformed_skill_stops_eval_with_one_line(tmp_path, repo_bundle, capsys):
    skill_md = repo_bundle / "skills" / "nemo-mbridge-perf-megatron-fsdp" / "SKILL.md"
    skill_md.write_text("no frontmatter here\n")
    code = main(["eval", "--bundle", str(repo_bundle), "--model", f"replay:{REPO / 'evals' / 'calibration'}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("mbskills: error: ") and f"{skill_md}:1: skill/frontmatter" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
