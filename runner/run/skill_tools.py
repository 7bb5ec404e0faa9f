"""The two tools an agent client gives a model for progressive disclosure of skills:
`activate_skill(name)` returns the SKILL.md body, `read_skill_file(name, path)` a file in
that skill's folder. Files only ever come from inside the named skill's folder, and never
from its evals/ (the ground truth must not reach the model)."""

from __future__ import annotations

import html
import os

from ..core import MbskillsError
from ..load import PRIVATE_DIRS, SKILL_FILE, Skill
from ..providers import Tool, ToolCall

MAX_FILE_BYTES = 256 * 1024
MAX_PATH_CHARS = 512
HIDDEN_TOP = PRIVATE_DIRS  # eval cases and their ground truth; claim checks (not installed either)
HIDDEN_FILES = {".mbskills-manifest.json"}  # install bookkeeping

ACTIVATE = Tool(
    "activate_skill",
    "Load the full instructions of one skill listed in <available_skills>. Call it before answering whenever a skill's description matches the task.",
    {"type": "object", "properties": {"name": {"type": "string", "description": "the skill's name, exactly as listed"}}, "required": ["name"], "additionalProperties": False},
)
READ = Tool(
    "read_skill_file",
    "Read one file from a skill's folder (for example a script or reference the skill's instructions point to).",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the skill's name"},
            "path": {"type": "string", "description": "path relative to the skill's folder, e.g. scripts/check.py"},
        },
        "required": ["name", "path"],
        "additionalProperties": False,
    },
)


class ToolFailure(MbskillsError):
    """Returned to the model as a tool error; the run goes on."""


def catalogue(skills: list[Skill]) -> str:
    """The <available_skills> block of the Agent Skills client guide, without <location>:
    these tools address skills by name, and a local path would make the prompt (and so the
    cache key) differ from machine to machine."""
    lines = ["<available_skills>"]
    for skill in skills:
        lines += ["<skill>", f"<name>{html.escape(skill.name)}</name>", f"<description>{html.escape(skill.description)}</description>", "</skill>"]
    lines.append("</available_skills>")
    return "\n".join(lines)


def visible_files(skill: Skill) -> list[str]:
    # os.walk with pruning: evals/ and hidden folders are never entered (pathlib's rglob
    # walked them all and was the largest cost of a cached rerun).
    out = []
    root = str(skill.root)
    for folder, dirs, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        top = relative == "."
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__" and not (top and d in HIDDEN_TOP)]
        for name in files:
            if name.startswith(".") or name in HIDDEN_FILES or (top and name == SKILL_FILE):
                continue
            if top and name in HIDDEN_TOP:
                continue
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                out.append(name if top else f"{relative.replace(os.sep, '/')}/{name}")
    return sorted(out, key=lambda relative: relative.split("/"))  # pathlib's order: by parts


class SkillTools:
    def __init__(self, skills: list[Skill], offered: list[str] | None = None):
        self.skills = {skill.name: skill for skill in skills}
        # Under baseline and inline no tool is offered; a call anyway must not leak a skill.
        self.offered = {ACTIVATE.name, READ.name} if offered is None else set(offered)
        self.activated: list[str] = []
        self.files_read: list[str] = []

    def _skill(self, arguments: dict) -> Skill:
        name = arguments.get("name")
        if not isinstance(name, str) or name not in self.skills:
            raise ToolFailure(f"no skill named {name!r}; available: {', '.join(sorted(self.skills))}")
        return self.skills[name]

    def activate(self, arguments: dict) -> str:
        skill = self._skill(arguments)
        if skill.name not in self.activated:
            self.activated.append(skill.name)
        files = visible_files(skill)
        listing = "\n".join(f"- {f}" for f in files) if files else "(none)"
        return f"{skill.body.strip()}\n\n---\nFiles in this skill (read them with read_skill_file):\n{listing}\n"

    def read(self, arguments: dict) -> str:
        skill = self._skill(arguments)
        raw = arguments.get("path")
        if not isinstance(raw, str) or not raw.strip():
            raise ToolFailure("path must be a non-empty string")
        if len(raw) > MAX_PATH_CHARS or "\x00" in raw:
            raise ToolFailure("path is not a usable file name")
        if os.path.isabs(raw) or raw.startswith("~"):
            raise ToolFailure("path must be relative to the skill's folder")
        root = skill.root.resolve()
        try:
            target = (root / raw).resolve(strict=True)
        except (OSError, RuntimeError):  # missing, or a symlink loop
            raise ToolFailure(f"{raw}: no such file in skill {skill.name}") from None
        if not target.is_relative_to(root):
            raise ToolFailure(f"{raw}: outside the skill's folder")
        relative = target.relative_to(root)
        if not relative.parts or relative.parts[0] in HIDDEN_TOP or relative.name in HIDDEN_FILES:
            raise ToolFailure(f"{raw}: not readable")
        if not target.is_file():
            raise ToolFailure(f"{raw}: not a regular file")
        size = target.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ToolFailure(f"{raw}: {size} bytes; files over {MAX_FILE_BYTES} bytes are not served")
        try:
            text = target.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(f"{raw}: not a UTF-8 text file") from None
        entry = f"{skill.name}/{relative.as_posix()}"
        if entry not in self.files_read:
            self.files_read.append(entry)
        if relative.as_posix() == SKILL_FILE and skill.name not in self.activated:
            self.activated.append(skill.name)  # the whole skill reached the model: an activation
        return text

    def run(self, call: ToolCall) -> tuple[str, bool]:
        """(content, is_error) for one tool call."""
        arguments = call.arguments
        try:
            if call.name not in self.offered:
                raise ToolFailure(f"unknown tool {call.name!r}")
            if arguments is None:
                raise ToolFailure("arguments are not a JSON object")
            if call.name == ACTIVATE.name:
                return self.activate(arguments), False
            if call.name == READ.name:
                return self.read(arguments), False
            raise ToolFailure(f"unknown tool {call.name!r}")
        except ToolFailure as failure:
            return f"error: {failure}", True
