"""The execute grader's verdicts: the answer's proposed config (runner/grade/extract.py)
applied to a behaviour's scenario by the worker (runner/execute/), and what Bridge did with
it compared with what the behaviour expects.

  execute-pass      the answer's config meets the expectation (it validates; it raises a
                    matching message; the fields end at the given values; a matching
                    warning is logged), and the scenario alone does not
  execute-fail      it does not: the evidence is the exception and message, or the values
  execute-ungraded  nothing fair to run: a refused or unparsable line (named), a value that
                    is an expression, no config proposed at all, a scenario that meets the
                    expectation without the answer (a pass by construction), or a worker
                    that failed
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from ..load import Scenario
from .extract import Call, Extraction, Name, Opaque, Removed
from .fields import same

EXEC_PASS, EXEC_FAIL, EXEC_UNGRADED = "execute-pass", "execute-fail", "execute-ungraded"
EXEC_KINDS = (EXEC_PASS, EXEC_FAIL, EXEC_UNGRADED)

Observe = Callable[[dict], Awaitable[dict]]


def as_json(value: Any) -> Any:
    """A proposed value in the worker's wire form (data only)."""
    if isinstance(value, Call):
        return {"call": value.name, "kwargs": {k: as_json(v) for k, v in value.kwargs}}
    if isinstance(value, Name):
        return {"name": value.dotted}
    if isinstance(value, Removed):
        return {"removed": True}
    if isinstance(value, dict):
        return {"dict": {str(k): as_json(v) for k, v in value.items()}}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value


def _opaque_inside(value: Any) -> bool:
    if isinstance(value, Opaque):
        return True
    if isinstance(value, Call):
        return any(_opaque_inside(v) for _, v in value.kwargs)
    if isinstance(value, dict):
        return any(_opaque_inside(v) for v in value.values())
    if isinstance(value, list):
        return any(_opaque_inside(v) for v in value)
    return False


def request_for(scenario: Scenario, facts: Extraction) -> tuple[dict | None, str | None]:
    """(request, None), or (None, why the behaviour cannot be executed fairly)."""
    if facts.problems:
        first = facts.problems[0]
        return None, f"line {first.line}: {first.kind}: {first.text}"
    proposed = facts.proposed()
    if not proposed:
        return None, "the answer proposes no config to execute"
    for fact in proposed:
        if _opaque_inside(fact.value):
            return None, f"line {fact.line}: {fact.path} is set to an expression that is not data"
    assignments = [{"path": f.path, "value": as_json(f.value), "line": f.line} for f in proposed]
    return {"scenario": scenario.request(), "assignments": assignments, "fields": [p for p, _ in scenario.fields]}, None


def meets(scenario: Scenario, observed: dict) -> tuple[bool, str]:
    """Whether an observation meets the scenario's expectation, and what was observed."""
    raised = observed.get("raised")
    if raised:
        shown = f"raised {raised['type']}: {raised['message'][:300]}"
        if scenario.raises is not None:
            return bool(re.search(scenario.raises, f"{raised['type']}: {raised['message']}")), shown
        return False, shown
    if scenario.raises is not None:
        return False, "validated without raising"
    values = observed.get("fields", {})
    wrong = [f"{p} = {values.get(p)!r} (expected {v!r})" for p, v in scenario.fields if not same(v, values.get(p))]
    shown = "resolved: " + ", ".join(f"{p} = {values.get(p)!r}" for p, _ in scenario.fields) if scenario.fields else "validated"
    if wrong:
        return False, "resolved: " + ", ".join(wrong)
    if scenario.warns is not None and not any(re.search(scenario.warns, w) for w in observed.get("warnings", [])):
        return False, f"{shown}; no warning matches /{scenario.warns}/"
    return True, shown


async def run_execute(scenario: Scenario, facts: Extraction, observe: Observe) -> tuple[str, str]:
    """(kind, why) for one behaviour."""
    request, why = request_for(scenario, facts)
    if request is None:
        return EXEC_UNGRADED, why or "nothing to execute"
    bare = await observe({**request, "assignments": []})
    if "error" in bare or "refused" in bare:
        return EXEC_UNGRADED, f"the scenario could not be run: {bare.get('error') or bare.get('refused')}"
    if meets(scenario, bare)[0]:
        return EXEC_UNGRADED, "the scenario meets the expectation without the answer's config: no evidence either way"
    observed = await observe(request)
    if "error" in observed:
        return EXEC_UNGRADED, f"the worker failed: {observed['error']}"
    if "refused" in observed:
        return EXEC_UNGRADED, f"line {observed['refused'].get('line')}: refused: {observed['refused'].get('why')}"
    ok, shown = meets(scenario, observed)
    notes = observed.get("notes") or []
    if notes:
        shown += f" (not applied: {'; '.join(notes[:3])})"
    return (EXEC_PASS if ok else EXEC_FAIL), shown
