"""`mbskills eval` in-process against a real LiteLLM proxy on 127.0.0.1 (tests/gateway.py),
offline: its models answer from `mock_response` / `mock_tool_calls`, no provider is called.
Skipped when .venv-gateway (requirements/gateway-lock.txt) is not built.

A gateway's client errors (a 400 for a bad key and for an unknown model) stop the run once
its first records all fail alike: exit 2, the server's error body in the message.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from conftest import REPO
from gateway import start_gateway
from runner.cli import main

ANSWER = "MOCK-ANSWER-42: set megatron.bridge ddp.use_megatron_fsdp=True"
SKILL = "nemo-mbridge-perf-megatron-fsdp"
MODELS = {
    "mock-good": ANSWER,
    # Calls activate_skill on every turn (the mock cannot react to the tool result).
    "mock-tool": {
        "mock_response": "activating the skill",
        "mock_tool_calls": [
            {"id": "call_mock_1", "type": "function", "function": {"name": "activate_skill", "arguments": json.dumps({"name": SKILL})}}
        ],
    },
}
BAD_KEY = "sk-not-the-master-key-0000"
# This LiteLLM version's error bodies (no database: any key but the master key is refused).
BAD_KEY_MESSAGE = "No connected db."
UNKNOWN_MODEL_MESSAGE = "Invalid model name passed in model=no-such-model"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = start_gateway(tmp_path_factory.mktemp("gateway"), MODELS)
    yield gateway
    gateway.stop()


@pytest.fixture
def env(monkeypatch, gw):
    """The master key as the runner's key; no base URL, CI flag or cache path inherited."""
    monkeypatch.setenv("OPENAI_API_KEY", gw.master_key)
    for name in ("OPENAI_BASE_URL", "CI", "MBSKILLS_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def evaluate(tmp_path: Path, gw, model: str, *extra: str) -> int:
    return main([
        "eval", "--bundle", str(REPO), "--model", f"openai:{model}", "--base-url", gw.base_url,
        "--conditions", "baseline", "--limit", "2", "--out", str(tmp_path / "run"),
        "--no-cache", "--progress", "plain", *extra,
    ])  # fmt: skip


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]


# -- the gateway itself: what the tests below rely on ------------------------------------


def test_gateway_answers_as_this_litellm_version_does(gw):
    """Raw answers, through the same openai SDK as the runner: if LiteLLM is upgraded and
    this fails, the expectations in the tests below need a look too."""
    good = openai.OpenAI(base_url=gw.base_url, api_key=gw.master_key, max_retries=0)
    bad = openai.OpenAI(base_url=gw.base_url, api_key=BAD_KEY, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]

    reply = good.chat.completions.create(model="mock-good", messages=messages)
    assert reply.choices[0].message.content == ANSWER
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (10, 20)  # fixed mock counts

    with pytest.raises(openai.BadRequestError) as bad_key:  # 400, not 401
        bad.chat.completions.create(model="mock-good", messages=messages)
    assert bad_key.value.status_code == 400
    assert bad_key.value.body["message"] == BAD_KEY_MESSAGE and bad_key.value.body["type"] == "no_db_connection"

    with pytest.raises(openai.BadRequestError) as unknown:  # 400, not 404
        good.chat.completions.create(model="no-such-model", messages=messages)
    assert unknown.value.status_code == 400
    assert UNKNOWN_MODEL_MESSAGE in unknown.value.body["message"]

    tool = good.chat.completions.create(model="mock-tool", messages=messages)
    assert [c.function.name for c in tool.choices[0].message.tool_calls] == ["activate_skill"]

    response = good.responses.create(model="mock-good", input="hi")
    assert response.output_text == ANSWER


# -- runs that work ------------------------------------------------------------------------


def test_known_mock_model_answers_with_its_mock_text(tmp_path, gw, env):
    assert evaluate(tmp_path, gw, "mock-good") == 0
    recs = records(tmp_path)
    assert len(recs) == 2
    for record in recs:
        assert record["status"] == "ok" and record["finish"] == "answered"
        assert record["answer"] == ANSWER
        assert record["usage"]["input_tokens"] == 10 and record["usage"]["output_tokens"] == 20


def test_responses_api_through_the_gateway(tmp_path, gw, env):
    assert evaluate(tmp_path, gw, "mock-good", "--api", "responses") == 0
    recs = records(tmp_path)
    assert len(recs) == 2
    assert all(r["status"] == "ok" and r["answer"] == ANSWER for r in recs)
    assert all(r["usage"]["output_tokens"] > 0 for r in recs)  # LiteLLM's mock reports 36 in, 87 out


def test_mock_tool_call_runs_the_skill_tool_loop(tmp_path, gw, env):
    """mock_tool_calls (Chat Completions only) script an activate_skill call; the mock
    repeats it every turn, so the record runs out of turns with the skill activated."""
    assert evaluate(tmp_path, gw, "mock-tool", "--conditions", "skills", "--max-turns", "3") == 0
    recs = records(tmp_path)
    assert len(recs) == 2
    for record in recs:
        assert record["tools_offered"] == ["activate_skill", "read_skill_file"]
        assert record["activated_skills"] == [SKILL]
        assert record["finish"] == "turn_limit" and len(record["turns"]) == 3


# -- client errors: the run stops on them ---------------------------------------------------


@pytest.mark.parametrize("case", ["bad key", "unknown model"])
def test_a_gateway_client_error_stops_the_run_with_the_servers_words(tmp_path, gw, env, capsys, case):
    """A gateway answers a bad key and an unknown model with 400 (not 401/404): the first
    records all fail the same way, so the run stops with exit 2 and the body in the message."""
    model, message = ("mock-good", BAD_KEY_MESSAGE) if case == "bad key" else ("no-such-model", UNKNOWN_MODEL_MESSAGE)
    if case == "bad key":
        env.setenv("OPENAI_API_KEY", BAD_KEY)
    code = evaluate(tmp_path, gw, model, "--limit", "8", "-j", "1")
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("mbskills: error: ") and "the first 3 records all failed the same way" in last and message in last
    recs = records(tmp_path)
    assert len(recs) == 3  # the other five were never sent
    for record in recs:
        assert record["status"] == "error" and record["error"]["kind"] == "bad_request" and record["error"]["status"] == 400
    assert BAD_KEY not in err  # the key itself is never shown
    # the corrected command reuses the run directory
    env.setenv("OPENAI_API_KEY", gw.master_key)
    assert evaluate(tmp_path, gw, "mock-good", "--limit", "8", "-j", "1") == 0
    assert len(records(tmp_path)) == 8 and all(r["status"] == "ok" for r in records(tmp_path))
