"""`replay:DIR`: recorded answers instead of a live model, for offline runs and tests.

DIR holds one Markdown answer per case, `DIR/<owner>/<case id>.md`, where owner is the
skill whose evals/ holds the case (or the bundle evals file's stem, e.g. `routing`). A
`<case id>.<condition>.md` beside it overrides the answer for one condition, and
`replay:DIR?baseline=bad-1` takes `<case id>.bad-1.md` for every case under `baseline`
(one answer set per condition: a run whose conditions differ in what the answers say). Optional YAML
frontmatter says what the recorded agent did under the `skills` condition before
answering:

    ---
    activate: my-skill
    read: [scripts/preflight.py]
    ---
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core import LoadError, UsageError
from ..load import read_text, split_frontmatter
from .base import ProviderError, Reply, Situation, Tool, ToolCall, Usage

ACTIVATE, READ = "activate_skill", "read_skill_file"


@dataclass(frozen=True)
class Recorded:
    text: str
    activate: str | None
    read: tuple[str, ...]


def _parse(path: Path) -> Recorded:
    text = read_text(path)
    if not text.startswith("---"):
        return Recorded(text.strip(), None, ())
    document = split_frontmatter(path, text)
    data = document.frontmatter.data
    activate, read = data.get("activate"), data.get("read", [])
    if activate is not None and not isinstance(activate, str):
        raise LoadError(path, document.frontmatter.line(("activate",)), "replay/frontmatter", "'activate' must be a skill name")
    if isinstance(read, str):
        read = [read]
    if not isinstance(read, list) or not all(isinstance(p, str) for p in read):
        raise LoadError(path, document.frontmatter.line(("read",)), "replay/frontmatter", "'read' must be a list of paths inside the skill")
    return Recorded(document.body.strip(), activate, tuple(read))


def split_variants(spec: str) -> tuple[str, dict[str, str]]:
    """`DIR?condition=variant&...` -> (DIR, {condition: variant})."""
    directory, _, query = spec.partition("?")
    variants: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        condition, eq, variant = part.partition("=")
        if not eq or not condition or not variant or "/" in variant or variant.startswith("."):
            raise UsageError(f"replay:{spec}: expected DIR?CONDITION=VARIANT (for example ?baseline=bad-1), got {part!r}")
        variants[condition] = variant
    return directory, variants


class Replay:
    name = "replay"
    api = "replay"
    cacheable = False  # already local and free
    ignored: list[str] = []

    def __init__(self, directory: Path, variants: dict[str, str] | None = None):
        if not directory.is_dir():
            raise UsageError(f"replay:{directory}: not a folder of recorded answers")
        self.directory = directory
        self.variants = dict(variants or {})
        self.model = str(directory) + ("?" + "&".join(f"{c}={v}" for c, v in sorted(self.variants.items())) if self.variants else "")
        self._answers: dict[tuple[str, str], Recorded] = {}

    def identity(self) -> dict:
        return {"provider": "replay", "api": "replay", "base_url": None, "model": self.model, "settings": {}}

    def _path(self, case_key: str, condition: str) -> Path | None:
        owner, _, case_id = case_key.partition("/")
        repeated = condition.partition("@")[0]  # an A/A arm (`baseline@2`) answers as its condition unless given its own
        variant = self.variants.get(condition) or self.variants.get(repeated)
        names = [f"{case_id}.{variant}.md"] if variant else [f"{case_id}.{condition}.md", f"{case_id}.{repeated}.md", f"{case_id}.md"]
        for name in names:
            path = self.directory / owner / name
            if path.is_file():
                return path
        return None

    def prepare(self, case_keys: list[str], conditions: list[str]) -> None:
        """Read every answer up front: a missing or broken one stops the run before it starts."""
        unknown = sorted(set(self.variants) - set(conditions))
        if unknown:
            raise UsageError(f"replay:{self.model}: no condition {', '.join(unknown)} in this run ({', '.join(conditions)})")
        missing = []
        for key in case_keys:
            for condition in conditions:
                path = self._path(key, condition)
                if path is None:
                    missing.append((key, condition))
                    break
                try:
                    self._answers[(key, condition)] = _parse(path)
                except LoadError as error:
                    raise UsageError(error.one_line()) from None
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            key, condition = missing[0]
            owner, _, case_id = key.partition("/")
            name = f"{case_id}.{self.variants[condition]}.md" if condition in self.variants else f"{case_id}.md"
            raise UsageError(f"replay:{self.directory}: no recorded answer {owner}/{name} for case {key} ({condition}){more}")

    async def complete(self, system: str, messages: list[dict], tools: list[Tool], situation: Situation, schema: dict | None = None) -> Reply:
        recorded = self._answers.get((situation.case_key, situation.condition))
        if recorded is None:
            raise ProviderError("replay", f"no recorded answer for {situation.case_key} ({situation.condition})")
        if any(t.name == ACTIVATE for t in tools):
            done = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
            planned = ([(ACTIVATE, {"name": recorded.activate})] if recorded.activate else []) + [
                (READ, {"name": recorded.activate, "path": p}) for p in recorded.read
            ]
            if len(done) < len(planned):
                tool, arguments = planned[len(done)]
                return Reply("", [ToolCall(f"replay-{len(done) + 1}", tool, json.dumps(arguments))], Usage.unknown(), stop_reason="tool_use")
        return Reply(recorded.text, usage=Usage.unknown(), stop_reason="end")  # a recording has no token counts

    async def aclose(self) -> None:
        return None
