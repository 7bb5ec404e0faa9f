"""The deterministic-checks sidecars: regexes per behaviour, in a file beside each evals
file (so that evals.json keeps its standard format). Reading them is loading; running
them over an answer is grading (runner/grade/checks.py).

    skills/<name>/evals/evals.json  ->  skills/<name>/evals/checks.yaml
    evals/<stem>.json               ->  evals/<stem>.checks.yaml

    <case id>:
      - behaviour: "<exact text of one expected behaviour>"
        must: ['regex', ...]        # all must match (re.search, MULTILINE)
        must_not: ['regex', ...]    # none may match
      - behaviour: "..."            # a field assertion over the facts the answer proposes
        field: ddp.bucket_size      # a config path (section.field...) or env.NAME
        equals: 134217728           # or not_equals: V, never: V, one_of: [V, ...], absent: true,
                                    # includes: V (some proposed value), excludes: V (not in the
                                    # proposed list), constructs: ClassName; code_only: true
                                    # counts facts from code only
      - behaviour: "..."
        fields: {ddp.overlap_grad_reduce: true, model.params_dtype: [torch.bfloat16, bf16]}  # each equals (a list: one of)
      - behaviour: "..."            # executed against the real Bridge (runner/execute/)
        execute:
          scenario: {world_size: 8, tp: 2, pp: 1, vpp: null, sp: false,
                     set: {checkpoint.save: /ckpt, mixed_precision: bf16_mixed,
                           comm_overlap: {call: CommOverlapConfig, kwargs: {tp_comm_overlap: false}}},
                     env: {NAME: value}}
          expect: {passes: true, raises: 'regex', fields: {path: value}, warns: 'regex'}

An entry is one grader: patterns, field assertions, or an execute scenario, not a mix.

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
from typing import Any

from ..core import Finding, LoadError, bridge_names
from .cases import Case
from .parsing import load_yaml, read_text
from .skills import EVALS_FILE


SENTENCE_WINDOW = r"[^.\n]"
WITHIN_SENTENCE = r"(?:[^.\n]|(?<=\w)\.(?=\w))"


@dataclass(frozen=True)
class FieldRule:
    path: str
    op: str  # equals | not_equals | never | one_of | absent | includes | excludes | constructs
    value: Any = None
    code_only: bool = False  # only facts from code (blocks, tables, command lines), never prose


@dataclass(frozen=True)
class Scenario:
    """A starting config for the execute grader and what should come of the answer's."""

    world_size: int = 8
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    sp: bool = False
    set: tuple[tuple[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    passes: bool | None = None
    raises: str | None = None
    fields: tuple[tuple[str, Any], ...] = ()
    warns: str | None = None

    def request(self) -> dict:
        return {"world_size": self.world_size, "tp": self.tp, "pp": self.pp, "vpp": self.vpp, "sp": self.sp, "set": [list(p) for p in self.set], "env": dict(self.env)}


@dataclass(frozen=True)
class Check:
    behaviour: str
    must: tuple[re.Pattern, ...] = ()
    must_not: tuple[re.Pattern, ...] = ()
    fields: tuple[FieldRule, ...] = ()
    execute: Scenario | None = None

    @property
    def grader(self) -> str:
        """check (patterns) | field | execute"""
        return "execute" if self.execute is not None else "field" if self.fields else "check"

    def fingerprint(self, case_key: str) -> str:
        """Of the case, the behaviour and the whole specification: an edited grader is a new one."""
        import dataclasses
        import hashlib
        import json

        spec = {"case": case_key, "behaviour": self.behaviour, "grader": self.grader, "must": [p.pattern for p in self.must], "must_not": [p.pattern for p in self.must_not],
                "fields": [dataclasses.asdict(r) for r in self.fields], "execute": dataclasses.asdict(self.execute) if self.execute else None}
        return hashlib.sha256(json.dumps(spec, sort_keys=True, default=list).encode()).hexdigest()[:16]


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


_FIELD_OPS = ("equals", "not_equals", "one_of", "absent", "never", "includes", "excludes", "constructs")
_SCENARIO_KEYS = {"world_size": int, "tp": int, "pp": int, "vpp": (int, type(None)), "sp": bool, "set": dict, "env": dict}
_EXPECT_KEYS = ("passes", "raises", "fields", "warns")


def _scalar_ok(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _constructor_ok(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"call", "kwargs"} and isinstance(value["call"], str) and isinstance(value["kwargs"], dict)
            and all(isinstance(k, str) and (_scalar_ok(v) or _constructor_ok(v)) for k, v in value["kwargs"].items()))


def _field_rules(entry: dict) -> tuple[tuple[FieldRule, ...] | None, str | None]:
    """(rules, None) or (None, why) for an entry's `field`/`fields` assertions."""
    if "fields" in entry:
        table = entry["fields"]
        if set(entry) - {"behaviour", "fields"} or not isinstance(table, dict) or not table:
            return None, "'fields' maps config paths to the values they must equal, with nothing else beside it"
        rules = []
        for path, value in table.items():
            if isinstance(value, list) and value and all(_scalar_ok(v) for v in value) and isinstance(path, str) and bridge_names.CONFIG_PATH.match(path):
                rules.append(FieldRule(path, "one_of", tuple(value)))  # a list: any of these values
                continue
            if not isinstance(path, str) or not bridge_names.CONFIG_PATH.match(path) or not _scalar_ok(value):
                return None, f"fields: {path!r} must be a config path (section.field or env.NAME) with a scalar value or a list of them"
            rules.append(FieldRule(path, "equals", value))
        return tuple(rules), None
    path = entry.get("field")
    ops = [op for op in _FIELD_OPS if op in entry]
    if set(entry) - {"behaviour", "field", "code_only", *_FIELD_OPS} or len(ops) != 1:
        return None, "'field' needs exactly one of equals, not_equals, never, one_of, includes, excludes, constructs, absent: true (and optionally code_only: true)"
    if "code_only" in entry and not isinstance(entry["code_only"], bool):
        return None, "code_only: true or false"
    if not isinstance(path, str) or not bridge_names.CONFIG_PATH.match(path):
        return None, f"field: {path!r} is not a config path (section.field or env.NAME)"
    op, value = ops[0], entry[ops[0]]
    if op == "absent" and value is not True:
        return None, "absent: the only value is true"
    if op == "one_of" and not (isinstance(value, list) and value and all(_scalar_ok(v) for v in value)):
        return None, "one_of: a list of scalar values"
    if op in ("equals", "not_equals", "never", "includes", "excludes") and not _scalar_ok(value):
        return None, f"{op}: a scalar value"
    if op == "constructs" and not (isinstance(value, str) and value.isidentifier()):
        return None, "constructs: the class name an answer assigns (CommOverlapConfig)"
    return (FieldRule(path, op, tuple(value) if op == "one_of" else None if op == "absent" else value, bool(entry.get("code_only", False))),), None


def _scenario(entry: dict) -> tuple[Scenario | None, str | None]:
    spec = entry.get("execute")
    if set(entry) - {"behaviour", "execute"} or not isinstance(spec, dict) or set(spec) - {"scenario", "expect"}:
        return None, "'execute' holds 'scenario' and 'expect' only, with nothing else beside it"
    scenario, expect = spec.get("scenario") or {}, spec.get("expect")
    if not isinstance(scenario, dict):
        return None, "execute.scenario: a mapping"
    for key, value in scenario.items():
        kind = _SCENARIO_KEYS.get(key)
        if kind is None:
            return None, f"execute.scenario: unknown key {key!r} (known: {', '.join(_SCENARIO_KEYS)})"
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return None, f"execute.scenario.{key}: wrong type"
    for path, value in (scenario.get("set") or {}).items():
        if not isinstance(path, str) or not (bridge_names.CONFIG_PATH.match(path) or path in bridge_names.SETTABLE_SECTIONS) or path.startswith("env.") or not (_scalar_ok(value) or _constructor_ok(value)):
            return None, f"execute.scenario.set: {path!r} must be a config path (or a section) with a scalar value or {{call: Name, kwargs: {{...}}}}"
    if not all(isinstance(k, str) and isinstance(v, (str, int)) for k, v in (scenario.get("env") or {}).items()):
        return None, "execute.scenario.env: names to string values"
    if not isinstance(expect, dict) or not expect or set(expect) - set(_EXPECT_KEYS):
        return None, f"execute.expect: one or more of {', '.join(_EXPECT_KEYS)}"
    if "passes" in expect and expect["passes"] is not True:
        return None, "execute.expect.passes: the only value is true (to expect a failure, give 'raises')"
    if "passes" in expect and "raises" in expect:
        return None, "execute.expect: 'passes' and 'raises' contradict each other"
    for key in ("raises", "warns"):
        if key in expect:
            if not isinstance(expect[key], str) or not expect[key]:
                return None, f"execute.expect.{key}: a regex"
            try:
                re.compile(expect[key])
            except re.error as exc:
                return None, f"execute.expect.{key}: {exc}"
    table = expect.get("fields", {})
    if not isinstance(table, dict) or not all(isinstance(p, str) and bridge_names.CONFIG_PATH.match(p) and not p.startswith("env.") and _scalar_ok(v) for p, v in table.items()):
        return None, "execute.expect.fields: config paths to scalar values"
    return Scenario(
        world_size=scenario.get("world_size", 8), tp=scenario.get("tp", 1), pp=scenario.get("pp", 1), vpp=scenario.get("vpp"), sp=scenario.get("sp", False),
        set=tuple((scenario.get("set") or {}).items()), env=tuple((k, str(v)) for k, v in (scenario.get("env") or {}).items()),
        passes=expect.get("passes"), raises=expect.get("raises"), fields=tuple(table.items()), warns=expect.get("warns"),
    ), None


def read_checks(path: Path, cases: list[Case]) -> tuple[dict[str, list[Check]], list[Finding]]:
    """Checks by case key, and findings for anything that does not fit the cases."""
    findings: list[Finding] = []
    try:
        located = load_yaml(path, read_text(path))
    except LoadError as error:
        return {}, [error.finding]
    data = located.data
    if located.duplicates:  # YAML keeps the last of two equal keys: the first block's checks would vanish silently
        key, line = located.duplicates[0]
        return {}, [Finding(str(path), line, "checks/duplicate-key", f"{key!r} appears twice; YAML would keep only the later one: merge them")]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [Finding(str(path), located.line(), "checks/schema", "top level must map case ids to lists of checks")]
    by_id = {str(c.id): c for c in cases}
    out: dict[str, list[Check]] = {}
    seen: dict[str, set[str]] = {}
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
            if not isinstance(entry, dict) or not isinstance(entry.get("behaviour"), str):
                findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: needs 'behaviour' (text) and one grader: 'must'/'must_not', 'field'/'fields' or 'execute'"))
                continue
            if entry["behaviour"].strip() not in texts:
                findings.append(Finding(str(path), located.line(where + ("behaviour",)), "checks/unknown-behaviour", f"{case_id}: no expected behaviour reads {entry['behaviour']!r}"))
                continue
            if entry["behaviour"].strip() in seen.setdefault(case.key, set()):
                findings.append(Finding(str(path), located.line(where), "checks/duplicate", f"{case_id}[{index}]: a second grader for {entry['behaviour']!r} (one per behaviour)"))
                continue
            seen[case.key].add(entry["behaviour"].strip())
            if "field" in entry or "fields" in entry or "execute" in entry:
                rules, why = (_field_rules(entry) if "execute" not in entry else (None, None))
                scenario, why2 = (_scenario(entry) if "execute" in entry else (None, None))
                if why or why2:
                    findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: {why or why2}"))
                    continue
                out.setdefault(case.key, []).append(Check(entry["behaviour"].strip(), fields=rules or (), execute=scenario))
                continue
            if set(entry) - {"behaviour", "must", "must_not"}:
                findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: needs 'behaviour' (text) and one grader: 'must'/'must_not', 'field'/'fields' or 'execute'"))
                continue
            if "must" not in entry and "must_not" not in entry:
                findings.append(Finding(str(path), located.line(where), "checks/schema", f"{case_id}[{index}]: no pattern to check (give 'must' or 'must_not')"))
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
