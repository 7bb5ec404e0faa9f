"""Where each agent client looks for skills.

`project` and `user` are the folders `mbskills install --client NAME [--user]` writes to;
`reads` lists every folder the client discovers skills in (project folders relative to the
working directory, `~/...` relative to HOME), which is what the duplicate warning checks.
The client tests (tests/test_client_*.py) drive each real client against these folders;
docs/clients.md gives what each was shown to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core import UsageError


@dataclass(frozen=True)
class Client:
    name: str
    label: str
    project: str
    user: str
    reads: tuple[str, ...]


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("agents", "the shared .agents/skills folder", ".agents/skills", "~/.agents/skills", (".agents/skills", "~/.agents/skills")),
        Client("codex", "Codex CLI", ".agents/skills", "~/.agents/skills", (".agents/skills", ".codex/skills", "~/.agents/skills", "$CODEX_HOME/skills")),
        Client("claude-code", "Claude Code", ".claude/skills", "~/.claude/skills", (".claude/skills", "~/.claude/skills")),
        Client("gemini-cli", "Gemini CLI", ".gemini/skills", "~/.gemini/skills", (".gemini/skills", ".agents/skills", "~/.gemini/skills", "~/.agents/skills")),
        Client("qwen-code", "Qwen Code", ".qwen/skills", "~/.qwen/skills", (".qwen/skills", ".agents/skills", "~/.qwen/skills", "~/.agents/skills")),
        Client(
            "opencode",
            "opencode",
            ".opencode/skills",
            "~/.config/opencode/skills",
            (".opencode/skills", ".claude/skills", ".agents/skills", "~/.config/opencode/skills", "~/.claude/skills", "~/.agents/skills"),
        ),
    )
}


def client(name: str) -> Client:
    try:
        return CLIENTS[name]
    except KeyError:
        raise UsageError(f"unknown client {name!r}; choose one of: {', '.join(CLIENTS)}") from None


def resolve(folder: str, project: Path, home: Path) -> Path:
    """A folder of the table as a path: `~` is HOME, `$CODEX_HOME` its variable (default
    ~/.codex), anything else is under the project."""
    if folder.startswith("$CODEX_HOME/"):
        base = Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex"
        return base / folder.split("/", 1)[1]
    if folder.startswith("~/"):
        return home / folder[2:]
    return project / folder


def destination(name: str, *, user: bool, project: Path, home: Path) -> Path:
    c = client(name)
    return resolve(c.user if user else c.project, project, home)


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def project_of(dest: Path, home: Path) -> Path | None:
    """The project folder a destination belongs to (DEST minus a table folder such as
    .claude/skills), or None for a user-level folder or one the table does not know."""
    folders = {f for c in CLIENTS.values() for f in c.reads}
    if any(_same(dest, resolve(f, Path("/"), home)) for f in folders if f.startswith(("~/", "$"))):
        return None
    for folder in sorted(folders):
        parts = Path(folder).parts
        if not folder.startswith(("~/", "$")) and len(dest.parts) > len(parts) and dest.parts[-len(parts):] == parts:
            return Path(*dest.parts[: -len(parts)])
    return None


def duplicates(dest: Path, skills: list[str], *, cwd: Path, home: Path) -> list[str]:
    """One line per other folder where a client that reads DEST also finds some of these
    skills: that client discovers two copies of each."""
    project = project_of(dest.absolute(), home) or cwd
    found: dict[str, tuple[set[str], list[str]]] = {}
    for c in CLIENTS.values():
        if c.name == "agents":
            continue
        folders = [resolve(f, project, home) for f in c.reads]
        if not any(_same(dest, f) for f in folders):
            continue
        seen = {os.path.realpath(dest)}
        for other in folders:
            if os.path.realpath(other) in seen:
                continue
            seen.add(os.path.realpath(other))
            here = [s for s in skills if (other / s / "SKILL.md").is_file()]
            if here:
                names, labels = found.setdefault(str(other), (set(), []))
                names.update(here)
                labels.append(c.label)
    return [
        f"{', '.join(sorted(names))} {'is' if len(names) == 1 else 'are'} also installed in {other}, which {', '.join(labels)} also read{'s' if len(labels) == 1 else ''}: {'it finds' if len(labels) == 1 else 'each finds'} two copies"
        for other, (names, labels) in sorted(found.items())
    ]
