"""`mbskills eval --agent` when the client misbehaves or the command cannot work: a crash,
a hang, a session without an answer, a wrong model spec, a missing key; none of it is a
traceback, and a hung client's whole process group is gone afterwards. Fake clients (small
scripts given with --agent-bin) stand in for the real ones, which tests/test_eval_agents.py
drives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO

CASE = "nemo-mbridge-perf-megatron-fsdp/fsdp-diagnose-ckpt-format"
ANSWER = [
    {"type": "system", "subtype": "init", "tools": ["Read", "Skill"], "claude_code_version": "VERSION"},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "Set ckpt_format."}], "usage": {"input_tokens": 5, "output_tokens": 2}}},
    {"type": "result", "result": "Set ckpt_format.", "usage": {"input_tokens": 5, "output_tokens": 2}, "total_cost_usd": 0.01},
]


def fake(tmp_path: Path, name: str, body: str, version: str = "9.8.7") -> Path:
    """An executable that prints `version` for --version and otherwise runs `body`."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport json, os, subprocess, sys, time\nif '--version' in sys.argv:\n    print('{version} (fake)')\n    sys.exit(0)\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def mbskills(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=REPO, env={**base, **(env or {})}, capture_output=True, text=True, timeout=120)


def run_fake(tmp_path: Path, binary: Path, *extra: str, out: str = "run") -> subprocess.CompletedProcess:
    return mbskills("eval", "--agent", "claude-code", "--agent-bin", str(binary), "--model", "anthropic:m", "--base-url", "http://127.0.0.1:9",
                    "--conditions", "skills", "--case", CASE, "--out", str(tmp_path / out), "--progress", "plain", *extra)


def only_record(tmp_path: Path, out: str = "run") -> dict:
    (line,) = (tmp_path / out / "records.jsonl").read_text().splitlines()
    return json.loads(line)


def test_a_crashing_client_is_an_error_record_with_its_stderr(tmp_path):
    binary = fake(tmp_path, "crash", "sys.stderr.write('starting\\nboom: the fake client could not start\\n')\nsys.exit(3)\n")
    done = run_fake(tmp_path, binary)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    record = only_record(tmp_path)
    assert record["status"] == "error" and record["error"]["kind"] == "client_exit", record["error"]
    assert "exited with 3" in record["error"]["message"] and "boom: the fake client could not start" in record["error"]["message"]
    assert record["answer"] == "" and record["agent"]["exit_code"] == 3


def test_a_hanging_client_is_killed_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    binary = fake(tmp_path, "hang", f"child = subprocess.Popen(['sleep', '300'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(300)\n")
    started = time.monotonic()
    done = run_fake(tmp_path, binary, "--agent-timeout", "2")
    assert time.monotonic() - started < 60
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    record = only_record(tmp_path)
    assert record["error"]["kind"] == "client_timeout" and "2 s" in record["error"]["message"], record["error"]
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is SIGKILL to the group; reaping may lag a moment
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the client's child {child} outlived the timeout")


def test_a_client_that_prints_no_answer_is_an_error_record(tmp_path):
    binary = fake(tmp_path, "silent", "print('not json at all')\nprint(json.dumps([1, 2]))\n")
    done = run_fake(tmp_path, binary)
    assert done.returncode == 1, done.stderr
    record = only_record(tmp_path)
    assert record["error"]["kind"] == "no_answer" and "2 lines not JSON" in record["error"]["message"], record["error"]


