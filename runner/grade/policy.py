"""The combining policy: which verdicts decide a behaviour. A grader's verdict decides only
where the held-out calibration set (evals/heldout/, written without looking at the checks)
shows it reliable; `tests/test_grade_policy.py` holds this table against those figures, and
docs/grading.md quotes them.

- transcript: decides process behaviours (which skills were read), and only those.
- check, by kind (runner/grade/checks.py): a tripwire or a reversed statement is a definite
  fail; a presence (every pattern found, affirmatively) is a pass; an absence (a pattern not
  found) is weak evidence: it goes to the judge, or leaves the behaviour ungraded. A clear
  (a check of forbidden patterns only, none found) never passes on its own: it passes only
  where a presence in the same answer shows the answer says something, else it is ungraded.
- the answer: one that says nothing (checks.says_nothing) fails every content behaviour.
- judge: NO decides; YES decides only with its quote found in the answer (else the verdict
  is `unsupported` and counts for nothing); a definite check fail outranks a judge YES.
"""

from __future__ import annotations

from .checks import ABSENCE, CLEAR, PRESENCE, REVERSED, TRIPWIRE

CHECK_DECIDES = {TRIPWIRE: True, REVERSED: True, PRESENCE: True, ABSENCE: False, CLEAR: False}
# A kind that decides must have at least this precision on the held-out set.
MIN_PRECISION = 0.9
DEFINITE_FAILS = (TRIPWIRE, REVERSED)


def check_verdicts(kinds: list[str | None]) -> list[bool | None]:
    """What the checks alone decide for one answer's content behaviours (a kind per
    behaviour, None where it has no check): a clear passes only beside a presence."""
    positive = PRESENCE in kinds
    out: list[bool | None] = []
    for kind in kinds:
        if kind == CLEAR:
            out.append(True if positive else None)
        elif kind is not None and CHECK_DECIDES[kind]:
            out.append(kind == PRESENCE)
        else:
            out.append(None)
    return out
