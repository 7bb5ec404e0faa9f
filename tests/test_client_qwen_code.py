"""`mbskills install --client qwen-code` puts the skills where Qwen Code finds them.

The real client (@qwen-code/qwen-code, pinned in tests/clients/package.json) runs headless
(`qwen -o stream-json -p PROMPT`) and offline, in its own network namespace, against the
scripted OpenAI Chat Completions server (tests/model_server.py, streamed by
model_streams.chat). What it sends to the model is what is checked:

* after each install (project copy, project link, user copy, and the .agents/skills
  folders `--client agents` fills, which Qwen Code reads too) the first model request
  lists both bundle skills, each with its whole description;
* when the scripted model calls Qwen Code's own `skill` tool with a skill's name, the next
  request carries that SKILL.md body back to the model;
* Qwen Code logs no "Skipping non-directory entry" warning for the install (the old
  installer's manifest inside the skills folder caused one; a stray file there still does,
  which a test shows, so the check is live);
* skills installed into .claude/skills only (`--client claude-code`), a folder Qwen Code
  does not read, are not listed: the listing test can fail.

What this version of Qwen Code (0.24.4) does, as established by these runs and its code:
* Project skills: <project>/.qwen/skills/<name>/SKILL.md and <project>/.agents/skills/...;
  user skills: ~/.qwen/skills (or $QWEN_HOME/skills) and ~/.agents/skills; plus its own
  bundled skills. Project skills are skipped when the project is the home folder. A skill
  folder that is a symlink to a folder is followed.
* Its debug logger (where the skill loader's warnings go) writes only to a file,
  ~/.qwen/debug/<session>.txt, and only with QWEN_DEBUG_LOG_FILE set: never to stdout or
  stderr. So the warning check reads that file as well as stdout and stderr.
* With the auth type "openai" in ~/.qwen/settings.json it reads OPENAI_BASE_URL,
  OPENAI_API_KEY and OPENAI_MODEL and POSTs /v1/chat/completions with stream=true. With
  memory.enableManagedAutoMemory off and --approval-mode default, every request is a turn
  of the conversation (otherwise a memory-extraction subagent request follows the answer,
  and the "auto" approval mode sends a non-streamed security-classifier request before a
  tool runs). So the first request is the conversation.
* The catalogue is neither in the system message nor in the skill tool's description: it
  is the first text part of the first user message, a <system-reminder> reading "The
  following skills are available for use with the Skill tool." then <available_skills>
  with one <skill><name>..</name><description>DESCRIPTION (project|user)</description>
  <location>project|user</location></skill> per skill (bundled ones too). The description
  is XML-escaped (' -> &apos;, " -> &quot;) but not cut: the test unescapes the entities
  and then requires the whole description.
* The skill tool takes {"skill": NAME}; in `-p` mode it is declined ("non-interactive
  mode cannot prompt for confirmation") unless allowed, hence `--allowed-tools skill`. Its
  tool result is "Base directory for this skill: DIR" then the SKILL.md body (front matter
  stripped).
"""

from __future__ import annotations

import html
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from model_server import ModelServer  # noqa: E402

CLIENT = "qwen-code"
PROMPT = "Which skills can you use here? Answer in one line."
LISTING = "The following skills are available for use with the Skill tool."
SKILL_TOOL = "skill"
WARNING = "Skipping non-directory entry"
SUBDIRS = {"qwen-code": ".qwen/skills", "agents": ".agents/skills", "claude-code": ".claude/skills"}
INSTALLS = {  # id -> (client, mbskills install flags after --client CLIENT, where they land)
    "project-copy": ("qwen-code", (), "project"),
    "project-link": ("qwen-code", ("--link",), "project"),
    "user-copy": ("qwen-code", ("--user",), "home"),
    "agents-project": ("agents", (), "project"),
    "agents-user": ("agents", ("--user",), "home"),
}


def _install(project: Path, home: Path, client: str, flags: tuple[str, ...], where: str) -> Path:
    """Run `mbskills install --client CLIENT FLAGS` and return the folder it filled."""
    dest = (home if where == "home" else project) / SUBDIRS[client]
    return harness.install_into(project, home, dest, client, *flags)


def _folders(root: Path) -> tuple[Path, Path]:
    return harness.project_and_home(root)


@dataclass
class Run:
    server: ModelServer
    ran: harness.Ran
    dest: Path
    level: str  # "project" or "user": where Qwen Code should say it found the skills
    debug_log: str  # Qwen Code's debug log file(s) for this run

    def why(self) -> str:
        return f"installed into {self.dest}; requests: {harness.dump(self.server)}\n{self.ran.describe()}"


