"""`mbskills install --client codex` puts the skills where the real Codex CLI finds them.

Codex CLI (@openai/codex, pinned in tests/clients/package.json) runs headless (`codex exec`)
and offline, in its own network namespace, against the scripted model server speaking the
OpenAI Responses API (streamed). What these tests rely on, established against 0.171.0:

- Codex lists the skills it found in its FIRST model request, in a developer message of the
  `input` (`<skills_instructions>`): a "Skill roots" table (`r0` = its own
  $CODEX_HOME/skills/.system, then one `rN` per skills folder found) and one line per skill,
  `- NAME: DESCRIPTION (file: rN/NAME/SKILL.md)`, the description whole (no truncation).
- It has no skill tool: the model reads a skill with its shell tool, `exec_command` with
  `{"cmd": "cat PATH"}`, and the file's text comes back as the `function_call_output` of the
  next request.
- It reads project skills from .agents/skills, from the working directory up to the git root
  (`codex exec` refuses to run outside a git repository without --skip-git-repo-check, so each
  project is `git init`), and user skills from ~/.agents/skills; a skill in both is listed
  twice. A skill folder that is a symlink is found (listed at the link's path); a real folder
  whose SKILL.md is a symlink is not.
- Offline it needs CODEX_HOME with a config.toml naming a custom provider (`wire_api =
  "responses"`, base_url on the jail's 127.0.0.1), `--disable plugins`, and `--sandbox
  read-only` for the shell tool; it then sends only POST /v1/responses, ~0.5-1 s a run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))

import harness  # noqa: E402
from model_server import ModelServer  # noqa: E402

MODEL = "scripted-codex"
TIMEOUT = 60
INSTALLS = {
    "project-copy": ("--client", "codex"),
    "project-link": ("--client", "codex", "--link"),
    "user-copy": ("--client", "codex", "--user"),
}


def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A fresh git project, a HOME, and Codex's config pointing at the scripted server."""
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "local"\n'
        "check_for_update_on_startup = false\n"
        "\n[model_providers.local]\n"
        'name = "local scripted server"\n'
        f'base_url = "{harness.base_url("/v1")}"\n'
        'wire_api = "responses"\n'
        'env_key = "LOCAL_API_KEY"\n'
        "\n[analytics]\n"
        "enabled = false\n"
    )
    return project, home, codex_home


def run_codex(tmp_path: Path, project: Path, home: Path, codex_home: Path, script, prompt: str = "Which skills do you have?") -> tuple[harness.Ran, ModelServer]:
    """One headless `codex exec` in `project` (its cwd), the model played by `script`."""
    codex = harness.client_bin("codex")
    socket_path = str(tmp_path / "model.sock")
    server = ModelServer(cases={}, markers={}, unix_path=socket_path, script=script).start()
    try:
        env = harness.client_env(home, {"CODEX_HOME": str(codex_home), "LOCAL_API_KEY": "sk-local-test"})
        # --disable plugins: without it Codex runs `git ls-remote` against a remote marketplace.
        # --sandbox read-only: enough for `cat`, and works inside the jail (root, own netns).
        argv = [str(codex), "exec", "--ephemeral", "--disable", "plugins", "--json", "--sandbox", "read-only", prompt]
        ran = harness.run_jailed(argv, cwd=project, env=env, socket_path=socket_path, timeout=TIMEOUT)
    finally:
        server.stop()
    return ran, server


def answer_only(kind, body, seen):
    return "No tools needed.", []


def first_request(ran: harness.Ran, server: ModelServer) -> dict:
    requests = harness.model_requests(server, "responses")
    assert requests, f"Codex sent no Responses request: {harness.dump(server)}\n{ran.describe()}"
    return requests[0]


def catalogue(body: dict) -> str:
    """The `<skills_instructions>` developer message of a request ('' when there is none)."""
    for item in body.get("input") or ():
        if item.get("role") == "developer":
            for part in item.get("content") or ():
                text = part.get("text") or ""
                if "<skills_instructions>" in text:
                    return text
    return ""


def skill_paths(listing: str) -> dict[str, str]:
    """name -> absolute SKILL.md path, expanded from the listing's skill roots table."""
    roots = dict(re.findall(r"^- `(r\d+)` = `([^`]+)`", listing, re.M))
    paths = {}
    for name, root, rest in re.findall(r"^- ([\w.-]+): .*\(file: (r\d+)/([^)]+)\)$", listing, re.M):
        paths[name] = f"{roots[root]}/{rest}"
    return paths


@pytest.mark.parametrize("install", INSTALLS.values(), ids=INSTALLS.keys())
def test_first_request_lists_both_skills(tmp_path, install):
    project, home, codex_home = setup(tmp_path)
    harness.mbskills_install(project, home, *install)
    ran, server = run_codex(tmp_path, project, home, codex_home, answer_only)
    shown = harness.strings(first_request(ran, server)["body"])
    assert ran.rc == 0, ran.describe()
    for skill in harness.bundle_skills():
        # Codex writes `- NAME: DESCRIPTION (file: ...)`, the description in full.
        entry = harness.folded(f"- {skill.name}: {skill.description.strip()} (file: ")
        assert entry in shown, f"{skill.name} and its whole description not in Codex's first request\npaths: {harness.dump(server)}\n{ran.describe()}"


