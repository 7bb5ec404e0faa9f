"""`mbskills install --client opencode` puts the skills where opencode finds them.

The real client (opencode-ai, pinned in tests/clients/package.json: a Bun-compiled binary,
opencode-linux-x64) runs headless (`opencode run --format json`) and offline, in its own
network namespace, against the scripted OpenAI Chat Completions server
(tests/model_server.py, streamed by model_streams.chat). What it sends to the model is
what is checked:

* after each install (project copy, project link, user copy, and two of the other
  folders it reads: .agents/skills from `--client agents`, ~/.claude/skills from
  `--client claude-code --user`) the first model request lists both bundle skills, each
  with its whole description;
* when the scripted model calls opencode's own `skill` tool with a skill's name, the next
  request carries that SKILL.md body back to the model;
* skills installed into .qwen/skills only (`--client qwen-code`), a folder opencode does
  not read, are not listed: the listing test can fail.

What this version of opencode (1.18.33) does, as established by these runs and its code:
* Skill folders: every config directory's {skill,skills}/**/SKILL.md, that is
  ~/.config/opencode/skills and <project>/.opencode/skills (and any .opencode folder up to
  the git worktree root); the "external" folders .claude/skills/**/SKILL.md and
  .agents/skills/**/SKILL.md in the home folder and in every folder from the working
  directory up to the worktree root (OPENCODE_DISABLE_EXTERNAL_SKILLS turns both off,
  OPENCODE_DISABLE_CLAUDE_CODE(_SKILLS) the .claude one); plus skills.paths and
  skills.urls from its config, and one built-in skill, customize-opencode. The scan
  follows symlinks, so a linked skill folder is found (its location stays the link's
  path).
* The provider package "@ai-sdk/openai-compatible" is bundled in the binary (a table of
  bundled provider factories, looked up by the model's npm name before anything is
  installed); only a package missing from that table is installed at run time, with npm's
  Arborist into ~/.cache/opencode/packages/, which the test checks stays absent. No other
  request than /v1/chat/completions reaches the server.
* Without `--title`, `opencode run` first sends a title-generation request (no tools, its
  own "You are a title generator" system prompt) before the conversation; a session given
  a title skips it, so with `--title` the first request is the conversation itself (the
  test checks it carries the prompt and the skill tool).
* The catalogue is in the system message (not in the skill tool's description, which
  only points to "the skills listed in the system prompt"): "Skills provide specialized
  instructions and workflows for specific tasks. ..." then <available_skills> with one
  <skill><name>..</name><description>..</description><location>PATH/SKILL.md</location>
  </skill> per skill. The description is sent as written, neither escaped nor cut.
* The skill tool takes {"name": NAME}; permission "skill" is allowed by default in `run`.
  Its result is <skill_content name=NAME> "# Skill: NAME", the SKILL.md body (front matter
  stripped), "Base directory for this skill: DIR" and a <skill_files> list of the skill's
  other files, which it lists with ripgrep: `rg` must be on PATH (client_env's PATH has
  /usr/bin/rg), or it would try to download one.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from model_server import ModelServer  # noqa: E402

PROMPT = "Which skills can you use here? Answer in one line."
LISTING = "Skills provide specialized instructions and workflows for specific tasks."
SKILL_TOOL = "skill"
PROVIDER, MODEL = "scripted", "model"
SUBDIRS = {
    ("opencode", "project"): ".opencode/skills",
    ("opencode", "home"): ".config/opencode/skills",
    ("agents", "project"): ".agents/skills",
    ("agents", "home"): ".agents/skills",
    ("claude-code", "project"): ".claude/skills",
    ("claude-code", "home"): ".claude/skills",
    ("qwen-code", "project"): ".qwen/skills",
}
INSTALLS = {  # id -> (client, mbskills install flags after --client CLIENT, where they land)
    "project-copy": ("opencode", (), "project"),
    "project-link": ("opencode", ("--link",), "project"),
    "user-copy": ("opencode", ("--user",), "home"),
    "agents-project": ("agents", (), "project"),
    "claude-code-user": ("claude-code", ("--user",), "home"),
}


def _install(project: Path, home: Path, client: str, flags: tuple[str, ...], where: str) -> Path:
    """Run `mbskills install --client CLIENT FLAGS` and return the folder it filled."""
    dest = (home if where == "home" else project) / SUBDIRS[client, where]
    return harness.install_into(project, home, dest, client, *flags)


def _folders(root: Path) -> tuple[Path, Path]:
    return harness.project_and_home(root, commit=True)


@dataclass
class Run:
    server: ModelServer
    ran: harness.Ran
    home: Path
    dest: Path

    def why(self) -> str:
        return f"installed into {self.dest}; requests: {harness.dump(self.server)}\n{self.ran.describe()}"


def _run_opencode(root: Path, project: Path, home: Path, dest: Path, script) -> Run:
    opencode = harness.client_bin("opencode")
    config = home / ".config/opencode"
    config.mkdir(parents=True, exist_ok=True)
    (config / "opencode.json").write_text(json.dumps({
        "autoupdate": False,
        "share": "disabled",
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",  # bundled in the binary: nothing to install
            "name": "Scripted model server",
            "options": {"baseURL": harness.base_url("/v1"), "apiKey": "sk-test-offline"},
            "models": {MODEL: {"name": "Scripted model", "tool_call": True}},
        }},
        "model": f"{PROVIDER}/{MODEL}",
    }))
    sock = str(root / "model.sock")
    server = ModelServer(cases={}, markers={}, unix_path=sock, script=script).start()
    env = harness.client_env(home, {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    })
    # --title: a titled session skips the title-generation request opencode would
    # otherwise send before the conversation.
    argv = [str(opencode), "run", "--format", "json", "--title", "mbskills client test", "-m", f"{PROVIDER}/{MODEL}", PROMPT]
    try:
        ran = harness.run_jailed(argv, cwd=project, env=env, socket_path=sock, timeout=60)
    finally:
        server.stop()
    return Run(server, ran, home, dest)


def _conversation(run: Run) -> list[dict]:
    """The model requests, checked to be the conversation from the first one on."""
    assert run.ran.rc == 0, run.why()
    assert all(r["kind"] == "chat" for r in run.server.requests), f"opencode asked the server for something else; {run.why()}"
    assert not (run.home / ".cache/opencode/packages").exists(), f"opencode installed a package at run time; {run.why()}"
    requests = harness.model_requests(run.server, "chat")
    assert requests, f"opencode sent no /v1/chat/completions request; {run.why()}"
    assert all(r["path"] == "/v1/chat/completions" and r["stream"] for r in requests), run.why()
    # With --title the first request is the conversation: it carries the prompt and the
    # skill tool (without --title a tool-less title-generation request would come first).
    first = requests[0]["body"]
    assert PROMPT in harness.strings(first["messages"]), f"first request is not the conversation; {run.why()}"
    assert SKILL_TOOL in [t["function"]["name"] for t in first.get("tools") or ()], f"first request has no {SKILL_TOOL} tool; {run.why()}"
    return requests


def _catalogue(body: dict) -> str:
    """The <available_skills> block of the system message, whitespace folded."""
    system = harness.strings([m["content"] for m in body["messages"] if m["role"] == "system"])
    found = re.search(r"<available_skills>(.*?)</available_skills>", system)
    return found.group(1) if found else ""


_reads_each_skill = harness.one_skill_a_turn(SKILL_TOOL, "name")


@pytest.fixture(scope="module", params=list(INSTALLS))
def installed_run(request, tmp_path_factory) -> Run:
    """One client run per install, shared by the listing and the reading tests: the
    scripted model reads each skill with the skill tool, then answers."""
    root = tmp_path_factory.mktemp(request.param)
    project, home = _folders(root)
    client, flags, where = INSTALLS[request.param]
    dest = _install(project, home, client, flags, where)
    if where == "home":  # only the user folder holds them, so that is what is read
        assert not any((project / d).exists() for d in (".opencode/skills", ".agents", ".claude"))
    return _run_opencode(root, project, home, dest, _reads_each_skill)


def test_first_request_lists_both_skills(installed_run):
    run = installed_run
    first = _conversation(run)[0]["body"]
    assert harness.folded(LISTING) in harness.strings(first["messages"][0]), run.why()
    catalogue = _catalogue(first)
    for skill in harness.bundle_skills():
        description = harness.folded(skill.description).strip()
        # opencode sends the description as written (no escaping, no cut), with the
        # path it found the SKILL.md at.
        entry = f"<name>{skill.name}</name> <description>{description}</description> <location>{run.dest / skill.name / 'SKILL.md'}</location>"
        assert entry in catalogue, f"{skill.name} (with its whole description, from {run.dest}) missing from the first request's catalogue; {run.why()}"


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
        said = harness.strings(last)
        assert marker in said, f"{skill.name}: SKILL.md body not sent back after the skill call; {run.why()}"
        assert f"Base directory for this skill: {run.dest / skill.name} " in said, f"{skill.name} read from elsewhere than {run.dest}; {run.why()}"
        # The sampled file list comes from ripgrep: present, so rg was found.
        assert f"<file>{run.dest / skill.name}/" in said, f"{skill.name}: no <skill_files> listing (is rg on PATH?); {run.why()}"


def test_qwen_folder_is_not_read_by_opencode(tmp_path):
    """The negative: skills in .qwen/skills (`--client qwen-code`) stay unlisted, while the
    catalogue itself is there (opencode's built-in customize-opencode skill), so the
    absence means something."""
    project, home = _folders(tmp_path)
    dest = _install(project, home, "qwen-code", (), "project")
    assert not any((project / d).exists() for d in (".opencode", ".agents", ".claude"))
    run = _run_opencode(tmp_path, project, home, dest, harness.answer_only)
    first = _conversation(run)[0]["body"]
    catalogue = _catalogue(first)
    assert "<name>customize-opencode</name>" in catalogue, f"no catalogue; {run.why()}"
    shown = harness.strings(first)
    for skill in harness.bundle_skills():
        assert skill.name not in catalogue, f"{skill.name} listed although only {dest} holds it; {run.why()}"
        assert harness.folded(skill.description).strip()[:80] not in shown, run.why()
