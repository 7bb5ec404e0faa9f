"""One record: a case under one condition and trial, run as an agent loop.

The model answers, or calls skill tools and is asked again, up to `max_turns` requests;
a record that runs out of turns without an answer has status `turn_limit`, and one whose
last reply the output limit cut off has status `truncated`; neither is ever `ok`.
Every request goes through the response cache first. A case's files reach the model under
every condition, attached to the user message."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ..load import Case, Skill, case_files
from ..providers import Price, Provider, ProviderError, Situation, Usage, count_attempts, request_key
from .conditions import is_replica, setup
from .rundir import ERROR, OK, TRUNCATED, TRUNCATION_STOPS, TURN_LIMIT, record_key
from .skill_tools import SkillTools

RECORD_FORMAT = 1


@dataclass(frozen=True)
class Job:
    case: Case
    condition: str
    trial: int

    @property
    def key(self) -> str:
        return record_key(self.case.key, self.condition, self.trial)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _cost(price: Price | None, usage: Usage) -> float | None:
    if price is None:
        return None
    cost = price.cost(usage)
    return None if cost is None else round(cost, 6)


def record_head(job: Job) -> dict:
    """The fields that name a record, the same for the API loop and an agent client."""
    case = job.case
    return {"format": RECORD_FORMAT, "key": job.key, "case": case.key, "owner": case.owner, "case_id": case.id, "condition": job.condition, "trial": job.trial}


def user_message(case: Case) -> str:
    """The case's prompt, then each of its files as text with its name."""
    if not case.files:
        return case.prompt
    parts = [case.prompt]
    for name, text in case_files(case):
        parts.append(f'<file name="{name}">\n{text.rstrip()}\n</file>')
    return "\n\n".join(parts)


async def run_job(job: Job, provider: Provider, cache, skills: list[Skill], *, max_turns: int, price: Price | None) -> dict:
    """The finished record; a request that fails for good makes an error record, except a
    fatal one (bad key, unknown model), which is raised to stop the run."""
    case = job.case
    plan = setup(job.condition, case, skills)
    tools = SkillTools([*skills, *plan.extra], offered=[t.name for t in plan.tools])
    situation = Situation(case.key, job.condition, job.trial)
    messages: list[dict] = [{"role": "user", "content": user_message(case)}]
    turns: list[dict] = []
    usage = Usage()
    live_usage = Usage()
    started, clock = _now(), time.perf_counter()
    finish, answer, error = TURN_LIMIT, "", None
    sent = 0  # calls to the provider
    attempts = count_attempts()  # HTTP attempts a live provider made for this record, retries included
    identity = provider.identity()
    try:
        for _ in range(max_turns):
            key = request_key(identity, plan.system, messages, plan.tools, job.trial, job.condition if is_replica(job.condition) else None) if provider.cacheable else None
            reply = cache.get(key) if key else None
            cached = reply is not None
            request_clock = time.perf_counter()
            if reply is None:
                sent += 1
                reply = await provider.complete(plan.system, messages, list(plan.tools), situation)
                if key:
                    cache.put(key, reply)
                live_usage.add(reply.usage)
            usage.add(reply.usage)
            turns.append({"cached": cached, "latency_s": round(time.perf_counter() - request_clock, 4), "usage": reply.usage.to_dict(), "stop_reason": reply.stop_reason})
            messages.append(reply.as_message())
            if not reply.tool_calls:
                # a reply the output limit cut off is not a whole answer, however it reads
                finish, answer = ("truncated" if reply.stop_reason in TRUNCATION_STOPS else "answered"), reply.text
                break
            for call in reply.tool_calls:
                content, is_error = tools.run(call)
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content, "is_error": is_error})
    except ProviderError as failure:
        if failure.fatal:
            raise
        finish, error = ERROR, {"kind": failure.kind, "message": str(failure), "status": failure.status}
    status = ERROR if error else OK if finish == "answered" else TRUNCATED if finish == "truncated" else TURN_LIMIT
    return {
        **record_head(job),
        "status": status,
        "error": error,
        "finish": finish,
        "expected_skill": case.expected_skill,
        "expected_script": case.expected_script,
        "model": identity,
        "ignored_settings": list(getattr(provider, "ignored", [])),
        "inlined_skill": plan.inlined,
        "tools_offered": [t.name for t in plan.tools],
        "system": plan.system,
        "messages": messages,
        "answer": answer,
        "activated_skills": tools.activated,
        "files_read": tools.files_read,
        "turns": turns,
        "requests": attempts[0] if getattr(provider, "counts_attempts", False) else sent,
        "cached_responses": sum(1 for t in turns if t["cached"]),
        "usage": usage.to_dict(),
        "cost_usd": _cost(price, usage),
        "live_cost_usd": _cost(price, live_usage),
        "latency_s": round(time.perf_counter() - clock, 4),
        "started_at": started,
        "finished_at": _now(),
    }