def _run_qwen(root: Path, project: Path, home: Path, dest: Path, script) -> Run:
    qwen = harness.client_bin("qwen")
    (home / ".qwen").mkdir(exist_ok=True)
    (home / ".qwen/settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    }))
    sock = str(root / "model.sock")
    server = ModelServer(cases={}, markers={}, unix_path=sock, script=script).start()
    env = harness.client_env(home, {
        "OPENAI_BASE_URL": harness.base_url("/v1"),
        "OPENAI_API_KEY": "sk-test-offline",
        "OPENAI_MODEL": "scripted",
        "QWEN_DEBUG_LOG_FILE": "1",  # the skill loader's warnings go only to this file
    })
    argv = [str(qwen), "--approval-mode", "default", "--allowed-tools", SKILL_TOOL, "-o", "stream-json", "-p", PROMPT]
    try:
        ran = harness.run_jailed(argv, cwd=project, env=env, socket_path=sock, timeout=60)
    finally:
        server.stop()
    debug_log = "".join(p.read_text("utf-8", "replace") for p in sorted((home / ".qwen/debug").glob("*.txt")))
    level = "user" if dest.is_relative_to(home) else "project"
    return Run(server, ran, dest, level, debug_log)


def _conversation(run: Run) -> list[dict]:
    """The model requests, checked to be the conversation from the first one on."""
    assert run.ran.rc == 0, run.why()
    requests = harness.model_requests(run.server, "chat")
    assert requests, f"Qwen Code sent no /v1/chat/completions request; {run.why()}"
    assert all(r["path"] == "/v1/chat/completions" and r["stream"] for r in requests), run.why()
    # The first model request is the conversation itself: it carries the prompt and the
    # skill tool (with memory extraction and the auto-mode classifier off, nothing else).
    first = requests[0]["body"]
    assert PROMPT in harness.strings(first["messages"]), f"first request is not the conversation; {run.why()}"
    assert SKILL_TOOL in [t["function"]["name"] for t in first.get("tools") or ()], f"first request has no {SKILL_TOOL} tool; {run.why()}"
    return requests


def _shown(body: dict) -> str:
    """What the model was shown, with the catalogue's XML entities (&apos; &quot; &amp;
    &lt; &gt;) undone."""
    return html.unescape(harness.strings(body))


_reads_each_skill = harness.one_skill_a_turn(SKILL_TOOL, "skill")


@pytest.fixture(scope="module", params=list(INSTALLS))
def installed_run(request, tmp_path_factory) -> Run:
    """One client run per install, shared by the listing and the reading tests: the
    scripted model reads each skill with the skill tool, then answers."""
    root = tmp_path_factory.mktemp(request.param)
    project, home = _folders(root)
    client, flags, where = INSTALLS[request.param]
    dest = _install(project, home, client, flags, where)
    if where == "home":  # only the user folder holds them, so that is what is read
        assert not (project / ".qwen").exists() and not (project / ".agents").exists()
    return _run_qwen(root, project, home, dest, _reads_each_skill)


def test_first_request_lists_both_skills(installed_run):
    run = installed_run
    first = _conversation(run)[0]["body"]
    shown = _shown(first)
    assert harness.folded(LISTING) in shown, run.why()
    for skill in harness.bundle_skills():
        description = harness.folded(skill.description).strip()
        # Qwen Code XML-escapes the description (undone by _shown) but keeps it whole,
        # followed by the level the skill was found at.
        entry = f"<name> {skill.name} </name> <description> {description} ({run.level}) </description>"
        assert entry in shown, f"{skill.name} (with its whole description, level {run.level}) missing from the first request; {run.why()}"


def test_skill_tool_sends_skill_body_back(installed_run):
    run = installed_run
    requests = _conversation(run)
    skills = harness.bundle_skills()
    assert len(requests) == len(skills) + 1, run.why()
    for turn, skill in enumerate(skills):
        marker = harness.folded(harness.body_marker(skill))
        assert marker not in harness.strings(requests[turn]["body"]), f"{skill.name} body already in context before its skill call ({marker!r}); {run.why()}"
        last = requests[turn + 1]["body"]["messages"][-1]
        assert last["role"] == "tool", f"request {turn + 1} does not answer the skill call; {run.why()}"
        assert marker in harness.strings(last), f"{skill.name}: SKILL.md body not sent back after the skill call; {run.why()}"
        base = re.search(r"Base directory for this skill: (\S+)", harness.strings(last))
        assert base and base.group(1) == str(run.dest / skill.name), f"{skill.name} read from elsewhere than {run.dest}; {run.why()}"


def test_no_non_directory_warning(installed_run):
    """Nothing the installer leaves in the skills folder trips Qwen Code's skill loader."""
    run = installed_run
    _conversation(run)
    assert "SKILL_MANAGER" in run.debug_log, f"no debug log from the skill loader, so the check below means nothing; {run.why()}"
    said = run.ran.stdout + run.ran.stderr + run.debug_log
    lines = [line for line in said.splitlines() if WARNING in line]
    assert not lines, f"Qwen Code warned about the install: {lines}; {run.why()}"


def test_stray_file_in_skills_folder_is_warned_about(tmp_path):
    """The warning check is live: a plain file beside the skill folders (as the old
    installer's .mbskills-manifest.json was) makes Qwen Code log the warning."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, "qwen-code", (), "project")
    (dest / ".mbskills-manifest.json").write_text("{}")
    run = _run_qwen(tmp_path, project, home, dest, harness.answer_only)
    _conversation(run)
    assert f"{WARNING}: .mbskills-manifest.json" in run.debug_log, run.why()


def test_claude_folder_is_not_read_by_qwen_code(tmp_path):
    """The negative: skills in .claude/skills (`--client claude-code`) stay unlisted, while
    the catalogue itself is there (Qwen Code's bundled skills), so the absence means
    something."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, "claude-code", (), "project")
    assert not (project / ".qwen").exists() and not (project / ".agents").exists()
    run = _run_qwen(tmp_path, project, home, dest, harness.answer_only)
    shown = _shown(_conversation(run)[0]["body"])
    assert harness.folded(LISTING) in shown, run.why()
    # Only the catalogue counts: the startup context's folder tree of the project does
    # show .claude/skills/<name>/ paths.
    catalogue = re.search(r"<available_skills>(.*?)</available_skills>", shown)
    assert catalogue and "<name> review </name>" in catalogue.group(1), f"no catalogue of the bundled skills; {run.why()}"
    for skill in harness.bundle_skills():
        assert skill.name not in catalogue.group(1), f"{skill.name} listed although only {dest} holds it; {run.why()}"
        assert harness.folded(skill.description).strip()[:80] not in shown, run.why()
