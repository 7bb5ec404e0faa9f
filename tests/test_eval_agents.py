"""`mbskills eval --agent CLIENT`: each record one headless session of the real, pinned
client (tests/clients), in its own network namespace (`--isolate-network`) whose only route
is a relay to the scripted model server on 127.0.0.1.

The scripted model plays a replay agent through each client: when the expected skill is
listed and it has not read it, it reads it the client's own way (Codex: `cat` with its shell;
the others: their skill tool); it answers with the case's recorded good answer
(evals/calibration) when that skill's SKILL.md body is in its context, and with the recorded
bad answer otherwise. So grading tells whether the skill's text reached the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from conftest import REPO  # noqa: E402
from model_server import ModelServer  # noqa: E402
from runner.load import Bundle, bundle_cases  # noqa: E402

CASES = ("nemo-mbridge-perf-megatron-fsdp/fsdp-diagnose-ckpt-format", "nemo-mbridge-perf-tp-dp-comm-overlap/overlap-bucket-size-units")
CALIBRATION = REPO / "evals" / "calibration"
# client -> (--model, how the model reads a skill through it)
CLIENTS = {
    "codex": ("openai:scripted", "responses"),
    "claude-code": ("anthropic:scripted", "anthropic"),
    "gemini-cli": ("gemini:gemini-2.5-flash", "gemini"),
    "qwen-code": ("openai:scripted", "chat"),
    "opencode": ("openai:scripted", "chat"),
}
KEYS = {"OPENAI_API_KEY": "sk-agent-test-offline-0001", "ANTHROPIC_API_KEY": "sk-ant-agent-test-offline", "GEMINI_API_KEY": "gemini-agent-test-offline"}


PROMPTS = {c.key: harness.folded(c.prompt)[:150] for c in bundle_cases(Bundle(REPO)) if c.key in CASES}


def _answer(case_key: str, good: bool) -> str:
    owner, _, case_id = case_key.partition("/")
    text = (CALIBRATION / owner / f"{case_id}{'' if good else '.bad-1'}.md").read_text()
    return text.split("---", 2)[2].strip() if text.startswith("---") else text.strip()


SKILLS = {s.name: s for s in harness.bundle_skills()}
MARKERS = {name: harness.folded(harness.body_marker(s)) for name, s in SKILLS.items()}
# the first, the middle and the last line of each SKILL.md body
EDGES = {name: tuple(harness.folded(line.strip()) for line in (lines[0], lines[len(lines) // 2], lines[-1])) for name, s in SKILLS.items() for lines in [[x for x in s.body.splitlines() if x.strip()]]}


def _skill_call(kind: str, body: dict, name: str) -> tuple[str, dict] | None:
    """The call that reads skill `name` through this client, if the request offers it."""
    tools = {}
    for tool in body.get("tools") or ():
        if kind == "gemini":
            for d in tool.get("functionDeclarations") or ():
                tools[d["name"]] = d.get("parameters") or d.get("parametersJsonSchema") or {}
        else:
            fn = tool.get("function") or tool
            if fn.get("name"):
                tools[fn["name"]] = fn.get("parameters") or fn.get("input_schema") or {}
    if "exec_command" in tools:
        return "exec_command", {"cmd": f"cat .agents/skills/{name}/SKILL.md"}
    for tool in ("Skill", "activate_skill", "skill"):
        if tool in tools:
            key = "name" if "name" in (tools[tool].get("properties") or {}) else "skill"
            return tool, {key: name}
    return None


def replay_agent(kind: str, body: dict, seen) -> tuple[str, list]:
    shown = harness.strings(body)
    case = next((c for c in CASES if PROMPTS[c] in shown), None)
    if case is None:
        return "No case found in this request.", []
    expected = case.split("/")[0]
    has_body = MARKERS[expected] in shown
    if not has_body and not seen.calls and expected in shown:
        call = _skill_call(kind, body, expected)
        if call is not None:
            return "", [call]
    saw = [n for n, m in sorted(MARKERS.items()) if m in shown] or ["none"]
    return _answer(case, good=has_body) + "\n\n" + " ".join(f"saw-skill:{s}" for s in saw), []


def _mbskills(*args: str, env_extra: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _eval(client: str, server: ModelServer, out: Path, *extra: str) -> subprocess.CompletedProcess:
    harness.client_bin(harness.BIN.joinpath({"claude-code": "claude", "gemini-cli": "gemini", "qwen-code": "qwen"}.get(client, client)).name)
    harness._jail_prefix()  # skip (or fail once clients are required) where no namespace can be made
    model, kind = CLIENTS[client]
    base = server.anthropic_url if kind in ("anthropic", "gemini") else server.openai_url
    return _mbskills("eval", "--bundle", str(BUNDLE), "--agent", client, "--model", model, "--base-url", base, "--isolate-network", "--agent-timeout", "120", "--out", str(out), "--progress", "plain", *extra, env_extra=KEYS)


def _records(out: Path) -> dict[tuple[str, str], dict]:
    lines = (out / "records.jsonl").read_text().splitlines()
    return {(r["case"], r["condition"]): r for r in map(json.loads, lines)}


# The shipped bundle with every grader admitted: these tests read pass rates, which only
# admitted graders decide (tests/conftest.py admitted_repo).
BUNDLE = REPO


@pytest.fixture(autouse=True)
def admitted(admitted_repo, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BUNDLE", admitted_repo)


@pytest.fixture
def server():
    s = ModelServer(cases={}, markers={}, script=replay_agent).start()
    yield s
    s.stop()


@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_client_runs_the_cases_under_three_conditions(tmp_path, server, client):
    out = tmp_path / "run"
    done = _eval(client, server, out, "--conditions", "baseline,skills,inline", "-j", "4", *[a for c in CASES for a in ("--case", c)])
    why = f"{done.stdout}\n{done.stderr}\nrequests: {harness.dump(server)}"
    assert done.returncode == 0, why
    assert "Traceback" not in done.stderr
    records = _records(out)
    assert len(records) == len(CASES) * 3, why
    version = json.loads((out / "run.json").read_text())["model"]["agent_version"]
    cut: set[str] = set()  # skills whose body Codex cut before the model saw it
    for (case, condition), r in records.items():
        expected = case.split("/")[0]
        say = f"{case} {condition}: {r['answer'][-300:]!r} error={r['error']} agent={r['agent']}\n{why}"
        assert r["status"] == "ok" and r["model"]["agent"] == client and r["agent"]["version"] == version, say
        assert not r["agent"]["evals_visible"], say
        if condition == "skills":
            assert r["activated_skills"] == [expected], say
            assert f"saw-skill:{expected}" in r["answer"], say  # its SKILL.md text reached the model
            first, middle, last = EDGES[expected]
            if client == "codex":
                # 0.171.0 keeps the head and the tail of a long command output and cuts its
                # middle before the model sees it; its event stream (so the record) has it all.
                returned = harness.folded(" ".join(m["content"] for m in r["messages"] if m["role"] == "tool"))
                assert first in returned and middle in returned and last in returned, say
                seen = [harness.folded(i["output"]) for q in server.requests for i in (q["body"] or {}).get("input") or () if i.get("type") == "function_call_output" and first in harness.folded(i["output"])]
                assert seen and all(first in o and last in o for o in seen), say
                cut.update(expected for o in seen if "chars truncated" in o and middle not in o)
            else:  # the whole body reached the model, in every request that carries it
                carrying = [t for t in _strings_of_requests(server) if first in t]
                assert carrying and all(middle in t and last in t for t in carrying), say
            assert r["agent"]["instruction_file"] is None, say
        elif condition == "inline":
            assert r["activated_skills"] == [] and r["inlined_skill"] == expected, say
            assert r["agent"]["instruction_file"] and f"saw-skill:{expected}" in r["answer"], say
        else:
            assert r["activated_skills"] == [] and r["answer"].endswith("saw-skill:none"), say
    if client == "codex":  # the FSDP SKILL.md (19.6 kB) is past Codex's limit
        assert "nemo-mbridge-perf-megatron-fsdp" in cut, cut
    graded = _mbskills("grade", str(out))
    assert graded.returncode == 0, graded.stdout + graded.stderr
    rows = json.loads((out / "report.json").read_text())["overall"]["conditions"]
    assert set(rows) == {"baseline", "skills", "inline"}, rows
    assert rows["skills"]["pass_rate"] == rows["inline"]["pass_rate"] == 1.0, rows
    assert rows["skills"]["routing"] == 1.0 and rows["inline"]["routing"] is None, rows  # the skill found and read through the client
    assert rows["baseline"]["pass_rate"] in (None, 0.0), rows


def _strings_of_requests(server: ModelServer) -> list[str]:
    return [harness.strings(r["body"]) for r in server.requests if r["body"] is not None]


@pytest.mark.parametrize("client", list(CLIENTS))
def test_baseline_sends_no_skill_text_in_any_request(tmp_path, server, client):
    done = _eval(client, server, tmp_path / "run", "--conditions", "baseline", "--case", CASES[0])
    assert done.returncode == 0, done.stdout + done.stderr
    sent = _strings_of_requests(server)
    assert sent, f"{client} sent no model request: {harness.dump(server)}"
    for name, skill in SKILLS.items():
        for text in sent:
            assert MARKERS[name] not in text and harness.folded(skill.description).strip() not in text and name not in text, f"{client}: {name} reached a baseline request"


# Tools that would change something, as each client names them: a file written outside the
# workspace, and a shell command that would reach the relay (so the server would see it).
def _harmful(client: str, target: Path) -> list[tuple[str, dict]]:
    shell = f"touch {target}; curl -s http://127.0.0.1:18181/curl-probe"
    return {
        "codex": [("exec_command", {"cmd": shell})],
        "claude-code": [("Write", {"file_path": str(target), "content": "x"}), ("Bash", {"command": shell})],
        "gemini-cli": [("write_file", {"file_path": str(target), "content": "x"}), ("run_shell_command", {"command": shell})],
        "qwen-code": [("write_file", {"file_path": str(target), "content": "x"}), ("run_shell_command", {"command": shell})],
        "opencode": [("write", {"filePath": str(target), "content": "x"}), ("bash", {"command": shell, "description": "probe"})],
    }[client]


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_model_asking_to_write_or_fetch_changes_nothing(tmp_path, client):
    target = tmp_path / "written-by-the-agent.txt"
    plan = _harmful(client, target)

    def script(kind, body, seen):
        if len(seen.calls) < len(plan):
            return "", [plan[len(seen.calls)]]
        return "Done trying.", []

    server = ModelServer(cases={}, markers={}, script=script).start()
    try:
        done = _eval(client, server, tmp_path / "run", "--conditions", "skills", "--case", CASES[0])
    finally:
        server.stop()
    why = f"{done.stdout}\n{done.stderr}\n{harness.dump(server)}"
    assert done.returncode == 0, why
    assert not target.exists(), f"{client} wrote {target}; {why}"
    assert not [r for r in server.requests if r["path"] == "/curl-probe"], f"{client} ran curl; {why}"
    (record,) = _records(tmp_path / "run").values()
    assert record["status"] == "ok" and record["answer"] == "Done trying.", record
    refused = [r["tool"] for r in record["agent"]["tools_refused"]]
    if client == "codex":
        # Codex's --json stream (0.171.0) leaves a command its sandbox failed out on some
        # runs and reports it on others: the record names it exactly when the stream does.
        assert refused in ([], ["exec_command"]), refused
    else:
        assert refused == [name for name, _ in plan], record["agent"]


def test_compare_puts_a_client_beside_the_api_loop(tmp_path, server):
    cases = [a for c in CASES for a in ("--case", c)]
    api = _mbskills("eval", "--bundle", str(BUNDLE), "--model", f"replay:{CALIBRATION}?baseline=bad-1", "--conditions", "baseline,skills", "--out", str(tmp_path / "api"), "--progress", "plain", *cases)
    assert api.returncode == 0, api.stderr
    agent = _eval("claude-code", server, tmp_path / "claude", "--conditions", "baseline,skills", "-j", "2", *cases)
    assert agent.returncode == 0, agent.stdout + agent.stderr
    done = _mbskills("compare", str(tmp_path / "api"), str(tmp_path / "claude"), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    rows = {(r["agent"], r["condition"]): r for r in table["rows"]}
    assert set(rows) == {("api", "baseline"), ("api", "skills"), ("claude-code", "baseline"), ("claude-code", "skills")}
    for who in ("api", "claude-code"):
        assert rows[who, "skills"]["pass_rate"] == 1.0 and rows[who, "skills"]["routing"] == 1.0, rows
        assert rows[who, "baseline"]["routing"] is None, rows  # nothing was offered to read
    assert rows["claude-code", "skills"]["tokens"] > 0 and rows["api", "skills"]["tokens"] is None  # a recording has no token counts
    assert "| claude-code " in done.stdout and "| api loop · replay:" in done.stdout, done.stdout
    other = _mbskills("compare", str(tmp_path / "api"), str(tmp_path / "run-of-one"))
    assert other.returncode == 2 and "Traceback" not in other.stderr, other.stderr
    one_case = _mbskills("eval", "--bundle", str(BUNDLE), "--model", f"replay:{CALIBRATION}", "--conditions", "baseline", "--out", str(tmp_path / "one"), "--progress", "plain", "--case", CASES[0])
    assert one_case.returncode == 0, one_case.stderr
    differ = _mbskills("compare", str(tmp_path / "api"), str(tmp_path / "one"))
    assert differ.returncode == 2 and "holds other cases" in differ.stderr and len(differ.stderr.strip().splitlines()) == 1, differ.stderr
