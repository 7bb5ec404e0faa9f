"""The combining policy: which verdicts decide a behaviour. A grader decides only once a fresh
held-out round admitted it (ADMIT_PRECISION on pass and on fail over ADMIT_MIN_DECIDED
verdicts each; runner/load/admissions.py, docs/grading.md); within an admitted grader, only
the kinds below that the held-out set (evals/heldout/) shows reliable decide, which
`tests/test_grade_policy.py` holds against those figures.

- transcript: decides process behaviours (which skills were read), and only those.
- check, by kind (runner/grade/checks.py): a tripwire or a reversed statement is a definite
  fail; a presence (every pattern found, affirmatively) is a pass; an absence (a pattern not
  found) is weak evidence: it goes to the judge, or leaves the behaviour ungraded. A clear
  (a check of forbidden patterns only, none found) never passes on its own: it passes only
  where a presence in the same answer shows the answer says something, else it is ungraded.
- the answer: one that says nothing (checks.says_nothing) fails every content behaviour.
- field assertion (runner/grade/fields.py): field-set passes, field-other fails,
  field-missing and field-clear decide nothing.
- execute (runner/grade/executed.py): execute-pass and execute-fail decide; ungraded is
  ungraded.
- judge: NO decides; YES decides only with its quote found in the answer (else the verdict
  is `unsupported` and counts for nothing); a definite check fail outranks a judge YES.
"""

from __future__ import annotations

from .checks import ABSENCE, CLEAR, PRESENCE, REVERSED, TRIPWIRE
from .executed import EXEC_FAIL, EXEC_PASS, EXEC_UNGRADED
from .fields import FIELD_CLEAR, FIELD_MISSING, FIELD_OTHER, FIELD_SET

CHECK_DECIDES = {
    TRIPWIRE: True, REVERSED: True, PRESENCE: True, ABSENCE: False, CLEAR: False,
    FIELD_SET: True, FIELD_OTHER: True, FIELD_MISSING: False, FIELD_CLEAR: False,
    EXEC_PASS: True, EXEC_FAIL: True, EXEC_UNGRADED: False,
}
# What each kind says of the behaviour: True pass, False fail, None nothing.
SAYS = {
    TRIPWIRE: False, REVERSED: False, PRESENCE: True, ABSENCE: False, CLEAR: True,
    FIELD_SET: True, FIELD_OTHER: False, FIELD_MISSING: None, FIELD_CLEAR: True,
    EXEC_PASS: True, EXEC_FAIL: False, EXEC_UNGRADED: None,
}
POSITIVE = (PRESENCE, FIELD_SET, EXEC_PASS)  # a decided pass: the answer says something
# A check's clear passes only beside a positive in the same answer. A field-clear never
# passes: beside a positive it was right 95.9% and 95.8% of the time on rounds admit-1 and
# admit-2, under the bar a deciding kind must clear.
CLEARS = (CLEAR,)
# Within an admitted grader, a kind that decides must have at least this precision on the
# held-out set; the grader itself decides only with ADMIT_PRECISION on pass and on fail, each
# over ADMIT_MIN_DECIDED verdicts, on a fresh round it was not written against.
from ..load import ADMIT_MIN_DECIDED, ADMIT_PRECISION  # noqa: E402
MIN_PRECISION = 0.9
DEFINITE_FAILS = (TRIPWIRE, REVERSED)


def check_verdicts(kinds: list[str | None]) -> list[bool | None]:
    """What the graders alone decide for one answer's content behaviours (a kind per
    behaviour, None where it has no grader): a clear passes only beside a positive."""
    positive = any(kind in POSITIVE for kind in kinds)
    out: list[bool | None] = []
    for kind in kinds:
        if kind in CLEARS:
            out.append(True if positive else None)
        elif kind is not None and CHECK_DECIDES[kind]:
            out.append(bool(SAYS[kind]))
        else:
            out.append(None)
    return out
