"""`mbskills install --client X [--user]`: the folder each client reads, verify on the same
words, the warning for a skill a client finds twice, and the one-line errors. What each
real client does with these folders is in tests/test_client_*.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from runner.cli import main
from runner.install import manifest_path

from conftest import REPO

# The folders the issue and the clients' own tests established, written out, not read from
# the table under test.
PROJECT = {
    "agents": ".agents/skills",
    "codex": ".agents/skills",
    "claude-code": ".claude/skills",
    "gemini-cli": ".gemini/skills",
    "qwen-code": ".qwen/skills",
    "opencode": ".opencode/skills",
}
USER = {
    "agents": ".agents/skills",
    "codex": ".agents/skills",
    "claude-code": ".claude/skills",
    "gemini-cli": ".gemini/skills",
    "qwen-code": ".qwen/skills",
    "opencode": ".config/opencode/skills",
}
SKILLS = sorted(p.name for p in (REPO / "skills").iterdir() if (p / "SKILL.md").is_file())


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return project, home


def mbskills(*args: str) -> int:
    return main([args[0], "--bundle", str(REPO), *args[1:]]) if args[0] == "install" else main(list(args))


@pytest.mark.parametrize("client", sorted(PROJECT))
@pytest.mark.parametrize("user", [False, True], ids=["project", "user"])
def test_each_client_gets_its_own_folder_and_verify_finds_it(where, client: str, user: bool, capsys):
    project, home = where
    flags = ["--client", client] + (["--user"] if user else [])
    assert mbskills("install", *flags) == 0
    dest = (home / USER[client]) if user else (project / PROJECT[client])
    assert sorted(p.name for p in dest.iterdir()) == SKILLS
    assert manifest_path(dest).parent == dest.parent  # beside the folder, not in it
    out = capsys.readouterr().out
    assert str(dest) in out and str(manifest_path(dest)) in out
    assert mbskills("verify", *flags) == 0
    (dest / SKILLS[0] / "SKILL.md").write_text("edited\n")
    assert mbskills("verify", *flags) == 1
    assert f"changed: {SKILLS[0]}/SKILL.md" in capsys.readouterr().out


def test_default_is_the_shared_agents_folder(where):
    project, _ = where
    assert mbskills("install") == 0
    assert sorted(p.name for p in (project / ".agents/skills").iterdir()) == SKILLS
    assert mbskills("verify") == 0


def test_codex_home_is_read_for_the_duplicate_check(where, monkeypatch, capsys):
    project, home = where
    monkeypatch.setenv("CODEX_HOME", str(home / "codex-home"))
    assert mbskills("install", str(home / "codex-home" / "skills")) == 0
    capsys.readouterr()
    assert mbskills("install", "--client", "codex") == 0
    err = capsys.readouterr().err
    assert f"also installed in {home / 'codex-home' / 'skills'}, which Codex CLI also reads" in err, err


def test_a_skill_in_two_folders_of_one_client_is_warned_about(where, capsys):
    project, home = where
    assert mbskills("install", "--client", "claude-code") == 0
    assert capsys.readouterr().err == ""  # one copy: nothing to say
    assert mbskills("install", "--client", "opencode") == 0
    err = capsys.readouterr().err.splitlines()
    # opencode reads .claude/skills too; Claude Code does not read .opencode/skills.
    assert err == [f"mbskills: warning: {', '.join(SKILLS)} are also installed in {project / '.claude/skills'}, which opencode also reads: it finds two copies"]
    assert mbskills("install", "--client", "codex", "--user") == 0
    err = capsys.readouterr().err
    # ~/.agents/skills is read by Codex, Gemini CLI and opencode; of them only opencode reads .claude/skills.
    assert f"also installed in {project / '.claude/skills'}, which opencode also reads" in err, err
    assert mbskills("install", "--client", "agents") == 0
    err = capsys.readouterr().err
    assert f"also installed in {home / '.agents/skills'}, which Codex CLI, Gemini CLI, Qwen Code, opencode also read: each finds two copies" in err, err


def test_one_folder_reached_through_a_symlink_is_not_a_duplicate(where, capsys):
    project, _ = where
    assert mbskills("install", "--client", "agents") == 0
    (project / ".claude").mkdir()
    os.symlink(project / ".agents/skills", project / ".claude/skills")
    capsys.readouterr()
    # .claude/skills is .agents/skills: opencode, which reads both, finds one copy.
    assert mbskills("install", "--client", "claude-code") == 0
    assert capsys.readouterr().err == ""


def test_a_link_install_says_evals_show_through(where, capsys):
    project, _ = where
    assert mbskills("install", "--client", "codex", "--link") == 0
    captured = capsys.readouterr()
    assert f"linked {len(SKILLS)} skill folders" in captured.out and "evals/" in captured.err
    assert all((project / ".agents/skills" / s).is_symlink() for s in SKILLS)
    assert mbskills("verify", "--client", "codex") == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["install", "somewhere", "--client", "codex"], "give a folder (somewhere) or --client/--user, not both"),
        (["verify", "somewhere", "--user"], "give a folder (somewhere) or --client/--user, not both"),
        (["install", "--client", "cursor"], "invalid choice: 'cursor'"),
        (["verify", "--client", "qwen-code"], "no such folder; nothing was installed there"),
    ],
)
def test_bad_requests_get_one_line(where, capsys, args, message):
    assert mbskills(*args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_the_readme_gives_each_client_its_command_and_folders():
    from runner.install import CLIENTS

    readme = (REPO / "README.md").read_text()
    rows = {m[0] or "agents": (m[1], m[2]) for m in re.findall(r"^\| [^|]+ \| `mbskills install(?: --client ([\w-]+))?` \| `([^`]+)` \(`~/([^`]+)`\) \|", readme, re.M)}
    assert set(rows) == set(CLIENTS) == set(PROJECT)
    for name, (project, user) in rows.items():
        assert (project, user) == (PROJECT[name], USER[name]) == (CLIENTS[name].project, CLIENTS[name].user[2:]), name


def test_uninstall_removes_what_install_put_there_and_nothing_else(where, capsys):
    project, _ = where
    dest = project / ".claude/skills"
    (dest / "someone-elses").mkdir(parents=True)
    (dest / "someone-elses/SKILL.md").write_text("keep\n")
    assert mbskills("install", "--client", "claude-code") == 0
    assert mbskills("uninstall", "--client", "claude-code") == 0
    assert sorted(p.name for p in dest.iterdir()) == ["someone-elses"]
    assert not manifest_path(dest).exists()
    assert f"removed {len(SKILLS)} skills ({', '.join(SKILLS)})" in capsys.readouterr().out
    assert mbskills("uninstall", "--client", "claude-code") == 2  # nothing of ours left
    assert "nothing here was installed by mbskills" in capsys.readouterr().err


def test_uninstall_keeps_local_edits_unless_forced(where, capsys):
    project, _ = where
    dest = project / ".agents/skills"
    assert mbskills("install") == 0
    edited = dest / SKILLS[0] / "SKILL.md"
    edited.write_text("my notes\n")
    capsys.readouterr()
    assert mbskills("uninstall") == 2
    err = capsys.readouterr().err
    assert "refusing to remove local changes" in err and f"{SKILLS[0]}/SKILL.md changed since install" in err and err.count("\n") == 1
    assert edited.read_text() == "my notes\n" and (dest / SKILLS[1]).is_dir() and manifest_path(dest).exists()  # nothing removed
    assert mbskills("uninstall", "--force") == 0
    assert list(dest.iterdir()) == []


def test_uninstall_of_a_link_install_leaves_the_bundle(where):
    project, _ = where
    assert mbskills("install", "--client", "opencode", "--link") == 0
    assert mbskills("uninstall", "--client", "opencode") == 0
    assert list((project / ".opencode/skills").iterdir()) == []
    assert all((REPO / "skills" / s / "SKILL.md").is_file() for s in SKILLS)
