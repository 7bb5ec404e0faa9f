"""The run stage: select cases, put each case x condition x trial to the model with at
most `jobs` records (so requests) in flight, and write records as they complete."""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
from dataclasses import dataclass, field

from . import __version__
from .agent import Job, run_job
from .cases import Case, read_evals
from .conditions import CONDITIONS
from .findings import LoadError, UsageError
from .pricing import Price
from .providers.base import Provider, ProviderError
from .rundir import RunDir
from .skills import Bundle, Skill, load_skill

# What makes a run directory belong to a command: changing one of these needs a new --out.
IDENTITY_FIELDS = ("model", "max_turns", "bundle_fingerprint")


def bundle_cases(bundle: Bundle) -> list[Case]:
    # A symlink that leads nowhere is an error to report, not a skill without cases.
    files = [p for d in bundle.skill_dirs() if (p := d / "evals" / "evals.json").is_file() or p.is_symlink()]
    cases: list[Case] = []
    seen: dict[str, Case] = {}
    for path in files + bundle.bundle_eval_files():
        try:
            evals = read_evals(path)
        except LoadError as error:
            raise UsageError(f"{error.finding.format()} (run `mbskills validate` for every finding)") from None
        if evals.findings:
            raise UsageError(f"{evals.findings[0].format()} (run `mbskills validate` for every finding)")
        for case in evals.cases:
            if case.key in seen:
                raise UsageError(f"{path}:{evals.case_line(case.index, 'id')}: evals/duplicate-id: case id {case.id!r} appears twice (records are keyed by it)")
            seen[case.key] = case
        cases.extend(evals.cases)
    return cases


def select_cases(cases: list[Case], *, skills: list[str] | None = None, pattern: str | None = None, limit: int | None = None) -> list[Case]:
    """--skill keeps cases of that skill's evals file or expecting that skill; --case is a
    glob over `owner/id` or the bare id; --limit keeps the first N."""
    chosen = cases
    if skills:
        chosen = [c for c in chosen if c.owner in skills or c.expected_skill in skills]
    if pattern:
        chosen = [c for c in chosen if fnmatch.fnmatchcase(c.key, pattern) or fnmatch.fnmatchcase(str(c.id), pattern)]
    if limit is not None:
        chosen = chosen[:limit]
    return chosen


def fingerprint(skills: list[Skill], cases: list[Case]) -> str:
    """Changes when any file a model could see, or any case, changes."""
    digest = hashlib.sha256()
    for skill in skills:
        # evals/ is left out: the model never sees it, and its cases are hashed below
        files = (p for p in skill.root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.relative_to(skill.root).parts[0] != "evals")
        for path in sorted(files):
            digest.update(str(path.relative_to(skill.root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    for source in sorted({c.source for c in cases}):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


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


@dataclass
class Plan:
    bundle: Bundle
    cases: list[Case]
    conditions: list[str]
    trials: int
    max_turns: int = 8
    jobs: int = 8

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
