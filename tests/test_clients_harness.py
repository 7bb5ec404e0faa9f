"""The ground the client tests stand on: a jailed process reaches the scripted server and
nothing else, a timeout takes its whole process group, its environment carries nothing of
the machine's, and the server's streams are what the official SDKs parse back into the
same reply."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from model_server import ModelServer

sys.path.insert(0, str(Path(__file__).parent / "clients"))
import harness  # noqa: E402

CALLS = [("read_skill", {"name": "demo", "path": "SKILL.md"})]


def scripted(text: str = "hello from the script", calls=()):
    return lambda kind, body, seen: (text, list(calls))


@pytest.fixture
def unix_server(tmp_path: Path):
    server = ModelServer({}, {}, unix_path=str(tmp_path / "model.sock"), script=scripted()).start()
    yield server
    server.stop()


PROBE = """
import json, socket, urllib.request
out = {}
try:
    socket.create_connection(("10.255.255.1", 80), timeout=3)
    out["outside"] = "connected"
except OSError as exc:
    out["outside"] = type(exc).__name__ + ": " + str(exc)
try:
    socket.getaddrinfo("pypi.org", 443)
    out["dns"] = "resolved"
except OSError as exc:
    out["dns"] = type(exc).__name__
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
request = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions", body, {"content-type": "application/json"})
out["server"] = json.load(urllib.request.urlopen(request, timeout=10))["choices"][0]["message"]["content"]
print(json.dumps(out))
"""


def test_a_jailed_process_reaches_the_server_and_nothing_else(tmp_path: Path, unix_server):
    ran = harness.run_jailed([sys.executable, "-c", PROBE % harness.PORT], cwd=tmp_path, env=harness.client_env(tmp_path / "home"), socket_path=unix_server.unix_path, timeout=60)
    assert ran.rc == 0, ran.describe()
    seen = json.loads(ran.stdout)
    assert seen["server"] == "hello from the script"
    assert seen["outside"] != "connected" and "unreachable" in seen["outside"].lower(), seen
    assert seen["dns"] != "resolved", seen
    assert [r["path"] for r in unix_server.requests] == ["/v1/chat/completions"]


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path, unix_server):
    pid_file = tmp_path / "child.pid"
    argv = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; sleep 300"]
    started = time.monotonic()
    ran = harness.run_jailed(argv, cwd=tmp_path, env=harness.client_env(tmp_path / "home"), socket_path=unix_server.unix_path, timeout=2)
    assert ran.rc is None and time.monotonic() - started < 30, ran.describe()
    child = int(pid_file.read_text())
    for _ in range(50):  # the kernel reaps it a moment after the signal
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"background child {child} outlived the timeout")


def test_the_client_environment_is_built_from_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-of-this-machine")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    env = harness.client_env(tmp_path / "home", {"EXTRA": "1"})
    assert "OPENAI_API_KEY" not in env and "HTTPS_PROXY" not in env and env["EXTRA"] == "1"
    assert env["HOME"] == str(tmp_path / "home") and env["TMPDIR"].startswith(env["HOME"])
    assert all(Path(env[k]).is_dir() for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR"))


@pytest.fixture
def tcp_server():
    def pick(kind, body, seen):
        return ("first part of the answer", CALLS) if not seen.calls else ("done", [])

    server = ModelServer({}, {}, script=pick).start()
    yield server
    server.stop()


def test_chat_stream_is_what_the_openai_sdk_reassembles(tcp_server):
    import openai

    client = openai.OpenAI(base_url=tcp_server.openai_url, api_key="test", max_retries=0)
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}], stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "first part of the answer" and final.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == CALLS
    assert final.usage is not None and final.usage.completion_tokens > 0


def test_responses_stream_is_what_the_openai_sdk_reassembles(tcp_server):
    import openai

    client = openai.OpenAI(base_url=tcp_server.openai_url, api_key="test", max_retries=0)
    with client.responses.stream(model="m", input=[{"role": "user", "content": "hi"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "first part of the answer"
    assert [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"] == CALLS


def test_messages_stream_is_what_the_anthropic_sdk_reassembles(tcp_server):
    import anthropic

    client = anthropic.Anthropic(base_url=tcp_server.anthropic_url, api_key="test", max_retries=0)
    with client.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_message()
    assert [b.text for b in final.content if b.type == "text"] == ["first part of the answer"]
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == CALLS
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 0


@pytest.mark.parametrize("alt", ["sse", None])
def test_gemini_stream_carries_the_same_parts_as_generate_content(tcp_server, alt):
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()

    def post(method: str, query: str = "") -> bytes:
        request = urllib.request.Request(f"http://127.0.0.1:{tcp_server.port}/v1beta/models/gem:{method}{query}", body, {"content-type": "application/json"})
        return urllib.request.urlopen(request, timeout=10).read()

    whole = json.loads(post("generateContent"))
    raw = post("streamGenerateContent", "?alt=sse" if alt else "")
    if alt:
        chunks = [json.loads(line[len("data: "):]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    else:
        chunks = json.loads(raw)  # without alt=sse the API answers one JSON array
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert parts == whole["candidates"][0]["content"]["parts"]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]
    assert [r["stream"] for r in tcp_server.requests] == [False, True]
