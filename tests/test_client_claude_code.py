"""`mbskills install --client claude-code` puts the skills where Claude Code finds them.

The real client (@anthropic-ai/claude-code, pinned in tests/clients/package.json) runs
headless (`claude -p --output-format stream-json --verbose`) and offline, in its own
network namespace, against the scripted Anthropic Messages server (tests/model_server.py,
streamed by model_streams.anthropic). What it sends to the model is what is checked:

* after each install (project copy, project link, user copy) the first model request
  lists both bundle skills, each with its whole description;
* when the scripted model calls Claude Code's own `Skill` tool with a skill's name, the
  next request carries that SKILL.md body back to the model;
* skills installed into .agents/skills (`--client agents`), a folder Claude Code does not
  read, are not listed: the listing test can fail.

What this version of Claude Code does, as established by these runs:
* It reads project skills from <project>/.claude/skills/<name>/SKILL.md and user skills
  from ~/.claude/skills/<name>/SKILL.md; .agents/skills is invisible to it. A skill folder
  that is a symlink, and a SKILL.md that is a symlink, are both followed.
* With CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC set it sends exactly one request per model
  turn, POST /v1/messages with stream=true and the tools (no count_tokens, no small-model
  title or quota request, nothing else), so the first request is the conversation itself.
* The catalogue is not in the top-level `system` field nor in the Skill tool's
  description: it is a message with role "system" inside `messages`, right after the first
  user message, reading "The following skills are available for use with the Skill tool:"
  then one "- name: description" line per skill (its built-in skills too).
* It cuts a description longer than about 1,536 characters (a 2,999-character one kept
  its first 1,535 characters, then "…"); the bundle's are about 1,020 characters and
  arrive whole, which the test asserts.
* The Skill tool takes {"skill": NAME}; its tool_result is only "Launching skill: NAME",
  and the SKILL.md body (front matter stripped, headed "Base directory for this skill:
  DIR") follows as a text block in the same user message.
* Running as root needs no flag, and the Skill tool runs in `-p` mode without any
  permission setting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from model_server import ModelServer  # noqa: E402

CLIENT = "claude-code"
PROMPT = "Which skills can you use here? Answer in one line."
LISTING = "The following skills are available for use with the Skill tool:"
SKILL_TOOL = "Skill"
INSTALLS = {  # id -> (mbskills install flags after --client, where the skills land)
    "project-copy": ((), "project"),
    "project-link": (("--link",), "project"),
    "user-copy": (("--user",), "home"),
}


def _install(project: Path, home: Path, client: str, flags: tuple[str, ...], where: str) -> Path:
    """Run `mbskills install --client CLIENT FLAGS` and return the folder it filled."""
    sub = {"claude-code": ".claude/skills", "agents": ".agents/skills"}[client]
    dest = (home if where == "home" else project) / sub
    return harness.install_into(project, home, dest, client, *flags)


def _run_claude(tmp_path: Path, project: Path, home: Path, script) -> tuple[ModelServer, harness.Ran]:
    claude = harness.client_bin("claude")
    sock = str(tmp_path / "model.sock")
    server = ModelServer(cases={}, markers={}, unix_path=sock, script=script).start()
    env = harness.client_env(home, {
        "ANTHROPIC_BASE_URL": harness.base_url(),  # the client adds /v1/messages
        "ANTHROPIC_API_KEY": "sk-ant-test-offline",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    })
    argv = [str(claude), "-p", "--output-format", "stream-json", "--verbose", PROMPT]
    try:
        ran = harness.run_jailed(argv, cwd=project, env=env, socket_path=sock, timeout=60)
    finally:
        server.stop()
    return server, ran


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    return harness.project_and_home(tmp_path)


def _conversation(server: ModelServer, ran: harness.Ran) -> list[dict]:
    """The model requests, checked to be the conversation from the first one on."""
    why = f"requests: {harness.dump(server)}\n{ran.describe()}"
    assert ran.rc == 0, why
    requests = harness.model_requests(server, "anthropic")
    assert requests, f"Claude Code sent no /v1/messages request; {why}"
    assert not harness.model_requests(server, "other"), f"Claude Code asked for a route the server lacks; {why}"
    assert all(r["path"] == "/v1/messages" and r["stream"] for r in requests), why
    # The first model request is literally the conversation: it carries the prompt and
    # the tools (this version sends no title/quota side request before it).
    first = requests[0]["body"]
    assert PROMPT in harness.strings(first["messages"]), f"first request is not the conversation; {why}"
    assert SKILL_TOOL in [t["name"] for t in first.get("tools") or ()], f"first request has no {SKILL_TOOL} tool; {why}"
    return requests


@pytest.mark.parametrize("install", list(INSTALLS))
def test_first_request_lists_both_skills(tmp_path, install):
    project, home = _folders(tmp_path)
    flags, where = INSTALLS[install]
    dest = _install(project, home, CLIENT, flags, where)
    if where == "home":  # only the user folder holds them, so that is what is read
        assert not (project / ".claude/skills").exists()
    server, ran = _run_claude(tmp_path, project, home, harness.answer_only)
    first = _conversation(server, ran)[0]["body"]
    shown = harness.strings(first)
    why = f"installed into {dest}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert harness.folded(LISTING) in shown, why
    for skill in harness.bundle_skills():
        description = harness.folded(skill.description).strip()
        # Claude Code cuts descriptions past ~1,536 characters; the bundle's are shorter,
        # so each must arrive whole, on its own "- name: description" catalogue line.
        assert len(description) < 1500, f"{skill.name}: description now long enough to be cut by Claude Code"
        assert f"- {skill.name}: {description}" in shown, f"{skill.name} (with its description) missing from the first request; {why}"


@pytest.mark.parametrize("install", list(INSTALLS))
def test_skill_tool_sends_skill_body_back(tmp_path, install):
    project, home = _folders(tmp_path)
    flags, where = INSTALLS[install]
    dest = _install(project, home, CLIENT, flags, where)
    skills = harness.bundle_skills()
    names = [s.name for s in skills]

    def script(kind, body, seen):
        # One Skill call per turn, each bundle skill in turn, then an answer.
        assert kind == "anthropic"
        done = seen.calls.count(SKILL_TOOL)
        if SKILL_TOOL in seen.tools and done < len(names):
            return "", [(SKILL_TOOL, {"skill": names[done]})]
        return "Read both skills.", []

    server, ran = _run_claude(tmp_path, project, home, script)
    requests = _conversation(server, ran)
    why = f"installed into {dest}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert len(requests) == len(skills) + 1, why
    for turn, skill in enumerate(skills):
        marker = harness.folded(harness.body_marker(skill))
        assert marker not in harness.strings(requests[turn]["body"]), f"{skill.name} body already in context before its Skill call ({marker!r}); {why}"
        after = requests[turn + 1]["body"]
        last = after["messages"][-1]
        assert any(b.get("type") == "tool_result" for b in last["content"]), f"request {turn + 1} does not answer the Skill call; {why}"
        assert marker in harness.strings(last), f"{skill.name}: SKILL.md body not sent back after the Skill call; {why}"


def _assert_unlisted(tmp_path: Path, project: Path, home: Path, context: str) -> None:
    """A session's first request has the catalogue (the built-in skills), so absence means
    something, and neither bundle skill's name nor description in it."""
    server, ran = _run_claude(tmp_path, project, home, harness.answer_only)
    shown = harness.strings(_conversation(server, ran)[0]["body"])
    why = f"{context}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert harness.folded(LISTING) in shown, why
    for skill in harness.bundle_skills():
        assert skill.name not in shown, f"{skill.name} listed; {why}"
        assert harness.folded(skill.description).strip()[:80] not in shown, f"{skill.name}'s description shown; {why}"


def test_agents_folder_is_not_read_by_claude_code(tmp_path):
    """The negative: skills in .agents/skills (`--client agents`) stay unlisted, while the
    catalogue itself is there (Claude Code's built-in skills), so the absence means
    something."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, "agents", (), "project")
    assert not (project / ".claude").exists() and not (home / ".claude/skills").exists()
    _assert_unlisted(tmp_path, project, home, f"only {dest} holds them")


def test_uninstall_takes_the_skills_out_of_the_catalogue(tmp_path):
    """After `mbskills uninstall --client claude-code` the next session lists neither skill."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, CLIENT, (), "project")
    done = subprocess.run([sys.executable, "-m", "runner.cli", "uninstall", "--client", CLIENT], cwd=project, env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _assert_unlisted(tmp_path, project, home, f"uninstalled from {dest}")
