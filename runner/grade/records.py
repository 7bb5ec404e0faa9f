"""Grading one record: routing and process verdicts from its transcript, deterministic-check
verdicts from the case's sidecar and, with a judge, LLM verdicts, combined by the policy in
runner/grade/policy.py. A behaviour no reliable grader settles stays ungraded; a record with
an ungraded behaviour and no failing one is ungraded too, and counts in no pass rate."""

from __future__ import annotations

import asyncio
from typing import Callable

from ..load import Case, Check
from ..run import TRUNCATION_STOPS
from .checks import run_check, says_nothing
from .executed import Observe, run_execute
from .extract import extract
from .fields import run_fields
from .judge import Judge, JudgeError
from .policy import DEFINITE_FAILS, SAYS, check_verdicts
from .transcript import activations, grade_process, process_behaviour, routing_outcome, script_use
from .types import CONTENT, GRADED, JUDGE_ERROR, PROCESS, PROCESS_ONLY, RECORD_ERROR, TRUNCATED, TURN_LIMIT, UNGRADED, BehaviourGrade, Correctness, RecordGrade


def skills_offered(record: dict) -> bool:
    """Could the agent find and read skills: the API loop offered its skill tool, or an
    agent client had the bundle installed in its workspace."""
    return "activate_skill" in record["tools_offered"] or bool((record.get("agent") or {}).get("skills_installed"))


def _final(items: list[BehaviourGrade], nothing: str | None) -> None:
    """Each behaviour's verdict by the policy (runner/grade/policy.py)."""
    content = [b for b in items if b.kind == CONTENT]
    by_checks = dict(zip((id(b) for b in content), check_verdicts([b.check_kind for b in content])))
    for item in items:
        if item.kind == PROCESS:
            item.verdict, item.source = item.transcript, "transcript"
        elif nothing:
            item.verdict, item.source = False, "answer"
        elif item.check is not None and item.check_kind in DEFINITE_FAILS:
            item.verdict, item.source = False, "check"
        elif item.judge is False or (item.judge and item.evidence_found):
            item.verdict, item.source = item.judge, "judge"
        elif by_checks[id(item)] is not None:
            item.verdict, item.source = by_checks[id(item)], item.grader or "check"


async def run_grader(check: Check, answer: str, facts, observe: Observe | None) -> tuple[bool | None, str, str]:
    """(what it says, kind, why) of one behaviour's grader: patterns, field assertions, or
    an execute scenario (ungraded without a worker to run it)."""
    if check.grader == "field":
        kind, why = run_fields(check.fields, facts)
    elif check.grader == "execute":
        if observe is None:
            kind, why = "execute-ungraded", "no execute worker in this grading run"
        else:
            kind, why = await run_execute(check.execute, facts, observe)
    else:
        outcome = run_check(check, answer)
        return outcome.passed, outcome.kind, outcome.why
    return SAYS[kind], kind, why


def _usage(record: dict) -> tuple[int | None, int | None]:
    usage = record["usage"]
    if usage.get("unreported"):
        return None, None
    return usage["input_tokens"], usage["output_tokens"]


def _truncated(record: dict) -> bool:
    # records written before the `truncated` status said ok; their last turn tells
    return record["status"] == TRUNCATED or (record["status"] == "ok" and bool(record["turns"]) and record["turns"][-1].get("stop_reason") in TRUNCATION_STOPS)


def _one_verdict(verdicts: list[bool | None]) -> bool | None:
    """One failing verdict fails; all graded and passing passes; anything else: None."""
    if False in verdicts:
        return False
    return True if verdicts and None not in verdicts else None


