"""The grading stage: each record gets routing and process verdicts from its transcript,
deterministic-check verdicts from the case's sidecar, and (with a judge) LLM verdicts.
A behaviour's final verdict comes from the transcript for process behaviours, else the
judge where it ran, else the check."""

from __future__ import annotations

import asyncio
from typing import Callable

from ..cases import Case
from .checks import Check
from .judge import Judge, JudgeError
from .transcript import grade_process, process_behaviour, routing_outcome, script_use

GRADE_FORMAT = 1


def _base(record: dict) -> dict:
    return {k: record[k] for k in ("key", "case", "owner", "case_id", "condition", "trial", "expected_skill")}


async def grade_record(record: dict, case: Case, skill_names: list[str], checks: list[Check], judge: Judge | None) -> dict:
    grade = _base(record)
    grade.update(
        format=GRADE_FORMAT,
        activated=record["activated_skills"],
        routing=routing_outcome(record["expected_skill"], record["activated_skills"]) if "activate_skill" in record["tools_offered"] else None,
        tokens=record["usage"]["input_tokens"] + record["usage"]["output_tokens"],
        turns=len(record["turns"]),
        status="graded",
        error=None,
    )
    if record["status"] != "ok":
        grade.update(status="record_error", error=record["error"], behaviours=[], script=None, correct=None, passed=None, behaviour_rate=None, disagreements=[])
        return grade
    answer = record["answer"] or ""
    by_text = {c.behaviour: c for c in checks}
    behaviours, content = [], []
    for index, behaviour in enumerate(case.behaviours):
        item = {"index": index, "text": behaviour.text, "kind": "content", "transcript": None, "check": None, "check_why": None, "judge": None, "evidence": None, "evidence_found": None}
        process = process_behaviour(behaviour.text, skill_names)
        if process:
            item["kind"] = "process"
            item["transcript"], item["why"] = grade_process(*process, record)
        else:
            content.append(index)
            check = by_text.get(behaviour.text)
            if check is not None:
                item["check"], item["check_why"] = check.run(answer)
        behaviours.append(item)
    correct = None
    if judge is not None:
        try:
            judged = await judge.grade(case.key, case.prompt, case.ground_truth, [case.behaviours[i].text for i in content], answer)
        except JudgeError as failure:
            grade.update(status="judge_error", error={"kind": "judge", "message": str(failure)})
        else:
            for index, verdict in zip(content, judged.behaviours):
                behaviours[index].update(judge=verdict.passed, evidence=verdict.evidence, evidence_found=verdict.evidence_found)
            correct = {"judge": judged.correct.passed, "evidence": judged.correct.evidence}
            grade["judge_usage"] = judged.usage.to_dict() | {"cached": judged.cached}
    for item in behaviours:
        if item["kind"] == "process":
            item["verdict"], item["source"] = item["transcript"], "transcript"
        elif item["judge"] is not None:
            item["verdict"], item["source"] = item["judge"], "judge"
        elif item["check"] is not None:
            item["verdict"], item["source"] = item["check"], "check"
        else:
            item["verdict"], item["source"] = None, None
    script = script_use(record)
    graded = [b["verdict"] for b in behaviours if b["verdict"] is not None]
    verdicts = graded + ([correct["judge"]] if correct else [])
    grade.update(
        behaviours=behaviours,
        script=script,
        correct=correct,
        behaviour_rate=(sum(graded) / len(graded)) if graded else None,
        passed=(all(verdicts) if verdicts else None) if grade["status"] == "graded" else None,
        disagreements=[b["index"] for b in behaviours if b["judge"] is not None and b["check"] is not None and b["judge"] != b["check"]],
    )
    return grade


async def grade_records(records: list[dict], cases: dict[str, Case], skill_names: list[str], checks: dict[str, list[Check]], judge: Judge | None, *, jobs: int = 8, on_done: Callable[[dict], None] | None = None) -> list[dict]:
    gate = asyncio.Semaphore(jobs)

    async def one(record: dict) -> dict:
        async with gate:
            grade = await grade_record(record, cases[record["case"]], skill_names, checks.get(record["case"], []), judge)
        if on_done:
            on_done(grade)
        return grade

    return list(await asyncio.gather(*(one(r) for r in records)))
