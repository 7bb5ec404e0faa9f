"""From a graded run to its report files, the lines `mbskills grade` prints and the gate
verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import UsageError, defaults
from ..grade import GradedRun
from .aggregate import build
from .files import banner, gates, write_all

@dataclass(frozen=True)
class Gates:
    """The CI gates. Whenever one is given, coverage must be at least `min_coverage`
    (default 1.0): a gate never passes on records that were not graded."""

    fail_under_uplift: float | None = None
    fail_under_pass: float | None = None
    fail_on_regression: bool = False
    min_coverage: float | None = None
    min_cases: int = defaults.MIN_CASES

    def __post_init__(self) -> None:
        for option, value, low, high, hint in (
            ("--fail-under-uplift", self.fail_under_uplift, -1.0, 1.0, "a fraction of case pass rate: 0.10 is ten points"),
            ("--fail-under-pass", self.fail_under_pass, 0.0, 1.0, "a fraction: 0.8 is 80%"),
            ("--min-coverage", self.min_coverage, 0.0, 1.0, "a fraction of the records asked for"),
        ):
            if value is not None and not low <= value <= high:  # NaN fails this too
                raise UsageError(f"{option} {value}: must be between {low:g} and {high:g} ({hint})")
        if self.min_cases < 1:
            raise UsageError(f"--min-cases {self.min_cases}: must be at least 1")

    @property
    def given(self) -> bool:
        return self.fail_under_uplift is not None or self.fail_under_pass is not None or self.fail_on_regression or self.min_coverage is not None

    @property
    def coverage_floor(self) -> float | None:
        return self.min_coverage if self.min_coverage is not None else (1.0 if self.given else None)


@dataclass
class Published:
    report: dict
    paths: list[Path]
    summary: str  # "graded N records: baseline 67%, ..."
    banner: list[str]  # completeness and what was left out, as every report says it
    harness: str | None  # answers the judge could not grade; None: none
    failed_gates: list[str] = field(default_factory=list)


def _summary(report: dict, records: int) -> str:
    overall = report["overall"]
    parts = []
    for condition, cell in overall["conditions"].items():
        rate, coverage = cell["pass_rate"], cell["coverage"]
        shown = "n/a" if rate is None else f"{100 * rate:.0f}%"
        parts.append(f"{condition} {shown}" + ("" if coverage == 1 else f" (coverage {'n/a' if coverage is None else f'{100 * coverage:.0f}%'})"))
    for condition, entry in overall["uplift"].items():
        if entry["mean"] is not None:
            interval = "interval undefined" if entry["undefined"] else f"[{100 * entry['lo']:+.0f}, {100 * entry['hi']:+.0f}]"
            parts.append(f"content uplift {condition} {100 * entry['mean']:+.0f} pts {interval}")
    wholly = report["health"].get("cases_wholly_ungraded") or []
    if wholly:
        parts.append(f"{len(wholly)} case{'s' if len(wholly) != 1 else ''} wholly ungraded")
    return f"graded {records} records: " + ", ".join(parts)


def _harness(report: dict) -> str | None:
    health = report["health"]
    if not health["judge_errors"]:
        return None
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(health["by_kind"].items()))
    return f"harness failures: {health['judge_errors']} records could not be graded ({kinds}); rerun grade, or pass --allow-incomplete to let the gates decide"


def publish(graded: GradedRun, gate: Gates = Gates(), *, resamples: int = defaults.RESAMPLES, seed: int = defaults.SEED, allow_incomplete: bool = False) -> Published:
    """Build the report, write every file into the run directory, and judge the gates (not
    judged when the judge failed on some answers, unless `allow_incomplete`: that outcome
    comes first)."""
    report = build(
        graded.info,
        graded.grades,
        skill_names=graded.skill_names,
        judge=graded.judge,
        fingerprint_now=graded.fingerprint_now,
        checks_cases=graded.checks_cases,
        completeness=graded.status.to_dict(),
        needs_judge=graded.needs_judge,
        content_cases=graded.content_cases,
        bundle_changes=graded.bundle_changes,
        judge_trust=graded.judge_trust.to_dict() if graded.judge_trust else None,
        resamples=resamples,
        seed=seed,
    )
    harness = None if allow_incomplete else _harness(report)
    failed = [] if harness else gates(report, fail_under_uplift=gate.fail_under_uplift, fail_under_pass=gate.fail_under_pass, fail_on_regression=gate.fail_on_regression, min_coverage=gate.coverage_floor, min_cases=gate.min_cases)
    # the verdict goes into the reports, so a reader of report.json sees what the exit code said
    state = None if not gate.given else "not judged" if harness else "underpowered" if any(f.startswith("underpowered") for f in failed) else "failed" if failed else "passed"
    report["gates"] = {"given": gate.given, "state": state, "failed": failed}
    paths = write_all(graded.path, report, graded.grades, gated=gate.given)
    return Published(report, paths, _summary(report, len(graded.grades)), banner(report), harness, failed)
