"""`mbskills grade` and `mbskills calibrate` as one call each: load what they need, open
the judge (when asked for), grade, and close the judge's client and cache again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..core import HarnessError, UsageError, defaults
from ..load import DEV, HELD_OUT, TRAINING, Bundle, Case, Check, bundle_cases, fingerprint, load_checks, load_skill, require_labels, resolve_bundle
from ..providers import NoCache, ProviderError, Settings, Transport, open_cache, open_provider
from ..run import RunStatus, load_run, run_status
from .calibrate import calibrate
from .judge import Judge
from .records import grade_records
from .transcript import process_behaviour
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
    provider = open_provider(options.model, settings, Transport(options.timeout_s, options.max_retries), api=options.api, base_url=options.base_url, flag="--judge")
    cache = open_cache(options.cache, options.no_cache, provider)
    return Judge(provider, cache), cache


def _with_judge(options: JudgeOptions, work: Callable[[Judge | None], Awaitable[Any]], opened: tuple[Judge | None, Any] | None = None) -> tuple[Judge | None, Any]:
    """Run `work(judge)`, then close the judge's client and the cache; a fatal judge error
    (bad key, unknown model) is unusable input."""
    judge, cache = opened or _open_judge(options)

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
    status: RunStatus  # how complete the run is
    needs_judge: list[dict] = field(default_factory=list)  # behaviours no check can settle
    warnings: list[str] = field(default_factory=list)


def grade_run(run: Path, options: JudgeOptions, *, bundle: str | Path | None = None, allow_incomplete: bool = False) -> GradedRun:
    """Grade every record of the run directory `run` against the bundle (--bundle, else the
    one its run.json names). A run with records missing, failed or still being written is a
    HarnessError (exit 3) before anything is graded, unless `allow_incomplete`."""
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
    opened = _open_judge(options)  # unusable judge options (exit 2) come before an incomplete run (exit 3)
    status = run_status(run, info, records)
    if not status.complete and not allow_incomplete:
        opened[1].close()
        raise HarnessError(status.line(run))

    judge, grades = _with_judge(options, lambda judge: grade_records(records, by_key, names, checks, judge, jobs=options.jobs), opened)
    warnings = []
    model = info["model"]
    if judge and judge.identity["provider"] == model["provider"] and judge.identity["model"] == model["model"]:
        warnings.append(f"the judge {options.model} is the model under test; its verdicts may favour its own answers")
    ran = {r["case"] for r in records}
    now = fingerprint(skills, [c for c in cases if c.key in ran])
    needs = [] if judge else _needs_judge([by_key[k] for k in sorted(ran)], names, checks)
    return GradedRun(run, info, grades, names, judge.describe() if judge else None, now, len(checks), status, needs, warnings)


def _needs_judge(cases: list[Case], skill_names: list[str], checks: dict[str, list[Check]]) -> list[dict]:
    """Content behaviours with no check: without a judge they stay ungraded."""
    out = []
    for case in cases:
        checked = {c.behaviour for c in checks.get(case.key, [])}
        for index, behaviour in enumerate(case.behaviours):
            if behaviour.text not in checked and not process_behaviour(behaviour.text, skill_names):
                out.append({"case": case.key, "index": index, "text": behaviour.text})
    return out


def calibrate_bundle(bundle: Bundle, options: JudgeOptions, *, answers: Path | None = None) -> dict[str, Any]:
    """Grade labelled answers with the checks and the judge and score both against the
    labels: `answers` alone, else the held-out set (BUNDLE/evals/heldout) first, then the
    tuning sets (BUNDLE/evals/dev, BUNDLE/evals/calibration)."""
    cases, checks = _cases_and_checks(bundle)
    if answers is not None:
        sets = [("answers", answers)]
    else:
        sets = [(name, bundle.evals_dir / folder) for name, folder in (("held-out", HELD_OUT), ("dev", DEV), ("training", TRAINING)) if (bundle.evals_dir / folder).is_dir()]
        if not sets:
            raise UsageError(f"{bundle.evals_dir}: no {HELD_OUT}/ or {TRAINING}/ folder of labelled answers; pass --answers DIR")
    labelled = [(name, path, require_labels(path, cases)) for name, path in sets]
    skills = [load_skill(d).name for d in bundle.skill_dirs()]

    async def work(judge):
        return [await calibrate(entries, skills, checks, judge, jobs=options.jobs) for _, _, entries in labelled]

    judge, results = _with_judge(options, work)
    out = [{"name": name, "path": str(path), **result} for (name, path, _), result in zip(labelled, results)]
    return {"judge": judge.describe() if judge else None, "sets": out, "judge_errors": [e for r in out for e in r["judge_errors"]]}

