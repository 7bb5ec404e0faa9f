"""`mbskills install --client gemini-cli` puts the skills where Gemini CLI finds them.

The real client (@google/gemini-cli, pinned in tests/clients/package.json) runs headless
(`gemini -m MODEL -o stream-json -p PROMPT`) and offline, in its own network namespace,
against the scripted Gemini API server (tests/model_server.py; POST
/v1beta/models/MODEL:streamGenerateContent?alt=sse, streamed by model_streams.gemini).
What it sends to the model is what is checked:

* after each install (project copy, project link, user copy) the first model request
  lists both bundle skills, each with its whole description and its installed path;
* its own skill tool, `activate_skill`, sends each SKILL.md body back to the model, and
  once a skill is active `read_file` on the installed SKILL.md does too (every install);
* without `activate_skill`, `read_file` on the installed SKILL.md path sends the body back
  for a project copy only: the link and user installs lie outside the workspace, and
  read_file refuses them;
* skills installed for Claude Code (.claude/skills and ~/.claude/skills), folders Gemini
  CLI does not read, are not listed: the listing test can fail.

What this version of Gemini CLI does, as established by these runs and its bundle:
* It reads user skills from ~/.gemini/skills and ~/.agents/skills, and, only in a trusted
  folder, workspace skills from <cwd>/.gemini/skills and <cwd>/.agents/skills: each
  <dir>/SKILL.md or <dir>/*/SKILL.md (a symlinked skill folder is followed). In an
  untrusted folder `-p` refuses to run at all (rc 55) unless GEMINI_CLI_TRUST_WORKSPACE=true
  or --skip-trust.
* The catalogue is in the system instruction (`systemInstruction`), section "# Available
  Agent Skills": `<available_skills>` with one `<skill><name/><description/><location/>`
  entry per skill, built-in ones (skill-creator, antigravity-support) included. The
  description is the front matter's, neither cut nor XML-escaped; the location is the
  SKILL.md path as installed (a link's own path, not its target).
* The first user message also carries a folder tree of the workspace, so the names of
  skill folders inside the project show up there whatever Gemini CLI makes of them: the
  negative test therefore looks at the catalogue and at the descriptions.
* With -m it sends exactly one streamGenerateContent request per model turn and nothing
  else (no countTokens, no router/classifier call, no telemetry): without -m its model
  router adds classifier calls and a run takes over a minute.
* `activate_skill` ({"name": NAME}) is offered only when it may run without asking: with
  --approval-mode=yolo, or a policy rule allowing it (~/.gemini/policies/*.toml, used
  here as the narrower grant). Its functionResponse carries
  `<activated_skill name=...><instructions>BODY</instructions>...`, and it adds the
  skill's folder to the paths read_file may read.
* `read_file` ({"file_path": PATH}) resolves symlinks and refuses anything outside the
  workspace and its temp folder ("Path not in workspace"), which is the case for
  ~/.gemini/skills and for the bundle a --link install points at.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from model_server import ModelServer  # noqa: E402

CLIENT = "gemini-cli"
MODEL = "gemini-2.5-flash"  # any name: the scripted server plays every model
PROMPT = "Which skills can you use here? Answer in one line."
ACTIVATE, READ_FILE = "activate_skill", "read_file"
INSTALLS = {  # id -> (mbskills install flags after --client, where the skills land)
    "project-copy": ((), "project"),
    "project-link": (("--link",), "project"),
    "user-copy": (("--user",), "home"),
}
FOLDERS = {"gemini-cli": ".gemini/skills", "claude-code": ".claude/skills"}
SETTINGS = {  # ~/.gemini/settings.json: API-key auth, nothing phoned home, no updates
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
ALLOW_ACTIVATE = '[[rule]]\ntoolName = "activate_skill"\ndecision = "allow"\npriority = 100\n'
ENTRY = re.compile(r"<skill>\s*<name>(.*?)</name>\s*<description>(.*?)</description>\s*<location>(.*?)</location>\s*</skill>", re.S)


def _install(project: Path, home: Path, client: str, flags: tuple[str, ...], where: str) -> Path:
    """Run `mbskills install --client CLIENT FLAGS`; return the folder it filled."""
    dest = (home if where == "home" else project) / FOLDERS[client]
    return harness.install_into(project, home, dest, client, *flags)


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    return harness.project_and_home(tmp_path)


def _run_gemini(tmp_path: Path, project: Path, home: Path, script, *, allow_activate: bool = False, args: tuple[str, ...] = ()) -> tuple[ModelServer, harness.Ran]:
    gemini = harness.client_bin("gemini")
    config = home / ".gemini"
    config.mkdir(exist_ok=True)  # a --user install made it already
    (config / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
    if allow_activate:
        (config / "policies").mkdir(exist_ok=True)
        (config / "policies" / "skills.toml").write_text(ALLOW_ACTIVATE)
    sock = str(tmp_path / "model.sock")
    server = ModelServer(cases={}, markers={}, unix_path=sock, script=script).start()
    env = harness.client_env(home, {
        "GOOGLE_GEMINI_BASE_URL": harness.base_url(),  # the client adds /v1beta/models/...
        "GEMINI_API_KEY": "gemini-test-key-offline",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # workspace skills load only in a trusted folder
        "GEMINI_CLI_NO_RELAUNCH": "true",  # no child node process with a bigger heap
    })
    argv = [str(gemini), "-m", MODEL, "-o", "stream-json", *args, "-p", PROMPT]
    try:
        ran = harness.run_jailed(argv, cwd=project, env=env, socket_path=sock, timeout=60)
    finally:
        server.stop()
    return server, ran


def _conversation(server: ModelServer, ran: harness.Ran) -> list[dict]:
    """The model requests, checked to be the conversation from the first one on."""
    why = f"requests: {harness.dump(server)}\n{ran.describe()}"
    assert ran.rc == 0, why
    requests = server.requests
    assert requests, f"Gemini CLI sent no request; {why}"
    path = f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert all(r["kind"] == "gemini" and r["path"] == path and r["stream"] for r in requests), f"a request other than {path}; {why}"
    first = requests[0]["body"]
    assert PROMPT in harness.strings(first["contents"]), f"first request is not the conversation; {why}"
    return requests


def _system(body: dict) -> str:
    return "".join(p.get("text", "") for p in (body.get("systemInstruction") or {}).get("parts") or ())


def _catalogue(body: dict) -> dict[str, tuple[str, str]]:
    """name -> (description, location) for each <skill> of the system instruction's
    <available_skills>, whitespace folded."""
    system = _system(body)
    block = re.search(r"<available_skills>(.*?)</available_skills>", system, re.S)
    if block is None:
        return {}
    return {html.unescape(n).strip(): (harness.folded(html.unescape(d)).strip(), html.unescape(loc).strip()) for n, d, loc in ENTRY.findall(block.group(1))}


def _tools(body: dict) -> list[str]:
    return [d["name"] for t in body.get("tools") or () for d in t.get("functionDeclarations") or ()]


def _responses(body: dict) -> list[dict]:
    """The functionResponse parts of the request's last turn (the tool results it answers)."""
    last = body["contents"][-1]
    return [p["functionResponse"] for p in last.get("parts") or () if "functionResponse" in p]


