"""The scheduler: put each case x condition x trial to the model with at most `jobs`
records (so requests) in flight, and write records as they complete."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .. import __version__
from ..core import UsageError, defaults
from ..load import Bundle, Case, Skill, fingerprint, load_skill
from ..providers import Price, Provider, ProviderError
from .agent import Job, run_job
from .conditions import CONDITIONS
from .rundir import RunDir

# What makes a run directory belong to a command: changing one of these needs a new --out.
IDENTITY_FIELDS = ("model", "max_turns", "bundle_fingerprint")


@dataclass
class Summary:
    total: int = 0
    skipped: int = 0  # already in the run directory
    written: int = 0
    errors: int = 0
    requests: int = 0
    cached_responses: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    live_cost_usd: float | None = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)

    def add(self, record: dict) -> None:
        self.written += 1
        self.requests += record["requests"]
        self.cached_responses += record["cached_responses"]
        self.input_tokens += record["usage"]["input_tokens"]
        self.output_tokens += record["usage"]["output_tokens"]
        if record["live_cost_usd"] is None:
            self.live_cost_usd = None
        elif self.live_cost_usd is not None:
            self.live_cost_usd += record["live_cost_usd"]
        if record["status"] == "error":
            self.errors += 1
            kind = record["error"]["kind"]
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def line(self, out: object) -> str:
        """The one-line summary `mbskills eval` prints."""
        cost = "unknown (no price for this model; see --pricing)" if self.live_cost_usd is None else f"${self.live_cost_usd:.4f}"
        errors = f" ({', '.join(f'{k} {v}' for k, v in sorted(self.error_kinds.items()))})" if self.errors else ""
        return (
            f"{self.total} records in {out}: {self.written} written now, {self.skipped} already there, {self.errors} errors{errors}"
            f"; {self.requests} requests, {self.cached_responses} from cache; {self.input_tokens} input + {self.output_tokens} output tokens; cost of this invocation {cost}"
        )


@dataclass
class Plan:
    bundle: Bundle
    cases: list[Case]
    conditions: list[str]
    trials: int
    max_turns: int = defaults.MAX_TURNS
    jobs: int = defaults.JOBS

    def __post_init__(self) -> None:
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown or not self.conditions:
            raise UsageError(f"--conditions: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(CONDITIONS)}")
        if self.trials < 1 or self.max_turns < 1 or self.jobs < 1:
            raise UsageError("--trials, --max-turns and -j must be at least 1")
        if not self.cases:
            raise UsageError("no eval case matches the filters")

    def all_jobs(self) -> list[Job]:
        return [Job(case, condition, trial) for case in self.cases for condition in self.conditions for trial in range(self.trials)]


def run_info(plan: Plan, provider: Provider, skills: list[Skill]) -> dict:
    return {
        "format": 1,
        "mbskills": __version__,
        "model": provider.identity(),
        "max_turns": plan.max_turns,
        "bundle": str(plan.bundle.root),
        "bundle_fingerprint": fingerprint(skills, plan.cases),
        "conditions": plan.conditions,
        "trials": plan.trials,
        "cases": [c.key for c in plan.cases],
    }


async def run_plan(plan: Plan, provider: Provider, cache, out: RunDir, progress_factory, price: Price | None) -> Summary:
    skills = [load_skill(d) for d in plan.bundle.skill_dirs()]
    prepare = getattr(provider, "prepare", None)
    if prepare is not None:
        prepare([c.key for c in plan.cases], plan.conditions)
    done = out.open(run_info(plan, provider, skills), IDENTITY_FIELDS)
    jobs = plan.all_jobs()
    pending = [job for job in jobs if job.key not in done]
    summary = Summary(total=len(jobs), skipped=len(jobs) - len(pending))
    gate = asyncio.Semaphore(plan.jobs)

    async def one(job: Job) -> dict:
        async with gate:
            return await run_job(job, provider, cache, skills, max_turns=plan.max_turns, price=price)

    with progress_factory(len(pending)) as progress:
        tasks = [asyncio.create_task(one(job)) for job in pending]
        try:
            for finished in asyncio.as_completed(tasks):
                record = await finished
                out.append(record)
                summary.add(record)
                progress.advance(record)
        except ProviderError as fatal:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise UsageError(f"{provider.identity()['provider']}:{provider.model}: {fatal} ({summary.written} records written; rerun the same command to continue)") from None
    return summary
