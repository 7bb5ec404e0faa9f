"""Claim sections of a SKILL.md: the text and code blocks that follow a claim marker.

A section starts at `<!-- claim: ID -->` and runs to the next claim marker or heading.
Checks read their inputs from here (the override block they execute, the messages and
numbers they compare), so editing the skill's text is what a check sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MARKER_RE = re.compile(r"<!--\s*claim:\s*([a-z0-9-]+)\s*-->")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


@dataclass
class ClaimSection:
    claim_id: str
    path: Path
    line: int  # 1-based line of the marker
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The section with whitespace collapsed, so wrapped sentences match quoted strings."""
        return " ".join(" ".join(self.lines).split())

    @property
    def code_blocks(self) -> list[str]:
        blocks, current, inside = [], [], False
        for line in self.lines:
            if FENCE_RE.match(line):
                if inside:
                    blocks.append("\n".join(current) + "\n")
                    current = []
                inside = not inside
            elif inside:
                current.append(line)
        return blocks


def read_sections(skill_md: Path) -> dict[str, ClaimSection]:
    sections: dict[str, ClaimSection] = {}
    current: ClaimSection | None = None
    inside_fence = False
    for number, line in enumerate(skill_md.read_text("utf-8").split("\n"), start=1):
        if FENCE_RE.match(line):
            inside_fence = not inside_fence
        marker = None if inside_fence else MARKER_RE.search(line)
        if marker:
            current = ClaimSection(marker.group(1), skill_md, number)
            sections[current.claim_id] = current
            continue
        if not inside_fence and line.startswith("#"):
            current = None
            continue
        if current is not None:
            current.lines.append(line)
    return sections
