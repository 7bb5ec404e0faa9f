"""From a graded run to its report files, the lines `mbskills grade` prints and the gate
verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import defaults
from ..grade import GradedRun
from .aggregate import build
from .files import gates, write_all

@dataclass(frozen=True)
class Gates:
    fail_under_uplift: float | None = None
    fail_under_pass: float | None = None
    fail_on_regression: bool = False


@dataclass
class Published:
    report: dict
    paths: list[Path]
    summary: str  # "graded N records: baseline 67%, ..."
    harness: str | None  # records that did not run or could not be graded; None: none
    failed_gates: list[str] = field(default_factory=list)


def _summary(report: dict, records: int) -> str:
    overall = report["overall"]
    parts = []
    for condition, cell in overall["conditions"].items():
        rate = cell["pass_rate"]
        parts.append(f"{condition} {'n/a' if rate is None else f'{100 * rate:.0f}%'}")
    for condition, entry in overall["uplift"].items():
        if entry["mean"] is not None:
            parts.append(f"uplift {condition} {100 * entry['mean']:+.0f} pts [{100 * entry['lo']:+.0f}, {100 * entry['hi']:+.0f}]")
    return f"graded {records} records: " + ", ".join(parts)


def _harness(report: dict) -> str | None:
    health = report["health"]
    if not (health["record_errors"] or health["judge_errors"]):
        return None
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(health["by_kind"].items()))
    return f"harness failures: {health['record_errors']} records did not run, {health['judge_errors']} could not be graded ({kinds})"


def publish(graded: GradedRun, gate: Gates = Gates(), *, resamples: int = defaults.RESAMPLES, seed: int = defaults.SEED) -> Published:
    """Build the report, write every file into the run directory, and judge the gates
    (not judged when the harness failed: that outcome comes first)."""
    report = build(
        graded.info,
        graded.grades,
        skill_names=graded.skill_names,
        judge=graded.judge,
        fingerprint_now=graded.fingerprint_now,
        checks_cases=graded.checks_cases,
        resamples=resamples,
        seed=seed,
    )
    paths = write_all(graded.path, report, graded.grades)
    harness = _harness(report)
    failed = [] if harness else gates(report, fail_under_uplift=gate.fail_under_uplift, fail_under_pass=gate.fail_under_pass, fail_on_regression=gate.fail_on_regression)
    return Published(report, paths, _summary(report, len(graded.grades)), harness, failed)