@pytest.mark.parametrize("install", list(INSTALLS))
def test_first_request_lists_both_skills(tmp_path, install):
    project, home = _folders(tmp_path)
    flags, where = INSTALLS[install]
    dest = _install(project, home, CLIENT, flags, where)
    if where == "home":  # only the user folder holds them, so that is what is read
        assert not (project / ".gemini").exists()
    server, ran = _run_gemini(tmp_path, project, home, harness.answer_only)
    first = _conversation(server, ran)[0]["body"]
    shown = harness.strings(first)
    listed = _catalogue(first)
    why = f"installed into {dest}; catalogue: {sorted(listed)}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert "skill-creator" in listed, f"no <available_skills> catalogue with the built-in skills in the system instruction; {why}"
    for skill in harness.bundle_skills():
        description = harness.folded(skill.description).strip()
        # Gemini CLI neither cuts nor escapes a description: the whole one must arrive.
        assert skill.name in shown and description in shown, f"{skill.name} (with its description) missing from the first request; {why}"
        assert skill.name in listed, f"{skill.name} not in the system instruction's catalogue; {why}"
        assert listed[skill.name] == (description, str(dest / skill.name / "SKILL.md")), f"{skill.name}: catalogue entry {listed[skill.name]}; {why}"


@pytest.mark.parametrize("install", list(INSTALLS))
def test_activate_skill_sends_skill_body_back(tmp_path, install):
    """activate_skill for each skill in turn (allowed by a policy rule), then read_file on
    the first one's installed SKILL.md, which an activation lets it read."""
    project, home = _folders(tmp_path)
    flags, where = INSTALLS[install]
    dest = _install(project, home, CLIENT, flags, where)
    skills = harness.bundle_skills()
    names = [s.name for s in skills]
    installed = str(dest / names[0] / "SKILL.md")

    def script(kind, body, seen):
        assert kind == "gemini"
        done = seen.calls.count(ACTIVATE)
        if ACTIVATE in seen.tools and done < len(names):
            return "", [(ACTIVATE, {"name": names[done]})]
        if READ_FILE in seen.tools and READ_FILE not in seen.calls:
            return "", [(READ_FILE, {"file_path": installed})]
        return "Read both skills.", []

    server, ran = _run_gemini(tmp_path, project, home, script, allow_activate=True)
    requests = _conversation(server, ran)
    why = f"installed into {dest}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert ACTIVATE in _tools(requests[0]["body"]), f"{ACTIVATE} not offered although a policy allows it; {why}"
    assert len(requests) == len(skills) + 2, why
    for turn, skill in enumerate(skills):
        marker = harness.folded(harness.body_marker(skill))
        assert marker not in harness.strings(requests[turn]["body"]), f"{skill.name} body already in context before its activation ({marker!r}); {why}"
        answered = _responses(requests[turn + 1]["body"])
        assert [r["name"] for r in answered] == [ACTIVATE], f"request {turn + 1} does not answer the {ACTIVATE} call; {why}"
        assert marker in harness.strings(answered), f"{skill.name}: SKILL.md body not sent back by {ACTIVATE}; {why}"
        assert f'<activated_skill name="{skill.name}">' in harness.strings(answered), why
    answered = _responses(requests[-1]["body"])
    assert [r["name"] for r in answered] == [READ_FILE], f"last request does not answer the {READ_FILE} call; {why}"
    assert harness.folded(harness.body_marker(skills[0])) in harness.strings(answered), f"{READ_FILE} {installed} after activation did not send the body: {answered}; {why}"


