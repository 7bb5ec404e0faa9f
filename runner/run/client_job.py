"""One record through a real agent client (`mbskills eval --agent NAME`): the case's prompt
as the user's message to a headless session whose workspace holds what the condition
gives (nothing, the installed bundle, or the skill in the client's instruction file).

The record has the API loop's shape, so grading, statistics and reports read it unchanged;
`agent` adds the client's name and version, the tools it refused, the instruction file and
what the client reported itself. A client that crashes, hangs or prints no answer makes
an error record with its stderr's last lines (a rerun retries it)."""

from __future__ import annotations

import json
import time

from ..agents import Agent, Call, Session, Workspace
from ..load import Bundle, Skill
from ..providers import Price, Usage
from .agent import Job, _cost, _now, record_head, user_message
from .conditions import client_setup
from .rundir import ERROR, OK

# Error kinds of a client record; the first records all failing with the same one stop a run.
CLIENT_ERRORS = ("client_timeout", "client_exit", "client_failed", "no_answer")


def _messages(prompt: str, session: Session) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for step in session.transcript.steps:
        if isinstance(step, Call):
            messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": step.id, "name": step.name, "arguments": json.dumps(step.arguments)}]})
            messages.append({"role": "tool", "tool_call_id": step.id, "name": step.name, "content": step.result or "", "is_error": step.is_error})
        else:
            messages.append({"role": "assistant", "content": step})
    return messages


def _error(session: Session, timeout_s: float) -> dict | None:
    finished, transcript = session.finished, session.transcript
    tail = finished.stderr_tail()
    said = f"; stderr: {tail}" if tail else ""
    if finished.rc is None:
        return {"kind": "client_timeout", "message": f"no answer within {timeout_s:g} s; the client's process group was killed{said}", "status": None}
    if finished.rc != 0:
        return {"kind": "client_exit", "message": f"the client exited with {finished.rc}{said}", "status": None}
    if transcript.failed:
        return {"kind": "client_failed", "message": f"the client reported a failed session: {transcript.failed[:500]}{said}", "status": None}
    if not transcript.answer.strip():
        return {"kind": "no_answer", "message": f"the client finished without a final answer ({len(transcript.steps)} events read, {transcript.skipped_lines} lines not JSON){said}", "status": None}
    return None


async def run_client_job(job: Job, agent: Agent, bundle: Bundle, skills: list[Skill], *, price: Price | None) -> dict:
    case = job.case
    plan = client_setup(job.condition, case, skills)
    workspace = Workspace(plan.install, tuple((s.name, s.description, s.body.strip()) for s in plan.extra), plan.instructions)
    prompt = user_message(case)
    started, clock = _now(), time.perf_counter()
    session = await agent.run(prompt, bundle, workspace, [s.name for s in [*skills, *plan.extra]])
    transcript = session.transcript
    error = _error(session, agent.timeout_s)
    if transcript.input_tokens is None:
        usage = Usage.unknown()
    else:
        usage = Usage(transcript.input_tokens, transcript.output_tokens or 0, transcript.cached_input_tokens)
    cost = _cost(price, usage)
    return {
        **record_head(job),
        "status": ERROR if error else OK,
        "error": error,
        "finish": "error" if error else "answered",
        "expected_skill": case.expected_skill,
        "expected_script": case.expected_script,
        "model": agent.identity(),
        "ignored_settings": [],
        "inlined_skill": plan.inlined,
        "tools_offered": transcript.tools,
        "system": "",  # the client's own system prompt: not in its event stream
        "messages": _messages(prompt, session),
        "answer": "" if error else transcript.answer,
        "activated_skills": session.activated,
        "files_read": session.files_read,
        "turns": [{"cached": False, **turn} for turn in transcript.turns],
        "requests": len(transcript.turns),
        "cached_responses": 0,
        "usage": usage.to_dict(),
        "cost_usd": cost,
        "live_cost_usd": cost,
        "latency_s": round(time.perf_counter() - clock, 4),
        "started_at": started,
        "finished_at": _now(),
        "agent": {
            "name": agent.client.name,
            "version": agent.version,
            "exit_code": session.finished.rc,
            "seconds": round(session.finished.seconds, 4),
            "skills_installed": plan.install,
            "instruction_file": session.instruction_file,
            "tools_refused": session.refused,
            "reported_cost_usd": transcript.reported_cost_usd,
            "usage_by_model": transcript.usage_by_model,
            "evals_visible": session.evals_visible,
            "stream_lines_skipped": transcript.skipped_lines,
        },
    }