def test_an_answering_client_makes_an_ok_record_and_a_new_version_needs_a_new_run(tmp_path):
    lines = json.dumps(ANSWER).replace("VERSION", "9.8.7")
    binary = fake(tmp_path, "answers", f"for event in json.loads({lines!r}):\n    print(json.dumps(event))\n")
    done = run_fake(tmp_path, binary)
    assert done.returncode == 0, done.stderr
    record = only_record(tmp_path)
    assert record["status"] == "ok" and record["answer"] == "Set ckpt_format."
    assert record["model"] == {"provider": "anthropic", "model": "m", "agent": "claude-code", "agent_version": "9.8.7", "base_url": "http://127.0.0.1:9"}
    assert record["usage"]["input_tokens"] == 5 and record["agent"]["reported_cost_usd"] == 0.01
    assert record["tools_offered"] == ["Read", "Skill"] and record["agent"]["skills_installed"] is True
    again = run_fake(tmp_path, binary)  # resumes: nothing to do
    assert again.returncode == 0 and "0 written now, 1 already there" in again.stderr, again.stdout + again.stderr
    newer = fake(tmp_path, "answers-newer", f"for event in json.loads({lines!r}):\n    print(json.dumps(event))\n", version="9.8.8")
    changed = run_fake(tmp_path, newer)
    assert changed.returncode == 2 and "made by a different command" in changed.stderr and "9.8.8" in changed.stderr, changed.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("--agent", "claude-code", "--model", "openai:gpt-x", "--base-url", "http://127.0.0.1:9"), {}, "Claude Code speaks anthropic:MODEL only"),
        (("--agent", "gemini-cli", "--model", "anthropic:claude-x", "--base-url", "http://127.0.0.1:9"), {}, "Gemini CLI speaks gemini:MODEL only"),
        (("--agent", "codex", "--model", "gpt-x"), {}, "expected PROVIDER:MODEL"),
        (("--agent", "claude-code", "--model", "anthropic:claude-x"), {}, "ANTHROPIC_API_KEY is not set"),
        (("--agent", "qwen-code", "--model", "openai:q", "--isolate-network"), {"OPENAI_API_KEY": "sk-test-isolation-0001"}, "--isolate-network needs --base-url"),
        (("--agent", "qwen-code", "--model", "openai:q", "--isolate-network", "--base-url", "https://api.example.invalid/v1"), {}, "must be an http:// URL"),
        (("--agent", "opencode", "--model", "openai:q", "--base-url", "http://127.0.0.1:9", "--temperature", "0.2"), {}, "--temperature does not reach an agent client"),
        (("--model", "openai:q", "--base-url", "http://127.0.0.1:9", "--agent-bin", "/bin/true"), {}, "apply to --agent CLIENT"),
        (("--agent", "codex", "--model", "openai:q", "--base-url", "http://127.0.0.1:9", "--agent-bin", "/nonexistent/codex"), {}, "--agent-bin /nonexistent/codex: not an executable file"),
    ],
)
def test_a_command_that_cannot_work_is_one_line_exit_2(tmp_path, args, env, message):
    done = mbskills("eval", *args, "--case", CASE, "--conditions", "baseline", "--out", str(tmp_path / "run"), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_streams_skip_what_is_not_an_event():
    from runner.agents.streams import PARSERS

    junk = "\n".join(["garbage", "[1]", json.dumps({"type": "result", "result": "ok then", "usage": "not a dict"}), '{"type": "assistant", "message": 5}'])
    t = PARSERS["claude-code"](junk)
    assert t.answer == "ok then" and t.skipped_lines == 2 and t.input_tokens is None
    for name, parse in PARSERS.items():
        assert parse("\x00\n{}\n[]").answer == "", name  # nothing usable: no answer, no exception


def test_show_names_the_client_of_an_agent_run(tmp_path):
    lines = json.dumps(ANSWER).replace("VERSION", "9.8.7")
    binary = fake(tmp_path, "answers", f"for event in json.loads({lines!r}):\n    print(json.dumps(event))\n")
    assert run_fake(tmp_path, binary).returncode == 0
    shown = mbskills("show", str(tmp_path / "run"), "--case", CASE.split("/")[1])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("=== ") and "(claude-code 9.8.7 · anthropic:m, answered" in shown.stdout, shown.stdout[:300]


def test_a_failed_session_and_a_read_of_several_files_are_read_as_such():
    from runner.agents import AGENT_CLIENTS, skill_reads
    from runner.agents.streams import PARSERS

    failed = PARSERS["opencode"](json.dumps({"type": "error", "error": {"name": "APIError", "data": {"message": "model not found"}}}))
    assert failed.failed == "model not found"
    assert PARSERS["opencode"](json.dumps({"type": "error", "error": {"name": "APIError"}})).failed == "APIError"
    call = PARSERS["gemini-cli"]("\n".join(json.dumps(e) for e in [
        {"type": "tool_use", "tool_id": "1", "tool_name": "read_many_files", "parameters": {"paths": ["/w/.gemini/skills/demo/SKILL.md", "/w/.gemini/skills/demo/scripts/x.py", 3]}},
        {"type": "tool_result", "tool_id": "1", "status": "success", "output": "..."},
    ])).calls
    assert skill_reads(AGENT_CLIENTS["gemini-cli"], call, ["demo"]) == (["demo"], ["demo/SKILL.md", "demo/scripts/x.py"])
