"""The combining policy: which verdicts decide a behaviour. A grader's verdict decides only
where the held-out calibration set (evals/heldout/, written without looking at the checks)
shows it reliable; `tests/test_grade_policy.py` holds this table against those figures, and
docs/grading.md quotes them.

- transcript: decides process behaviours (which skills were read), and only those.
- check, by kind (runner/grade/checks.py): a tripwire or a reversed statement is a definite
  fail; a presence (every pattern found, affirmatively) is a pass; an absence (a pattern not
  found) is weak evidence: it goes to the judge, or leaves the behaviour ungraded.
- judge: NO decides; YES decides only with its quote found in the answer (else the verdict
  is `unsupported` and counts for nothing); a definite check fail outranks a judge YES.
"""

from __future__ import annotations

from .checks import ABSENCE, PRESENCE, REVERSED, TRIPWIRE

CHECK_DECIDES = {TRIPWIRE: True, REVERSED: True, PRESENCE: True, ABSENCE: False}
# A kind that decides must have at least this precision on the held-out set.
MIN_PRECISION = 0.9
DEFINITE_FAILS = (TRIPWIRE, REVERSED)
