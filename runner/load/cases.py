"""Eval cases: one loader for both evals formats, normalised into `Case`.

- flat (Megatron-Bridge catalogue): a JSON array of {id, question, expected_skill,
  expected_script, ground_truth, expected_behavior[, should_trigger]}.
- agentskills.io: {skill_name, evals: [{id, prompt, expected_output, files,
  assertions | expectations}]}, behaviours as strings or {name, text}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Finding, LoadError, check_schema
from .parsing import Located, load_json
from .skills import owning_skill_root

FLAT = "flat"
AGENTSKILLS = "agentskills"
MAX_CASE_FILE_BYTES = 256 * 1024  # a case's attached file goes into the prompt whole


@dataclass(frozen=True)
class Behaviour:
    text: str
    name: str | None = None


@dataclass(frozen=True)
class Case:
    id: str | int
    prompt: str
    expected_skill: str | None
    expected_script: str | None
    ground_truth: str
    behaviours: tuple[Behaviour, ...]
    source: Path
    owner: str  # the skill whose evals/ holds the file, or the bundle file's stem
    index: int  # position in the file, for line lookups
    format: str
    files: tuple[str, ...] = ()
    should_trigger: bool | None = None

    @property
    def key(self) -> str:
        """A run-wide identity: the file's owner plus the case id."""
        return f"{self.owner}/{self.id}"


@dataclass
class EvalsFile:
    path: Path
    located: Located
    format: str | None
    findings: list[Finding] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)

    def case_line(self, index: int, *keys: Any) -> int:
        prefix = (index,) if self.format == FLAT else ("evals", index)
        return self.located.line(prefix + keys)


def detect_format(data: Any) -> str | None:
    if isinstance(data, list):
        return FLAT
    if isinstance(data, dict) and ("evals" in data or "skill_name" in data):
        return AGENTSKILLS
    return None


def _behaviours(items: list) -> tuple[Behaviour, ...]:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(Behaviour(item.strip()))
        else:
            out.append(Behaviour(item["text"].strip(), item.get("name")))
    return tuple(out)


def _owner(path: Path) -> str:
    root = owning_skill_root(path)
    return root.name if root is not None else path.stem


def _to_cases(path: Path, fmt: str, data: Any) -> list[Case]:
    cases, owner = [], _owner(path)
    if fmt == FLAT:
        for index, raw in enumerate(data):
            cases.append(
                Case(
                    id=raw["id"],
                    prompt=raw["question"],
                    expected_skill=raw["expected_skill"],
                    expected_script=raw.get("expected_script"),
                    ground_truth=raw["ground_truth"],
                    behaviours=_behaviours(raw["expected_behavior"]),
                    source=path,
                    owner=owner,
                    index=index,
                    format=fmt,
                    files=tuple(raw.get("files", ())),
                    should_trigger=raw.get("should_trigger"),
                )
            )
    else:
        skill_name = data["skill_name"]
        for index, raw in enumerate(data["evals"]):
            trigger = raw.get("should_trigger")
            cases.append(
                Case(
                    id=raw["id"],
                    prompt=raw["prompt"],
                    # agentskills files are per skill: the skill is expected unless told otherwise
                    expected_skill=None if trigger is False else skill_name,
                    expected_script=None,
                    ground_truth=raw.get("expected_output", ""),
                    behaviours=_behaviours(raw.get("assertions", raw.get("expectations", []))),
                    source=path,
                    owner=owner,
                    index=index,
                    format=fmt,
                    files=tuple(raw.get("files", ())),
                    should_trigger=trigger,
                )
            )
    return cases


def read_evals(path: Path) -> EvalsFile:
    """Parse and schema-check an evals file; problems are findings, not exceptions.

    Raises LoadError only when the file is not JSON at all.
    """
    located = load_json(path)
    fmt = detect_format(located.data)
    result = EvalsFile(path, located, fmt)
    for key, line in located.duplicates:
        result.findings.append(Finding(str(path), line, "json/duplicate-key", f"key {key!r} appears twice in one object; the last one silently wins"))
    if fmt is None:
        result.findings.append(
            Finding(str(path), located.line(), "evals/format", f"top level is {type(located.data).__name__}: expected a flat JSON array of cases or an agentskills.io object with 'skill_name' and 'evals'")
        )
        return result
    for error in check_schema("evals-flat" if fmt == FLAT else "evals-agentskills", located.data):
        result.findings.append(Finding(str(path), located.line(error.path), "evals/schema", f"{error.where}: {error.message}"))
    if not result.findings:
        result.cases = _to_cases(path, fmt, located.data)
    return result


def load_cases(path: Path) -> list[Case]:
    """Cases of one evals file, or LoadError naming the first problem."""
    evals = read_evals(path)
    if evals.findings:
        raise LoadError.from_finding(evals.findings[0])
    return evals.cases


def files_root(evals_path: Path) -> Path:
    """The folder a case's `files` are relative to: the one holding its evals/ folder (a
    skill's folder, or the bundle for evals/<stem>.json), as in `evals/files/x.py`."""
    return evals_path.parent.parent


def check_case_file(root: Path, name: str) -> str | None:
    """Why `name` cannot be attached to a case's prompt, or None when it can."""
    target = (root / name).resolve()
    if not target.is_relative_to(root.resolve()):
        return f"file {name!r} is outside {root}"
    if not target.is_file():
        return f"file {name!r} does not exist in {root}"
    size = target.stat().st_size
    if size > MAX_CASE_FILE_BYTES:
        return f"file {name!r} has {size} bytes; case files over {MAX_CASE_FILE_BYTES} bytes are refused"
    raw = target.read_bytes()
    if b"\x00" in raw:
        return f"file {name!r} is binary; only UTF-8 text can reach the model"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"file {name!r} is not UTF-8 text"
    return None


def case_files(case: Case) -> list[tuple[str, str]]:
    """(name, text) of each of the case's files; LoadError for one that cannot be attached."""
    root, out = files_root(case.source), []
    for name in case.files:
        problem = check_case_file(root, name)
        if problem:
            raise LoadError(case.source, 1, "evals/missing-file", f"case {case.id!r}: {problem}")
        out.append((name, (root / name).read_text("utf-8").removeprefix("\ufeff")))
    return out