async def grade_record(record: dict, case: Case, skill_names: list[str], checks: list[Check], judge: Judge | None, observe: Observe | None = None) -> RecordGrade:
    input_tokens, output_tokens = _usage(record)
    activated = activations(record)
    grade = RecordGrade(
        key=record["key"],
        case=record["case"],
        owner=record["owner"],
        case_id=record["case_id"],
        condition=record["condition"],
        trial=record["trial"],
        expected_skill=record["expected_skill"],
        activated=activated,
        routing=routing_outcome(record["expected_skill"], activated) if skills_offered(record) else None,
        turns=len(record["turns"]),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=record.get("cost_usd"),
    )
    if record["status"] == "error":
        grade.status, grade.error = RECORD_ERROR, record["error"]
        return grade
    if record["status"] == "turn_limit" or record.get("finish") == "turn_limit":  # older records said ok
        # the model never answered: a failure of the record, whatever its behaviours
        grade.status, grade.passed = TURN_LIMIT, False
        return grade
    if _truncated(record):
        # the output limit cut the answer off: not a whole answer, so a failure
        grade.status, grade.passed = TRUNCATED, False
        return grade
    answer = record["answer"] or ""
    grade.says_nothing = says_nothing(answer)
    by_text = {c.behaviour: c for c in checks}
    facts = extract(answer) if any(c.grader != "check" for c in checks) else None
    content: list[int] = []
    for index, behaviour in enumerate(case.behaviours):
        item = BehaviourGrade(index, behaviour.text, CONTENT)
        process = process_behaviour(behaviour.text, skill_names)
        if process:
            item.kind = PROCESS
            item.transcript, item.transcript_why = grade_process(process, record)
        else:
            content.append(index)
            check = by_text.get(behaviour.text)
            if check is not None:
                item.check, item.check_kind, item.check_why = await run_grader(check, answer, facts, observe)
                item.grader = check.grader
        grade.behaviours.append(item)
    if judge is not None and content:
        try:
            judged = await judge.grade(case.key, case.prompt, case.ground_truth, [case.behaviours[i].text for i in content], answer)
        except JudgeError as failure:
            grade.status, grade.error = JUDGE_ERROR, {"kind": "judge", "message": str(failure)}
        else:
            for index, verdict in zip(content, judged.behaviours):
                item = grade.behaviours[index]
                item.judge, item.evidence, item.evidence_found = verdict.passed, verdict.evidence, verdict.evidence_found
                item.unsupported, item.evidence_problem = verdict.passed and not verdict.evidence_found, verdict.problem
            grade.correct = Correctness(judged.correct.passed, judged.correct.evidence, judged.correct.evidence_found, judged.correct.problem)
            grade.judge_usage = judged.usage.to_dict() | {"cached": judged.cached}
    _final(grade.behaviours, grade.says_nothing)
    grade.script = script_use(record)
    contents = [b for b in grade.behaviours if b.kind == CONTENT]
    graded = [b.verdict for b in contents if b.verdict is not None]
    grade.behaviour_rate = (sum(graded) / len(graded)) if graded else None
    grade.disagreements = [b.index for b in grade.behaviours if b.judge is not None and b.check is not None and b.judge != b.check]
    process = [b.verdict for b in grade.behaviours if b.kind == PROCESS]
    grade.process_passed = _one_verdict(process) if process else None
    if grade.status == GRADED:
        if not contents:
            grade.status = PROCESS_ONLY  # nothing about the answer's content to count
        else:
            # content only: a condition that offers no skill must be able to pass
            correct = [False if grade.says_nothing else grade.correct.verdict] if grade.correct else []
            grade.passed = _one_verdict([b.verdict for b in contents] + correct)
            if grade.passed is None:
                grade.status = UNGRADED
    return grade


async def grade_records(
    records: list[dict], cases: dict[str, Case], skill_names: list[str], checks: dict[str, list[Check]], judge: Judge | None, *, jobs: int = 8, on_done: Callable[[RecordGrade], None] | None = None, observe: Observe | None = None
) -> list[RecordGrade]:
    gate = asyncio.Semaphore(jobs)

    async def one(record: dict) -> RecordGrade:
        async with gate:
            grade = await grade_record(record, cases[record["case"]], skill_names, checks.get(record["case"], []), judge, observe)
        if on_done:
            on_done(grade)
        return grade

    return list(await asyncio.gather(*(one(r) for r in records)))
