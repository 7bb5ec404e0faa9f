"""`mbskills eval` as one call: choose the cases, open the provider, the cache and the run
directory, run the plan, and close everything again whatever happens."""

from __future__ import annotations

import asyncio
import hashlib
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
    agent: str = "api"  # api: the project's own tool loop; or an agent client's name
    agent_bin: str | None = None
    isolate_network: bool = False
    agent_timeout: float = defaults.AGENT_TIMEOUT_S


# validate's rules about what a run asks and how it is graded: the eval files, the checks
# sidecars, the bundle's layout, YAML. (The skills' own quality rules, the reference
# validator's included, stay validate's: an eval of a skill in progress is still an eval.)
RUN_RULES = ("evals/", "checks/", "bundle/", "yaml/", "calibration/")


def _state(bundle: Bundle) -> str:
    """A digest of every file validation reads (card.yaml, skills/, evals/) and of the
    runner's own code, by path, size and modification time: equal digests, equal verdict."""
    digest = hashlib.sha256()
    roots = [bundle.root / "card.yaml", bundle.root / "skills", bundle.root / "evals", Path(__file__).resolve().parents[1]]
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _require_valid(bundle: Bundle) -> None:
    """Before any request: a run on a bundle with such findings (a case whose expected skill
    is not in it, a missing script, a sidecar that cannot grade) would measure nothing. A
    clean verdict is remembered for the bundle's state (~/.cache/mbskills/validated/), so
    evals of an unchanged bundle do not pay for it again."""
    from ..validate import validate_path

    marker = defaults.cache_home() / "validated" / _state(bundle)
    if marker.exists():
        return
    findings = [f for f in validate_path(bundle.root) if f.rule.startswith(RUN_RULES)]
    if findings:
        more = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
        raise UsageError(f"{findings[0].format()}{more}; run `mbskills validate {bundle.root}` and fix the bundle before an eval")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass  # only a shortcut for the next eval


def run_eval(bundle: Bundle, request: EvalRequest) -> Summary:
    """Run every selected case x condition x trial into `request.out`; UsageError before
    any request for input that cannot work, and for a fatal provider error mid-run."""
    bundle.require_skills(request.skills)
    if request.limit is not None and request.limit < 1:
        raise UsageError("--limit must be at least 1")
    if request.settings.reasoning_effort is not None and not request.settings.reasoning_effort:
        raise UsageError("--reasoning-effort needs a value")
    cases = select_cases(bundle_cases(bundle), skills=list(request.skills) or None, pattern=request.cases, limit=request.limit)
    _require_valid(bundle)
    plan = Plan(bundle, cases, list(request.conditions), request.trials, max_turns=request.max_turns, jobs=request.jobs, command=request.command)
    if request.agent != "api":
        return _run_agent(bundle, plan, request)
    if request.agent_bin or request.isolate_network:
        raise UsageError("--agent-bin and --isolate-network apply to --agent CLIENT, not to --agent api")
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


def _run_agent(bundle: Bundle, plan: Plan, request: EvalRequest) -> Summary:
    """The same plan, each record a session of the named client (runner.agents)."""
    from ..agents import Agent

    given = [flag for flag, value in (("--api", request.api), ("--temperature", request.settings.temperature), ("--max-tokens", request.settings.max_tokens), ("--reasoning-effort", request.settings.reasoning_effort), ("--seed", request.settings.seed)) if value is not None]
    if given:
        raise UsageError(f"{given[0]} does not reach an agent client (--agent {request.agent} keeps its own settings); drop it or use --agent api")
    agent = Agent(request.agent, request.model, base_url=request.base_url, binary=request.agent_bin, isolate=request.isolate_network, timeout_s=request.agent_timeout)
    price = PriceTable(request.pricing).lookup(agent.endpoint.provider, agent.model)
    out = RunDir(request.out)
    try:
        return asyncio.run(run_plan(plan, None, None, out, lambda total: make_progress(total, mode=request.progress), price, agent=agent))
    finally:
        out.close()
