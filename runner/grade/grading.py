"""`mbskills grade` and `mbskills calibrate` as one call each: load what they need, open
the judge (when asked for), grade, and close the judge's client and cache again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..core import UsageError, defaults
from ..load import Bundle, Case, Check, bundle_cases, fingerprint, load_checks, load_skill, require_labels, resolve_bundle
from ..providers import NoCache, ProviderError, Settings, Transport, open_cache, open_provider
from ..run import load_run
from .calibrate import calibrate
from .judge import Judge
from .records import grade_records
from .types import RecordGrade

@dataclass(frozen=True)
class JudgeOptions:
    """--judge and its options; `model` None means no judge (transcript and checks only)."""

    model: str | None = None
    api: str | None = None
    base_url: str | None = None
    temperature: str = defaults.JUDGE_TEMPERATURE  # a number, or "omit" for models that refuse one
    max_tokens: int = defaults.JUDGE_MAX_TOKENS
    timeout_s: float = defaults.TIMEOUT_S
    max_retries: int = defaults.MAX_RETRIES
    cache: str | None = None
    no_cache: bool = False
    jobs: int = defaults.JOBS


def _temperature(text: str) -> float | None:
    if text == "omit":
        return None
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--judge-temperature: expected a number or 'omit', got {text!r}") from None


def _open_judge(options: JudgeOptions) -> tuple[Judge | None, Any]:
    if not options.model:
        return None, NoCache()
    settings = Settings(_temperature(options.temperature), options.max_tokens)
    provider = open_provider(options.model, settings, Transport(options.timeout_s, options.max_retries), api=options.api, base_url=options.base_url)
    cache = open_cache(options.cache, options.no_cache, provider)
    return Judge(provider, cache), cache


def _with_judge(options: JudgeOptions, work: Callable[[Judge | None], Awaitable[Any]]) -> tuple[Judge | None, Any]:
    """Run `work(judge)`, then close the judge's client and the cache; a fatal judge error
    (bad key, unknown model) is unusable input."""
    judge, cache = _open_judge(options)

    async def go() -> Any:
        try:
            return await work(judge)
        finally:
            if judge:
                await judge.provider.aclose()

    try:
        return judge, asyncio.run(go())
    except ProviderError as fatal:
        raise UsageError(f"judge {options.model}: {fatal}") from None
    finally:
        cache.close()


def _cases_and_checks(bundle: Bundle) -> tuple[list[Case], dict[str, list[Check]]]:
    cases = bundle_cases(bundle)
    return cases, load_checks(cases)  # a bad sidecar: LoadError, one line with file and line


@dataclass
class GradedRun:
    """A run directory's records, graded; what the report stage needs to build its files."""

    path: Path
    info: dict[str, Any]
    grades: list[RecordGrade]
    skill_names: list[str]
    judge: dict[str, Any] | None  # the judge's identity
    fingerprint_now: str  # of the bundle as it is now, over the cases the run holds
    checks_cases: int
    warnings: list[str] = field(default_factory=list)


def grade_run(run: Path, options: JudgeOptions, *, bundle: str | Path | None = None) -> GradedRun:
    """Grade every record of the run directory `run` against the bundle (--bundle, else the
    one its run.json names)."""
    info, records = load_run(run)
    found = resolve_bundle(bundle, recorded=info.get("bundle"))
    cases, checks = _cases_and_checks(found)
    by_key = {c.key: c for c in cases}
    missing = sorted({r["case"] for r in records} - set(by_key))
    if missing:
        raise UsageError(f"{run}: records for cases the bundle no longer has: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if not records:
        raise UsageError(f"{run}: no records to grade")
    skills = [load_skill(d) for d in found.skill_dirs()]
    names = [s.name for s in skills]

    judge, grades = _with_judge(options, lambda judge: grade_records(records, by_key, names, checks, judge, jobs=options.jobs))
    warnings = []
    model = info["model"]
    if judge and judge.identity["provider"] == model["provider"] and judge.identity["model"] == model["model"]:
        warnings.append(f"the judge {options.model} is the model under test; its verdicts may favour its own answers")
    ran = {r["case"] for r in records}
    now = fingerprint(skills, [c for c in cases if c.key in ran])
    return GradedRun(run, info, grades, names, judge.describe() if judge else None, now, len(checks), warnings)


def calibrate_bundle(bundle: Bundle, options: JudgeOptions, *, answers: Path | None = None) -> dict[str, Any]:
    """Grade the labelled answers (default BUNDLE/evals/calibration) with the checks and the
    judge, and score both against the labels. HarnessError when the judge failed on any."""
    cases, checks = _cases_and_checks(bundle)
    labelled = require_labels(answers or bundle.evals_dir / "calibration", cases)
    skills = [load_skill(d).name for d in bundle.skill_dirs()]
    _, result = _with_judge(options, lambda judge: calibrate(labelled, skills, checks, judge, jobs=options.jobs))
    return result

