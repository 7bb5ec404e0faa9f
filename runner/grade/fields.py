"""Field assertions over the facts an answer proposes (runner/grade/extract.py), without
running Bridge: `field: ddp.bucket_size, equals: 134217728` and its kin.

The answer's last proposed value for a path is what it proposes (a later line overrides an
earlier one, as in a script). What an assertion says, by kind:
  field-set      every asserted path ends at an accepted value: a pass
  field-other    some path ends at another value (or, for not_equals / absent, at the
                 forbidden one): a fail
  field-missing  some path is not proposed (or only as an expression that is not data):
                 weak, the behaviour goes to the judge or stays ungraded
  (`never: V` fails when any proposed value of the path is V, not only the last one;
  `includes: V` passes when any proposed value is V and fails when values are proposed and
  none is; `constructs: C` asks for an instance of class C; `excludes: V` asks for a list
  without V; `code_only` leaves prose out;
  `absent` passes outright when the answer removes the key)
  field-clear    a not_equals / absent / never assertion with nothing proposed for its path: the
                 answer avoids a mistake, which an empty answer does too, so it passes only
                 beside a decided pass in the same answer (as a check's `clear`)
"""

from __future__ import annotations

from typing import Any

from ..load import FieldRule
from .extract import Call, Extraction, Name, Opaque, Removed

FIELD_SET, FIELD_OTHER, FIELD_MISSING, FIELD_CLEAR = "field-set", "field-other", "field-missing", "field-clear"
FIELD_KINDS = (FIELD_SET, FIELD_OTHER, FIELD_MISSING, FIELD_CLEAR)
# torch's aliases of one dtype
_DTYPES = {"torch.float": "torch.float32", "torch.half": "torch.float16", "torch.double": "torch.float64"}


def same(expected: Any, got: Any) -> bool:
    """Whether a proposed value is the expected one, across the ways answers write it:
    YAML's `true` and Python's `True`, `"1"` and `1` for a number, a dotted name or a
    quoted string for the same text."""
    if isinstance(got, (Opaque, Call, Removed)):
        return False
    if isinstance(got, Name):
        got = _DTYPES.get(got.dotted, got.dotted)
    if isinstance(expected, str):
        expected = _DTYPES.get(expected, expected)
    if isinstance(expected, bool) or expected is None:
        if isinstance(got, str):
            got = {"true": True, "false": False, "none": None, "null": None}.get(got.strip().lower(), got)
        return got is expected
    if isinstance(expected, (int, float)):
        if isinstance(got, bool):
            return False
        if isinstance(got, str):
            try:
                got = float(got.replace("_", "").replace(",", ""))
            except ValueError:
                return False
        return isinstance(got, (int, float)) and got == expected
    if isinstance(expected, str):
        return isinstance(got, (str, int, float)) and not isinstance(got, bool) and str(got).strip() == expected
    return got == expected


def _shown(value: Any) -> str:
    if isinstance(value, Name):
        return value.dotted
    if isinstance(value, Opaque):
        return value.text
    if isinstance(value, Call):
        return f"{value.name}(...)"
    if isinstance(value, Removed):
        return "<removed>"
    return repr(value)


def _one(rule: FieldRule, facts: Extraction) -> tuple[str, str]:
    # `includes` reads every mention (a fix offered in prose beside other code); the others
    # read code before prose (prose describes as often as it proposes).
    found = facts.mentions(rule.path) if rule.op == "includes" else facts.about(rule.path)
    if rule.code_only:
        found = [f for f in found if f.source != "prose"]
    last = found[-1] if found else None
    if rule.op == "includes":
        hit = next((f for f in found if same(rule.value, f.value)), None)
        if hit is not None:
            return FIELD_SET, f"{rule.path} = {_shown(hit.value)} (line {hit.line}, {hit.source})"
        if any(not isinstance(f.value, Opaque) for f in found):
            return FIELD_OTHER, f"{rule.path} = " + ", ".join(_shown(f.value) for f in found) + f"; never {rule.value!r}"
        return FIELD_MISSING, f"{rule.path}: not proposed"
    if rule.op == "constructs":
        if last is None or isinstance(last.value, Opaque):
            return FIELD_MISSING, f"{rule.path}: not proposed"
        built = isinstance(last.value, Call) and last.value.short == rule.value
        return (FIELD_SET if built else FIELD_OTHER), f"{rule.path} = {_shown(last.value)} (line {last.line}, {last.source})"
    if rule.op == "excludes":
        if last is None or not isinstance(last.value, list):
            return FIELD_MISSING, f"{rule.path}: no list proposed"
        inside = any(same(rule.value, item) for item in last.value)
        return (FIELD_OTHER if inside else FIELD_SET), f"{rule.path} = {last.value!r} (line {last.line}, {last.source})"
    if rule.op == "absent":
        if last is None:
            return FIELD_CLEAR, f"{rule.path}: not set"
        if isinstance(last.value, Removed):
            return FIELD_SET, f"{rule.path} removed (line {last.line}, {last.source})"
        return FIELD_OTHER, f"{rule.path} = {_shown(last.value)} (line {last.line}, {last.source})"
    if rule.op == "never":
        bad = next((f for f in found if same(rule.value, f.value)), None)
        if bad is not None:
            return FIELD_OTHER, f"{rule.path} = {_shown(bad.value)} (line {bad.line}, {bad.source})"
        return FIELD_CLEAR, f"{rule.path}: never set to {rule.value!r}"
    if last is None or isinstance(last.value, Opaque):
        why = f"{rule.path}: not proposed" if last is None else f"{rule.path}: line {last.line} sets it to an expression ({_shown(last.value)})"
        return (FIELD_CLEAR if rule.op == "not_equals" and last is None else FIELD_MISSING), why
    where = f"{rule.path} = {_shown(last.value)} (line {last.line}, {last.source})"
    if rule.op == "equals":
        return (FIELD_SET if same(rule.value, last.value) else FIELD_OTHER), where
    if rule.op == "one_of":
        return (FIELD_SET if any(same(v, last.value) for v in rule.value) else FIELD_OTHER), where
    return (FIELD_OTHER if same(rule.value, last.value) else FIELD_SET), where  # not_equals


def run_fields(rules: tuple[FieldRule, ...], facts: Extraction) -> tuple[str, str]:
    """(kind, why) for one behaviour's assertions: one failing path fails; all set passes;
    a missing path leaves it weak; only clear ones are clear."""
    results = [_one(rule, facts) for rule in rules]
    kinds = [kind for kind, _ in results]
    why = "; ".join(text for _, text in results)
    if FIELD_OTHER in kinds:
        return FIELD_OTHER, why
    if FIELD_MISSING in kinds:
        return FIELD_MISSING, why
    if FIELD_SET in kinds:
        return FIELD_SET, why
    return FIELD_CLEAR, why
