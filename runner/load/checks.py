"""The deterministic-checks sidecars: regexes per behaviour, in a file beside each evals
file (so that evals.json keeps its standard format). Reading them is loading; running
them over an answer is grading (runner/grade/checks.py).

    skills/<name>/evals/evals.json  ->  skills/<name>/evals/checks.yaml
    evals/<stem>.json               ->  evals/<stem>.checks.yaml

    <case id>:
      - behaviour: "<exact text of one expected behaviour>"
        must: ['regex', ...]        # all must match (re.search, MULTILINE)
        must_not: ['regex', ...]    # none may match

A window `[^.\n]` ("within one sentence") does not stop at the dot inside an identifier
such as `checkpoint.save`: it is compiled as "not a sentence end".

Refused: a pattern that matches the empty string (it finds something in every answer, the
empty one too), and a `must_not` pattern anchored to a line's or the text's start or end
(`^`, `$`, `\\A`, `\\Z`): the same statement in a sentence or a list item escapes it.
"""

from __future__ import annotations

import re
import re._constants as _sre
import re._parser as _sre_parser
from dataclasses import dataclass
from pathlib import Path

from ..core import Finding, LoadError
from .cases import Case
from .parsing import load_yaml, read_text
from .skills import EVALS_FILE


SENTENCE_WINDOW = r"[^.\n]"
WITHIN_SENTENCE = r"(?:[^.\n]|(?<=\w)\.(?=\w))"


@dataclass(frozen=True)
class Check:
    behaviour: str
    must: tuple[re.Pattern, ...]
    must_not: tuple[re.Pattern, ...]


_ANCHORS = {_sre.AT_BEGINNING, _sre.AT_BEGINNING_STRING, _sre.AT_END, _sre.AT_END_STRING}


def _anchored(pattern: str) -> bool:
    """Whether a pattern holds a line or text anchor anywhere (lookarounds included), but
    for `\\A` right before a lookaround: a condition on the whole answer, which nothing escapes."""

    def walk(items) -> bool:
        items = list(items)
        for index, (op, arg) in enumerate(items):
            whole_answer = arg == _sre.AT_BEGINNING_STRING and index + 1 < len(items) and items[index + 1][0] in (_sre.ASSERT, _sre.ASSERT_NOT)
            if op == _sre.AT and arg in _ANCHORS and not whole_answer:
                return True
            for value in arg if isinstance(arg, (tuple, list)) else (arg,):
                if isinstance(value, _sre_parser.SubPattern) and walk(value):
                    return True
                if isinstance(value, list) and any(isinstance(v, _sre_parser.SubPattern) and walk(v) for v in value):
                    return True
        return False

    return walk(_sre_parser.parse(pattern))


def pattern_problem(field: str, compiled: re.Pattern) -> tuple[str, str] | None:
    """(rule, message) when a compiled check pattern cannot be trusted, else None."""
    if compiled.search("") is not None:
        return "checks/empty-match", "matches the empty string, so it is found in every answer (the empty one too)"
    if field == "must_not" and _anchored(compiled.pattern):
        return "checks/anchored-forbidden", "a forbidden pattern anchored to a line's start or end (^, $, \\A, \\Z): the same statement in a sentence or a list item escapes it"
    return None


def sidecar_for(evals_path: Path) -> Path:
    if evals_path.name == EVALS_FILE.name:
        return evals_path.with_name("checks.yaml")
    return evals_path.with_name(f"{evals_path.stem}.checks.yaml")


def read_checks(path: Path, cases: list[Case]) -> tuple[dict[str, list[Check]], list[Finding]]:
    """Checks by case key, and findings for anything that does not fit the cases."""
    findings: list[Finding] = []
    try:
        located = load_yaml(path, read_text(path))
    except LoadError as error:
        return {}, [error.finding]
    data = located.data
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [Finding(str(path), located.line(), "checks/schema", "top level must map case ids to lists of checks")]
    by_id = {str(c.id): c for c in cases}
    out: dict[str, list[Check]] = {}
    for case_id, entries in data.items():
        case = by_id.get(str(case_id))
        if case is None:
            findings.append(Finding(str(path), located.line((case_id,)), "checks/unknown-case", f"no case {case_id!r} in the evals file beside it"))
            continue
        if not isinstance(entries, list):
            findings.append(Finding(str(path), located.line((case_id,)), "checks/schema", f"{case_id}: expected a list of checks"))
            continue
        texts = {b.text for b in case.behaviours}
        for index, entry in enumerate(entries):
            where = (case_id, index)
            if not isinstance(entry, dict) or not isinstance(entry.get("behaviour"), str) or set(entry) - {"behaviour", "must", "must_not"}:
                findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: needs 'behaviour' (text) and 'must' and/or 'must_not' (lists of regexes), nothing else"))
                continue
            if "must" not in entry and "must_not" not in entry:
                findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: no pattern to check (give 'must' or 'must_not')"))
                continue
            if entry["behaviour"].strip() not in texts:
                findings.append(Finding(str(path), located.line(where + ("behaviour",)), "checks/unknown-behaviour", f"{case_id}: no expected behaviour reads {entry['behaviour']!r}"))
                continue
            compiled: dict[str, list[re.Pattern]] = {"must": [], "must_not": []}
            for field in ("must", "must_not"):
                patterns = entry.get(field, [])
                if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                    findings.append(Finding(str(path), located.line(where + (field,)), "checks/schema", f"{case_id}[{index}].{field}: expected a list of regex strings"))
                    continue
                for n, pattern in enumerate(patterns):
                    try:
                        regex = re.compile(pattern.replace(SENTENCE_WINDOW, WITHIN_SENTENCE), re.MULTILINE)
                    except re.error as exc:
                        findings.append(Finding(str(path), located.line(where + (field, n)), "checks/regex", f"{case_id}[{index}].{field}[{n}]: {exc}"))
                        continue
                    problem = pattern_problem(field, regex)
                    if problem:
                        findings.append(Finding(str(path), located.line(where + (field, n)), problem[0], f"{case_id}[{index}].{field}[{n}]: {problem[1]}"))
                        continue
                    compiled[field].append(regex)
            if not compiled["must"] and not compiled["must_not"]:
                continue  # every pattern was bad; the findings say which
            out.setdefault(case.key, []).append(Check(entry["behaviour"].strip(), tuple(compiled["must"]), tuple(compiled["must_not"])))
    return out, findings


def load_checks(cases: list[Case]) -> dict[str, list[Check]]:
    """Every sidecar beside the cases' evals files; the first problem is a LoadError."""
    checks: dict[str, list[Check]] = {}
    for source in sorted({c.source for c in cases}):
        path = sidecar_for(source)
        if not path.is_file():
            continue
        found, findings = read_checks(path, [c for c in cases if c.source == source])
        if findings:
            raise LoadError.from_finding(findings[0])
        checks.update(found)
    return checks