def test_activate_skill_with_yolo(tmp_path):
    """The blunt way, as a user would run it: --approval-mode=yolo offers activate_skill
    with no policy file."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, CLIENT, (), "project")
    skill = harness.bundle_skills()[0]

    def script(kind, body, seen):
        if ACTIVATE in seen.tools and ACTIVATE not in seen.calls:
            return "", [(ACTIVATE, {"name": skill.name})]
        return "Read the skill.", []

    server, ran = _run_gemini(tmp_path, project, home, script, args=("--approval-mode=yolo",))
    requests = _conversation(server, ran)
    why = f"installed into {dest}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert ACTIVATE in _tools(requests[0]["body"]), f"{ACTIVATE} not offered in yolo mode; {why}"
    assert len(requests) == 2, why
    assert harness.folded(harness.body_marker(skill)) in harness.strings(_responses(requests[1]["body"])), f"{skill.name}: body not sent back; {why}"


@pytest.mark.parametrize("install", list(INSTALLS))
def test_read_file_on_installed_skill_md(tmp_path, install):
    """Default headless approval (no policy, no yolo): activate_skill is not offered, so the
    model reads the installed SKILL.md path (the catalogue's <location>) with read_file.
    That works for a project copy; a link (resolved into the bundle) and a user install
    (in ~/.gemini) lie outside the workspace, and read_file refuses them."""
    project, home = _folders(tmp_path)
    flags, where = INSTALLS[install]
    dest = _install(project, home, CLIENT, flags, where)
    skills = harness.bundle_skills()
    paths = [str(dest / s.name / "SKILL.md") for s in skills]

    def script(kind, body, seen):
        done = seen.calls.count(READ_FILE)
        if READ_FILE in seen.tools and done < len(paths):
            return "", [(READ_FILE, {"file_path": paths[done]})]
        return "Read both skills.", []

    server, ran = _run_gemini(tmp_path, project, home, script)
    requests = _conversation(server, ran)
    why = f"installed into {dest}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert ACTIVATE not in _tools(requests[0]["body"]), f"{ACTIVATE} offered without yolo or a policy: read it with that tool instead; {why}"
    assert len(requests) == len(skills) + 1, why
    readable = install == "project-copy"
    for turn, skill in enumerate(skills):
        marker = harness.folded(harness.body_marker(skill))
        assert marker not in harness.strings(requests[turn]["body"]), f"{skill.name} body already in context before it was read; {why}"
        answered = _responses(requests[turn + 1]["body"])
        assert [r["name"] for r in answered] == [READ_FILE], f"request {turn + 1} does not answer the {READ_FILE} call; {why}"
        got = harness.strings(answered)
        if readable:
            assert marker in got, f"{skill.name}: {READ_FILE} {paths[turn]} did not send the body back: {got[:400]}; {why}"
        else:
            assert marker not in got and "Path not in workspace" in got, f"{skill.name}: {READ_FILE} {paths[turn]} no longer refused: {got[:400]}; {why}"


def test_claude_folders_are_not_read_by_gemini_cli(tmp_path):
    """The negative: skills installed for Claude Code, in the project and in HOME, stay out
    of the catalogue (which is there, with Gemini CLI's built-in skills, so the absence
    means something) and their descriptions reach the model nowhere."""
    project, home = _folders(tmp_path)
    dests = [_install(project, home, "claude-code", flags, where) for flags, where in (((), "project"), (("--user",), "home"))]
    assert not (project / ".gemini").exists() and not (home / ".gemini").exists() and not (project / ".agents").exists()
    server, ran = _run_gemini(tmp_path, project, home, harness.answer_only)
    first = _conversation(server, ran)[0]["body"]
    shown = harness.strings(first)
    listed = _catalogue(first)
    why = f"installed into {dests}; catalogue: {sorted(listed)}; requests: {harness.dump(server)}\n{ran.describe()}"
    assert "skill-creator" in listed, f"no catalogue in the system instruction; {why}"
    for skill in harness.bundle_skills():
        assert skill.name not in listed and skill.name not in _system(first), f"{skill.name} listed although only {dests} hold it; {why}"
        assert harness.folded(skill.description).strip()[:80] not in shown, f"{skill.name}'s description reached the model; {why}"