@pytest.mark.parametrize("install", INSTALLS.values(), ids=INSTALLS.keys())
def test_cat_of_listed_skill_sends_its_text_back(tmp_path, install):
    """The model reads each skill, one a turn, with Codex's shell tool at the path Codex listed."""
    project, home, codex_home = setup(tmp_path)
    harness.mbskills_install(project, home, *install)
    skills = harness.bundle_skills()
    asked: list[str] = []  # per model turn, the skill it asked to read ('' for the answer)

    def script(kind, body, seen):
        listed = skill_paths(catalogue(body))  # every request carries the listing again
        todo = [s.name for s in skills if s.name in listed and s.name not in asked]
        if todo:
            asked.append(todo[0])
            return "", [("exec_command", {"cmd": f"cat '{listed[todo[0]]}'"})]
        asked.append("")
        return "Read them.", []

    ran, server = run_codex(tmp_path, project, home, codex_home, script, "Read the Megatron-Bridge skills.")
    requests = harness.model_requests(server, "responses")
    where = f"paths: {harness.dump(server)}\n{ran.describe()}"
    assert ran.rc == 0, where
    first = harness.strings(requests[0]["body"])
    for skill in skills:
        marker = harness.folded(harness.body_marker(skill))
        assert marker not in first, f"{skill.name}'s body already in the first request: the read would prove nothing\n{where}"
        assert skill.name in asked, f"{skill.name} was not in Codex's listing, so the model could not read it\n{where}"
        turn = asked.index(skill.name)
        assert turn + 1 < len(requests), f"Codex sent no request after the model asked to cat {skill.name}\n{where}"
        assert marker in harness.strings(requests[turn + 1]["body"]), f"{skill.name}'s SKILL.md text not sent back after `cat`\n{where}"


def file_links(project: Path, home: Path) -> None:
    """Each skill as a real folder of per-file symlinks (what `--link` used to make)."""
    for skill in sorted((harness.REPO / "skills").glob("*/SKILL.md")):
        for source in skill.parent.rglob("*"):
            if source.is_file():
                dest = project / ".agents/skills" / source.relative_to(skill.parent.parent)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(source)


UNSEEN = {
    "nothing-installed": lambda project, home: None,
    "claude-code-folder": lambda project, home: harness.mbskills_install(project, home, "--client", "claude-code"),
    "gemini-cli-user-folder": lambda project, home: harness.mbskills_install(project, home, "--client", "gemini-cli", "--user"),
    "per-file-symlinks": file_links,
}


@pytest.mark.parametrize("place", UNSEEN.values(), ids=UNSEEN.keys())
def test_skills_codex_does_not_read_are_not_listed(tmp_path, place):
    """The negative: the same check fails where Codex has nothing to find."""
    project, home, codex_home = setup(tmp_path)
    place(project, home)
    ran, server = run_codex(tmp_path, project, home, codex_home, answer_only)
    body = first_request(ran, server)["body"]
    where = f"paths: {harness.dump(server)}\n{ran.describe()}"
    assert ran.rc == 0, where
    assert "- skill-creator: " in catalogue(body), f"Codex's own skills not listed: the listing this test reads is gone\n{where}"
    shown = harness.strings(body)
    for skill in harness.bundle_skills():
        assert skill.name not in shown, f"{skill.name} listed although Codex should not find it\n{where}"


def test_skill_in_project_and_user_folder_is_listed_twice(tmp_path):
    """The fact behind the installer's duplicate warning: Codex does not merge a skill found in
    .agents/skills and ~/.agents/skills; it lists it once per folder."""
    project, home, codex_home = setup(tmp_path)
    harness.mbskills_install(project, home, "--client", "codex")
    harness.mbskills_install(project, home, "--client", "codex", "--user")
    ran, server = run_codex(tmp_path, project, home, codex_home, answer_only)
    listing = catalogue(first_request(ran, server)["body"])
    where = f"paths: {harness.dump(server)}\n{ran.describe()}"
    for skill in harness.bundle_skills():
        assert listing.count(f"- {skill.name}: ") == 2, f"{skill.name} not listed exactly twice\n{listing}\n{where}"
        files = re.findall(rf"^- {re.escape(skill.name)}: .*\(file: (r\d+)/", listing, re.M)
        assert len(set(files)) == 2, f"{skill.name}'s two entries should name two roots: {files}\n{where}"


def test_found_from_a_subfolder_of_the_repo(tmp_path):
    """Codex looks for .agents/skills up to the git root, so a project install serves a session
    started anywhere in the repository."""
    project, home, codex_home = setup(tmp_path)
    harness.mbskills_install(project, home, "--client", "codex")
    (project / "src" / "pkg").mkdir(parents=True)
    ran, server = run_codex(tmp_path, project / "src" / "pkg", home, codex_home, answer_only)
    shown = harness.strings(first_request(ran, server)["body"])
    for skill in harness.bundle_skills():
        assert harness.folded(f"- {skill.name}: {skill.description.strip()} (file: ") in shown, f"{skill.name} not listed from src/pkg\npaths: {harness.dump(server)}\n{ran.describe()}"


@pytest.mark.parametrize("folder", [".codex/skills", "$CODEX_HOME/skills"])
def test_codex_own_folders_are_read_too(tmp_path, folder):
    """Besides .agents/skills, Codex reads the project's .codex/skills and $CODEX_HOME/skills:
    the installer's duplicate warning counts both."""
    project, home, codex_home = setup(tmp_path)
    dest = codex_home / "skills" if folder.startswith("$") else project / folder
    harness.mbskills_install(project, home, str(dest))
    ran, server = run_codex(tmp_path, project, home, codex_home, answer_only)
    listing = catalogue(first_request(ran, server)["body"])
    where = f"paths: {harness.dump(server)}\n{ran.describe()}"
    for skill in harness.bundle_skills():
        assert listing.count(f"- {skill.name}: ") == 1, f"{skill.name} not listed once from {dest}\n{listing}\n{where}"
