"""Grading one record: routing and process verdicts from its transcript, deterministic-check
verdicts from the case's sidecar and, with a judge, LLM verdicts. A behaviour's final verdict
comes from the transcript for process behaviours, else the judge where it ran, else the check."""

from __future__ import annotations

import asyncio
from typing import Callable

from ..load import Case, Check
from .checks import run_check
from .judge import Judge, JudgeError
from .transcript import grade_process, process_behaviour, routing_outcome, script_use
from .types import CONTENT, GRADED, JUDGE_ERROR, PROCESS, RECORD_ERROR, BehaviourGrade, Correctness, RecordGrade


def _final(item: BehaviourGrade) -> None:
    if item.kind == PROCESS:
        item.verdict, item.source = item.transcript, "transcript"
    elif item.judge is not None:
        item.verdict, item.source = item.judge, "judge"
    elif item.check is not None:
        item.verdict, item.source = item.check, "check"


async def grade_record(record: dict, case: Case, skill_names: list[str], checks: list[Check], judge: Judge | None) -> RecordGrade:
    grade = RecordGrade(
        key=record["key"],
        case=record["case"],
        owner=record["owner"],
        case_id=record["case_id"],
        condition=record["condition"],
        trial=record["trial"],
        expected_skill=record["expected_skill"],
        activated=record["activated_skills"],
        routing=routing_outcome(record["expected_skill"], record["activated_skills"]) if "activate_skill" in record["tools_offered"] else None,
        tokens=record["usage"]["input_tokens"] + record["usage"]["output_tokens"],
        turns=len(record["turns"]),
    )
    if record["status"] != "ok":
        grade.status, grade.error = RECORD_ERROR, record["error"]
        return grade
    answer = record["answer"] or ""
    by_text = {c.behaviour: c for c in checks}
    content: list[int] = []
    for index, behaviour in enumerate(case.behaviours):
        item = BehaviourGrade(index, behaviour.text, CONTENT)
        process = process_behaviour(behaviour.text, skill_names)
        if process:
            item.kind = PROCESS
            item.transcript, item.transcript_why = grade_process(*process, record)
        else:
            content.append(index)
            check = by_text.get(behaviour.text)
            if check is not None:
                item.check, item.check_why = run_check(check, answer)
        grade.behaviours.append(item)
    if judge is not None:
        try:
            judged = await judge.grade(case.key, case.prompt, case.ground_truth, [case.behaviours[i].text for i in content], answer)
        except JudgeError as failure:
            grade.status, grade.error = JUDGE_ERROR, {"kind": "judge", "message": str(failure)}
        else:
            for index, verdict in zip(content, judged.behaviours):
                item = grade.behaviours[index]
                item.judge, item.evidence, item.evidence_found = verdict.passed, verdict.evidence, verdict.evidence_found
            grade.correct = Correctness(judged.correct.passed, judged.correct.evidence)
            grade.judge_usage = judged.usage.to_dict() | {"cached": judged.cached}
    for item in grade.behaviours:
        _final(item)
    grade.script = script_use(record)
    graded = [b.verdict for b in grade.behaviours if b.verdict is not None]
    verdicts = graded + ([grade.correct.judge] if grade.correct else [])
    grade.behaviour_rate = (sum(graded) / len(graded)) if graded else None
    grade.passed = (all(verdicts) if verdicts else None) if grade.status == GRADED else None
    grade.disagreements = [b.index for b in grade.behaviours if b.judge is not None and b.check is not None and b.judge != b.check]
    return grade


async def grade_records(
    records: list[dict], cases: dict[str, Case], skill_names: list[str], checks: dict[str, list[Check]], judge: Judge | None, *, jobs: int = 8, on_done: Callable[[RecordGrade], None] | None = None
) -> list[RecordGrade]:
    gate = asyncio.Semaphore(jobs)

    async def one(record: dict) -> RecordGrade:
        async with gate:
            grade = await grade_record(record, cases[record["case"]], skill_names, checks.get(record["case"], []), judge)
        if on_done:
            on_done(grade)
        return grade

    return list(await asyncio.gather(*(one(r) for r in records)))
