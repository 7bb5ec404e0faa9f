"""Which field and execute graders may decide: `evals/admissions.yaml`, written only by
`mbskills calibrate --admit ROUND` after measuring every grader on a fresh held-out round
(`evals/rounds/ROUND/<owner>/<id>.held-N.md`, answers written by people who saw the cases
and skills, never the graders).

    rounds:
      admit-1:
        answers: evals/rounds/admit-1
        measured: 2026-12-02T09:10:00Z
        figures: {field: {...}, execute: {...}}   # precision on pass and on fail
        admitted: [<grader fingerprint>, ...]       # graders whose kind met the bar there
        not_admitted: [<grader fingerprint>, ...]

A grader is named by a fingerprint of its case, behaviour and whole specification, so a
grader edited after its admission is a new grader and decides nothing until a fresh round
admits it. A round is measured once: admitting from a round already in the file is refused.
Pattern checks keep their own rule (checks.yaml admitted, checks.proposed.yaml not read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import LoadError
from .parsing import load_yaml, read_text

ADMISSIONS = "admissions.yaml"
ROUNDS = "rounds"  # evals/rounds/<name>/: fresh held-out rounds


@dataclass
class Admissions:
    path: Path
    rounds: dict[str, dict] = field(default_factory=dict)

    @property
    def admitted(self) -> set[str]:
        return {fp for entry in self.rounds.values() for fp in entry.get("admitted", [])}


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
