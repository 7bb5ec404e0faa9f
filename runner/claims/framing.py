"""The sentences of a skill outside its claim sections, and the reviewed list they must be in.

Outside claim sections a skill may only frame: headings, links, when to read what. Each such
sentence is listed, word for word, in the skill's `checks/framing.yaml` after someone read it
and found it states nothing about the library; `mbskills validate` reports any sentence that
is not there, so a changed word outside a claim section is either reviewed again or caught.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core import LoadError
from ..load import load_yaml
from .sections import MARKER_RE, body_lines

FRAMING_FILE = Path("checks") / "framing.yaml"

# After . ! or ? and a space, when the next word starts a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`(\"\[])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s+")


@dataclass(frozen=True)
class Framing:
    path: Path
    sentences: dict[str, int]  # sentence -> its line in the list


def _squash(text: str) -> str:
    return " ".join(text.split())


def framing_sentences(text: str) -> list[tuple[int, str]]:
    """(line, sentence) for every sentence of `text` outside claim sections and code: a
    heading is one sentence, a list item starts a new one, a blank line ends a paragraph."""
    out: list[tuple[int, str]] = []
    paragraph: list[str] = []
    first = 0

    def flush() -> None:
        if paragraph:
            for sentence in _SENTENCE_END.split(_squash(" ".join(paragraph))):
                if sentence.strip(" -*"):
                    out.append((first, sentence))
            paragraph.clear()

    for line in body_lines(text):
        if line.claim_id is not None or line.in_code or MARKER_RE.search(line.text) or not line.text.strip():
            flush()
            continue
        if line.is_heading:
            flush()
            out.append((line.number, _squash(line.text)))
            continue
        if _LIST_ITEM.match(line.text):
            flush()
        if not paragraph:
            first = line.number
        paragraph.append(line.text)
    flush()
    return out


def load_framing(root: Path) -> Framing:
    """The skill's reviewed framing sentences; a missing or malformed list is a LoadError."""
    path = root / FRAMING_FILE
    if not path.is_file():
        raise LoadError(path, 1, "skill/framing-list", "no reviewed list of framing sentences (checks/framing.yaml)")
    located = load_yaml(path)
    data = located.data
    if not isinstance(data, dict) or not isinstance(data.get("sentences"), list) or not all(isinstance(s, str) for s in data["sentences"]):
        raise LoadError(path, located.line(), "skill/framing-list", "expected a mapping with 'reviewed' and a 'sentences' list of strings")
    if not isinstance(data.get("reviewed"), str) or not data["reviewed"].strip():
        raise LoadError(path, located.line(), "skill/framing-list", "say who reviewed the list and when ('reviewed')")
    sentences: dict[str, int] = {}
    for index, sentence in enumerate(data["sentences"]):
        sentences.setdefault(_squash(sentence), located.line(("sentences", index)))
    return Framing(path, sentences)
