"""Claim sections of a SKILL.md: the text and code blocks that follow a claim marker.

A section starts at `<!-- claim: ID -->` and runs to the next claim marker or heading.
Checks read their inputs from here (the override block they execute, the values and
messages they compare), so editing the skill's text is what a check sees.

Also the one definition of a *fact token* (a backticked name or value, a quoted message,
a number, True/False/None, an exception type): `mbskills validate` reports any outside a
claim section, and a check must capture every one inside its own. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MARKER_RE = re.compile(r"<!--\s*claim:\s*([a-z0-9-]+)\s*-->")
FENCE_RE = re.compile(r"^\s*(```|~~~)")

# Group 1 (when it matched) is the token's content: a backtick or quote span counts by
# what is inside it, so a check that captures `{name:code}` between backticks covers it.
FACT_TOKEN_RE = re.compile(
    r"`([^`\n]+)`"
    r'|"([^"\n]+)"'
    r"|(?<![\w.])([A-Z][A-Za-z]*(?:Error|Exception))\b"
    r"|(?<![\w.])(True|False|None)\b"
    r"|(?<![\w.])(\d+(?:\.\d+)*)(?![\w])"
)
MARKDOWN_PUNCTUATION = set(" \t-*.,;:()!?'")


@dataclass(frozen=True)
class FactToken:
    start: int  # span of the content in the text it was found in
    end: int
    text: str


def fact_tokens(text: str) -> list[FactToken]:
    found = []
    for match in FACT_TOKEN_RE.finditer(text):
        group = next(g for g in range(1, 6) if match.group(g) is not None)
        found.append(FactToken(match.start(group), match.end(group), match.group(group)))
    return found


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
    def prose(self) -> str:
        """The section outside its code blocks, whitespace collapsed: what `Context.read` reads."""
        kept, inside = [], False
        for line in self.lines:
            if FENCE_RE.match(line):
                inside = not inside
                kept.append("")  # a code block separates the sentences around it
            elif not inside:
                kept.append(line)
        return " ".join(" ".join(kept).split())

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


def read_sections(skill_md: Path, text: str | None = None) -> dict[str, ClaimSection]:
    """The claim sections of `skill_md`, or of `text` read as that file (a mutated copy)."""
    sections: dict[str, ClaimSection] = {}
    current: ClaimSection | None = None
    inside_fence = False
    source = skill_md.read_text("utf-8") if text is None else text
    for number, line in enumerate(source.split("\n"), start=1):
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


_DESCRIPTION_CLAIM_RE = re.compile(r"^\s+description-claim:\s*['\"]?([a-z0-9-]+)['\"]?\s*$")
_BLOCK_INDICATORS = {">", ">-", ">+", "|", "|-", "|+"}


def description_lines(text: str) -> tuple[str, int, int] | None:
    """(claim id, first, end) line indexes (0-based, end exclusive) of the front-matter
    description's value, when the front matter names its claim under `metadata`
    (`description-claim: ID`); None otherwise. The description is then a claim section like
    any other: its check reads it, mutate changes it."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return None
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return None
    claim = next((m.group(1) for line in lines[1:end] if (m := _DESCRIPTION_CLAIM_RE.match(line))), None)
    key = next((i for i in range(1, end) if lines[i].startswith("description:")), None)
    if claim is None or key is None:
        return None
    first = key if lines[key][len("description:") :].strip() not in _BLOCK_INDICATORS else key + 1
    last = key + 1
    while last < end and (lines[last].startswith((" ", "\t")) or not lines[last].strip()):
        last += 1
    return claim, first, last


def description_section(skill_md: Path, text: str) -> ClaimSection | None:
    found = description_lines(text)
    if found is None:
        return None
    claim, first, last = found
    lines = text.split("\n")[first:last]
    if lines and lines[0].startswith("description:"):
        lines[0] = lines[0][len("description:") :]
    return ClaimSection(claim, skill_md, first + 1, [line.strip() for line in lines])


def skill_documents(root: Path) -> list[Path]:
    """The files of a skill that state facts: SKILL.md, then references/*.md (read on demand)."""
    references = root / "references"
    return [root / "SKILL.md"] + (sorted(references.rglob("*.md")) if references.is_dir() else [])


class DuplicateClaim(ValueError):
    pass


def read_skill_sections(root: Path, texts: dict[Path, str] | None = None) -> dict[str, ClaimSection]:
    """The claim sections of every document of a skill; `texts` replaces a file's text (a
    mutated copy). A claim id marked in two places is an error, not a silent overwrite."""
    sections: dict[str, ClaimSection] = {}
    for path in skill_documents(root):
        if not path.is_file():
            continue
        text = (texts or {}).get(path)
        found = read_sections(path, text)
        if path.name == "SKILL.md":
            described = description_section(path, path.read_text("utf-8") if text is None else text)
            if described is not None:
                if described.claim_id in found:
                    raise DuplicateClaim(f"{path}:{described.line}: claim {described.claim_id} names the description and is also marked at line {found[described.claim_id].line}")
                found = {described.claim_id: described, **found}
        for claim_id, section in found.items():
            if claim_id in sections:
                raise DuplicateClaim(f"{path}:{section.line}: claim {claim_id} is also marked in {sections[claim_id].path.name}")
            sections[claim_id] = section
    return sections


@dataclass(frozen=True)
class BodyLine:
    number: int  # 1-based, in the whole file
    text: str
    claim_id: str | None  # the claim section it belongs to, None outside any
    in_code: bool
    is_heading: bool


def body_lines(text: str) -> list[BodyLine]:
    """Every line after the front matter, with the claim section and code block it sits in."""
    lines = text.split("\n")
    start = 0
    if lines and lines[0].strip() == "---":
        for index in range(1, len(lines)):
            if lines[index].strip() == "---":
                start = index + 1
                break
    out, current, inside = [], None, False
    for index in range(start, len(lines)):
        line = lines[index]
        fence = bool(FENCE_RE.match(line))
        if fence:
            inside = not inside
        marker = None if (inside or fence) else MARKER_RE.search(line)
        heading = not inside and not fence and line.startswith("#")
        if marker:
            current = marker.group(1)
            continue
        if heading:
            current = None
        out.append(BodyLine(index + 1, line, current, inside or fence, heading))
    return out
