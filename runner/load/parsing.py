"""Reading JSON, YAML and SKILL.md frontmatter so that every value can be traced to a line.

`load_json` / `load_yaml` return the data and a `Located` whose `.line(path)` maps a key
path such as `(2, "expected_behavior")` to the line where that value stands, so that
schema errors can point at the file and line a person has to edit.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..core import LoadError

PathKey = tuple[Any, ...]


MAX_INPUT_BYTES = 16 * 1024 * 1024  # no skill, card, eval or answer file is near this


def read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise LoadError(path, 1, "file/unreadable", f"cannot read file: {exc.strerror or exc}") from None
    if size > MAX_INPUT_BYTES:
        raise LoadError(path, 1, "file/too-large", f"{size} bytes; input files over {MAX_INPUT_BYTES} bytes are refused")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LoadError(path, 1, "file/unreadable", f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise LoadError(path, line, "file/encoding", f"not UTF-8 (byte {exc.start}: {exc.reason})") from None
    return text.removeprefix("\ufeff")


@dataclass
class Located:
    """Parsed data plus a way back from a key path to a 1-based line."""

    data: Any
    line_of: Callable[[PathKey], int]
    duplicates: list[tuple[str, int]] = field(default_factory=list)  # (key, line)

    def line(self, path: PathKey | list = ()) -> int:
        try:
            return max(1, self.line_of(tuple(path)))
        except Exception:  # a path that does not resolve still gets a usable line
            return 1


# --- JSON -------------------------------------------------------------------------------


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, max(offset, 0)) + 1


class _PositionDecoder(json.JSONDecoder):
    """A JSONDecoder that remembers where each object and array starts."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[int, int] = {}
        self._keep: list[Any] = []  # keep containers alive so their ids stay unique
        self.duplicates: list[tuple[str, int]] = []

        def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None, _w=json.decoder.WHITESPACE.match):
            s, end = s_and_end
            pairs, new_end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, list, memo, _w)
            obj: dict = {}
            for key, value in pairs:
                if key in obj:
                    self.duplicates.append((key, end - 1))
                obj[key] = value
            self.starts[id(obj)] = end - 1
            self._keep.append(obj)
            return obj, new_end

        def parse_array(s_and_end, scan_once, _w=json.decoder.WHITESPACE.match):
            s, end = s_and_end
            values, new_end = json.decoder.JSONArray(s_and_end, scan_once, _w)
            self.starts[id(values)] = end - 1
            self._keep.append(values)
            return values, new_end

        self.parse_object = parse_object
        self.parse_array = parse_array
        self.scan_once = json.scanner.py_make_scanner(self)


def load_json(path: Path, text: str | None = None) -> Located:
    text = read_text(path) if text is None else text
    decoder = _PositionDecoder()
    try:
        data = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise LoadError(path, exc.lineno, "json/syntax", f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise LoadError(path, 1, "json/syntax", "invalid JSON: nested too deeply") from None

    def line_of(key_path: PathKey) -> int:
        node, offset = data, decoder.starts.get(id(data), 0)
        for key in key_path:
            container_start = decoder.starts.get(id(node), offset)
            if isinstance(node, dict) and key in node:
                # The key text after the container start is where a person looks.
                match = re.compile(r'"%s"\s*:' % re.escape(json.dumps(key)[1:-1])).search(text, container_start)
                offset = match.start() if match else container_start
                node = node[key]
                offset = decoder.starts.get(id(node), offset)
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                node = node[key]
                offset = decoder.starts.get(id(node), container_start)
            else:
                break
        return _line_at(text, offset)

    dups = [(key, _line_at(text, pos)) for key, pos in decoder.duplicates]
    return Located(data, line_of, dups)


# --- YAML -------------------------------------------------------------------------------


# libyaml when PyYAML has it (the wheels do): ten times faster, the same nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path, text: str | None = None, line_offset: int = 0) -> Located:
    """Load YAML safely; `line_offset` shifts lines for YAML embedded in another file."""
    text = read_text(path) if text is None else text
    loader = _LOADER(text)
    try:
        # An alias repeats a node without repeating its text: a few hundred bytes of nested
        # aliases expand to millions of values. No file here needs one; refuse them all
        # before anything is composed.
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise LoadError(path, event.start_mark.line + 1 + line_offset, "yaml/alias", f"YAML aliases (*{event.anchor}) are refused: write the value out where it is used")
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1 if mark else 1) + line_offset
        problem = exc.problem or "syntax error"
        if exc.context and exc.context_mark is not None:
            problem += f" ({exc.context} that starts at line {exc.context_mark.line + 1 + line_offset})"
        raise LoadError(path, line, "yaml/syntax", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise LoadError(path, 1 + line_offset, "yaml/syntax", f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()

    duplicates: list[tuple[str, int]] = []

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = getattr(key_node, "value", None)
                if isinstance(key, str):
                    if key in seen:
                        duplicates.append((key, key_node.start_mark.line + 1 + line_offset))
                    seen.add(key)
                walk(value_node)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    if root is not None:
        walk(root)

    def line_of(key_path: PathKey) -> int:
        node = root
        line = (node.start_mark.line if node is not None else 0) + 1
        for key in key_path:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if str(key_node.value) == str(key):
                        line, node = key_node.start_mark.line + 1, value_node
                        break
                else:
                    break
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
                node = node.value[key]
                line = node.start_mark.line + 1
            else:
                break
        return line + line_offset

    return Located(data, line_of, duplicates)


# --- SKILL.md ---------------------------------------------------------------------------


@dataclass
class SkillDocument:
    """A SKILL.md split into frontmatter (parsed, with lines) and body."""

    frontmatter: Located
    body: str
    body_start_line: int  # 1-based line of the first body line


def split_frontmatter(path: Path, text: str) -> SkillDocument:
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise LoadError(path, 1, "skill/frontmatter", "SKILL.md must start with a '---' line opening the YAML frontmatter")
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            end = index
            break
    else:
        raise LoadError(path, 1, "skill/frontmatter", "frontmatter opened with '---' is never closed by a second '---' line")
    yaml_text = "\n".join(lines[1:end])
    located = load_yaml(path, yaml_text, line_offset=1)
    if not isinstance(located.data, dict):
        raise LoadError(path, 2, "skill/frontmatter", "frontmatter must be a YAML mapping of keys to values")
    return SkillDocument(located, "\n".join(lines[end + 1 :]), end + 2)
