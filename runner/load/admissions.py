"""Which graders (pattern checks, field assertions, execute scenarios) may decide:
`evals/admissions.yaml`, written only by
`mbskills calibrate --admit ROUND` after measuring every grader on a fresh held-out round
(`evals/rounds/ROUND/<owner>/<id>.held-N.md`, answers written by people who saw the cases
and skills, never the graders).

    rounds:
      admit-1:
        answers: evals/rounds/admit-1
        measured: 2026-12-02T09:10:00Z
        figures: {field: {...}, execute: {...}}   # precision on pass and on fail, counts
        admitted_kinds: [execute]                   # the kinds that met the bar there
        admitted: [<grader fingerprint>, ...]       # their graders
        not_admitted: [<grader fingerprint>, ...]

A grader is named by a fingerprint of its case, behaviour and whole specification, so a
grader edited after its admission is a new grader and decides nothing until a fresh round
admits it. A round is measured once: admitting from a round already in the file is refused.
Rounds admit-1 to admit-3 measured field and execute graders only; from admit-4 on every
grader of checks.yaml is measured, pattern checks included (checks.proposed.yaml is never read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import LoadError
from .parsing import load_yaml, read_text

ADMISSIONS = "admissions.yaml"
ROUNDS = "rounds"  # evals/rounds/<name>/: fresh held-out rounds
# The bar a grader kind must clear on a round: precision on pass and on fail, each over at
# least ADMIT_MIN_DECIDED decided verdicts (fewer is too little evidence to admit on: at 20
# verdicts without an error the 95% Wilson interval still reaches down to 84%).
ADMIT_PRECISION = 0.98
ADMIT_MIN_DECIDED = 20


def meets_bar(figures: dict) -> bool:
    """Whether a kind's figures on one round admit it (runner/grade/calibrate.py computes them)."""
    try:
        return (figures["passes"] >= ADMIT_MIN_DECIDED and figures["fails"] >= ADMIT_MIN_DECIDED
                and figures["pass_precision"] >= ADMIT_PRECISION and figures["fail_precision"] >= ADMIT_PRECISION)
    except (KeyError, TypeError):
        return False


@dataclass
class Admissions:
    path: Path
    rounds: dict[str, dict] = field(default_factory=dict)

    @property
    def admitted(self) -> set[str]:
        """Fingerprints admitted by a round whose figures clear today's bar for every kind it
        admitted: a stricter bar withdraws an admission, the record stays what was measured."""
        out: set[str] = set()
        for entry in self.rounds.values():
            figures = entry.get("figures") or {}
            kinds = entry.get("admitted_kinds") or [kind for kind, f in figures.items() if isinstance(f, dict) and f.get("admissible")]
            if entry.get("admitted") and kinds and all(meets_bar(figures.get(kind) or {}) for kind in kinds):
                out.update(entry["admitted"])
        return out


def load_admissions(evals_dir: Path) -> Admissions:
    """The bundle's admissions (none when the file is absent); a malformed file is a LoadError."""
    path = evals_dir / ADMISSIONS
    if not path.is_file():
        return Admissions(path)
    located = load_yaml(path, read_text(path))
    data = located.data
    rounds = data.get("rounds") if isinstance(data, dict) else None
    if not isinstance(rounds, dict):
        raise LoadError(path, located.line(), "admissions/schema", "expected 'rounds:' mapping round names to what was measured there")
    for name, entry in rounds.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("admitted", []), list) or not all(isinstance(x, str) for x in entry.get("admitted", [])):
            raise LoadError(path, located.line(("rounds", name)), "admissions/schema", f"round {name}: 'admitted' must be a list of grader fingerprints")
    return Admissions(path, {str(k): v for k, v in rounds.items()})
