"""The scheduler: put each case x condition x trial to the model with at most `jobs`
records (so requests) in flight, and write records as they complete."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .. import __version__
from ..core import UsageError, defaults
from ..load import Bundle, Case, Skill, bundle_files, fingerprint, load_skill
from ..providers import Price, ProviderError
from .agent import Job, run_job
from .client_job import CLIENT_ERRORS, run_client_job
from .conditions import CONDITIONS, base_condition
from .rundir import ERROR, TRUNCATED, TURN_LIMIT, RunDir

# When the first records to finish all failed with the same client-side error (a 4xx
# other than 429, a refused connection, a body that is not the API's JSON), the rest would
# fail the same way: the run stops instead of sending them.
EARLY_RECORDS = 3
CLIENT_KINDS = ("bad_request", "connection", "protocol", "not_json", *CLIENT_ERRORS)

# What makes a run directory belong to a command: changing one of these needs a new --out.
# The plan (cases x conditions x trials) is part of it: a run's rates count its records.
IDENTITY_FIELDS = ("model", "max_turns", "bundle_fingerprint", "cases", "conditions", "trials")


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
    turn_limits: int = 0  # records that ran out of turns without an answer
    truncated: int = 0  # records whose answer the output limit cut off
    unknown_usage: int = 0  # records with a reply that carried no token counts

    def add(self, record: dict) -> None:
        self.written += 1
        self.requests += record["requests"]
        self.cached_responses += record["cached_responses"]
        self.input_tokens += record["usage"]["input_tokens"]
        self.output_tokens += record["usage"]["output_tokens"]
        if record["usage"].get("unreported"):
            self.unknown_usage += 1
        if record["status"] == TURN_LIMIT:
            self.turn_limits += 1
        if record["status"] == TRUNCATED:
            self.truncated += 1
        if record["live_cost_usd"] is None:
            self.live_cost_usd = None
        elif self.live_cost_usd is not None:
            self.live_cost_usd += record["live_cost_usd"]
        if record["status"] == ERROR:
            self.errors += 1
            kind = record["error"]["kind"]
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def line(self, out: object) -> str:
        """The one-line summary `mbskills eval` prints."""
        cost = "unknown (no price for this model; see --pricing)" if self.live_cost_usd is None else f"${self.live_cost_usd:.4f}"
        errors = f" ({', '.join(f'{k} {v}' for k, v in sorted(self.error_kinds.items()))})" if self.errors else ""
        if self.written and self.unknown_usage == self.written:
            tokens = "tokens unknown (no reply reported usage)"
        else:
            tokens = f"{self.input_tokens} input + {self.output_tokens} output tokens"
            if self.unknown_usage:
                tokens += f" ({self.unknown_usage} records had a reply without usage: their tokens are unknown)"
        return (
            f"{self.total} records in {out}: {self.written} written now, {self.skipped} already there, {self.errors} errors{errors}, {self.turn_limits} out of turns, {self.truncated} cut off by the output limit"
            f"; {self.requests} requests, {self.cached_responses} from cache; {tokens}; cost of this invocation {cost}"
        )


@dataclass
class Plan:
    bundle: Bundle
    cases: list[Case]
    conditions: list[str]
    trials: int
    max_turns: int = defaults.MAX_TURNS
    jobs: int = defaults.JOBS
    command: str | None = None

    def __post_init__(self) -> None:
        unknown = [c for c in self.conditions if base_condition(c) is None]
        if unknown or not self.conditions:
            raise UsageError(f"--conditions: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(CONDITIONS)}, or repeat one as NAME@2, NAME@3, ... (an A/A arm)")
        twice = sorted({c for c in self.conditions if self.conditions.count(c) > 1})
        if twice:
            raise UsageError(f"--conditions: {', '.join(twice)} given twice; a second arm of a condition is NAME@2")
        if self.trials < 1 or self.max_turns < 1 or self.jobs < 1:
            raise UsageError("--trials, --max-turns and -j must be at least 1")
        if not self.cases:
            raise UsageError("no eval case matches the filters")

    def all_jobs(self) -> list[Job]:
        return [Job(case, condition, trial) for case in self.cases for condition in self.conditions for trial in range(self.trials)]


def run_info(plan: Plan, provider, skills: list[Skill]) -> dict:
    files = bundle_files(plan.bundle.root, skills, plan.cases)
    return {
        "format": 1,
        "mbskills": __version__,
        "model": provider.identity(),
        "max_turns": plan.max_turns,
        "bundle": str(plan.bundle.root),
        "bundle_fingerprint": fingerprint(files),
        "bundle_files": files,  # grade names what changed since
        "conditions": plan.conditions,
        "trials": plan.trials,
        "cases": [c.key for c in plan.cases],
        "command": plan.command,  # what finishes the run when it stops short
    }


async def run_plan(plan: Plan, provider, cache, out: RunDir, progress_factory, price: Price | None, agent=None) -> Summary:
    """`provider` answers through the project's own tool loop; with `agent` (an
    agents.Agent) each record is a session of that client instead."""
    skills = [load_skill(d) for d in plan.bundle.skill_dirs()]
    if agent is not None:
        provider = agent
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
            if agent is not None:
                return await run_client_job(job, agent, plan.bundle, skills, price=price)
            return await run_job(job, provider, cache, skills, max_turns=plan.max_turns, price=price)

    # The first records run alone, as a probe: if they all fail with the same client
    # error, the run stops before anything else is sent.
    # An agent client's session is slow: its probe is the whole first wave, so that no
    # slot idles while it runs.
    early = max(EARLY_RECORDS, plan.jobs) if agent is not None else EARLY_RECORDS
    probe, rest = pending[:early], pending[early:]
    with progress_factory(len(pending)) as progress:
        tasks: list[asyncio.Task] = []

        async def drain(batch: list[Job]) -> list[dict]:
            started = [asyncio.create_task(one(job)) for job in batch]
            tasks.extend(started)
            finished = []
            for task in asyncio.as_completed(started):
                record = await task
                out.append(record)
                summary.add(record)
                progress.advance(record)
                finished.append(record)
            return finished

        try:
            first = await drain(probe)
            if rest and _same_client_error(first):
                error = first[0]["error"]
                raise ProviderError(error["kind"], f"the first {len(first)} records all failed the same way, so the run stopped before the other {len(rest)}: {error['message']}", fatal=True, status=error["status"])
            await drain(rest)
        except ProviderError as fatal:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise UsageError(f"{provider.identity()['provider']}:{provider.model}: {fatal} ({summary.written} records written; fix the cause and rerun the same command to continue)") from None
    return summary


def _same_client_error(records: list[dict]) -> bool:
    errors = [r["error"] for r in records if r["status"] == ERROR]
    if len(errors) != len(records):
        return False
    kinds = {(e["kind"], e.get("status")) for e in errors}
    return len(kinds) == 1 and errors[0]["kind"] in CLIENT_KINDS
