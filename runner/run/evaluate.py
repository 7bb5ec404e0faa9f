"""`mbskills eval` as one call: choose the cases, open the provider, the cache and the run
directory, run the plan, and close everything again whatever happens."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ..core import UsageError, defaults
from ..load import Bundle, bundle_cases, select_cases
from ..providers import PriceTable, Settings, Transport, open_cache, open_provider, price_for
from .plan import Plan, Summary, run_plan
from .progress import make_progress
from .rundir import RunDir


@dataclass(frozen=True)
class EvalRequest:
    """What `mbskills eval` was asked for; the defaults are the CLI's."""

    model: str
    out: Path
    conditions: tuple[str, ...] = tuple(defaults.CONDITIONS.split(","))
    trials: int = defaults.TRIALS
    jobs: int = defaults.JOBS
    max_turns: int = defaults.MAX_TURNS
    skills: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()  # --case globs, any of which may match
    limit: int | None = None
    api: str | None = None
    base_url: str | None = None
    settings: Settings = Settings()
    transport: Transport = Transport()
    cache: str | None = None
    no_cache: bool = False
    pricing: Path | None = None
    progress: str = "auto"
    command: str | None = None  # the command line, kept in run.json so `grade` can say how to finish a run


def _require_known_skills(bundle: Bundle, cases: list) -> None:
    """validate's evals/unknown-skill and evals/missing-script, before any request: a case
    whose expected skill is not in the bundle would be graded against a skill no condition
    can offer."""
    names = bundle.skill_names()
    for case in cases:
        if case.expected_skill is not None and case.expected_skill not in names:
            raise UsageError(f"{case.source}: evals/unknown-skill: case {case.id!r}: expected_skill {case.expected_skill!r} is not a skill of this bundle ({', '.join(sorted(names))}); run `mbskills validate` for every finding")
        if case.expected_skill is not None and case.expected_script and not (bundle.skills_dir / case.expected_skill / case.expected_script).is_file():
            raise UsageError(f"{case.source}: evals/missing-script: case {case.id!r}: expected_script {case.expected_script!r} does not exist in skills/{case.expected_skill}/; run `mbskills validate` for every finding")


def run_eval(bundle: Bundle, request: EvalRequest) -> Summary:
    """Run every selected case x condition x trial into `request.out`; UsageError before
    any request for input that cannot work, and for a fatal provider error mid-run."""
    bundle.require_skills(request.skills)
    if request.limit is not None and request.limit < 1:
        raise UsageError("--limit must be at least 1")
    if request.settings.reasoning_effort is not None and not request.settings.reasoning_effort:
        raise UsageError("--reasoning-effort needs a value")
    cases = select_cases(bundle_cases(bundle), skills=list(request.skills) or None, pattern=request.cases, limit=request.limit)
    _require_known_skills(bundle, cases)
    plan = Plan(bundle, cases, list(request.conditions), request.trials, max_turns=request.max_turns, jobs=request.jobs, command=request.command)
    prices = PriceTable(request.pricing)
    provider = open_provider(request.model, request.settings, request.transport, api=request.api, base_url=request.base_url)
    price = price_for(provider, prices)
    cache = open_cache(request.cache, request.no_cache, provider)
    out = RunDir(request.out)

    async def go() -> Summary:
        try:
            return await run_plan(plan, provider, cache, out, lambda total: make_progress(total, mode=request.progress), price)
        finally:
            await provider.aclose()

    try:
        return asyncio.run(go())
    finally:
        out.close()
        cache.close()
