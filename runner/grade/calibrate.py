"""Judge calibration: grade hand-labelled answers (evals/calibration/) with the judge and
the deterministic checks, and measure both against the labels (runner/load/labelled.py
reads them). Process behaviours ("Read the X skill ...") are graded from transcripts, not text, so they
are not labelled here."""

from __future__ import annotations

import asyncio

from .. import stats
from ..load import Check, Labelled
from .checks import run_check
from .judge import Judge, JudgeError
from .transcript import process_behaviour


def _score(pairs: list[tuple[bool, bool]]) -> dict:
    """Agreement of (label, predicted) pairs."""
    if not pairs:
        return {"items": 0, "accuracy": None, "kappa": None, "tp": 0, "tn": 0, "fp": 0, "fn": 0}
    labels, predicted = [p[0] for p in pairs], [p[1] for p in pairs]
    return {
        "items": len(pairs),
        "accuracy": sum(a == b for a, b in pairs) / len(pairs),
        "kappa": stats.cohen_kappa(labels, predicted),
        "tp": sum(a and b for a, b in pairs),
        "tn": sum(not a and not b for a, b in pairs),
        "fp": sum(not a and b for a, b in pairs),  # passed by the grader, labelled failing
        "fn": sum(a and not b for a, b in pairs),
    }


async def calibrate(labelled: list[Labelled], skill_names: list[str], checks: dict[str, list[Check]], judge: Judge | None, *, jobs: int = 8) -> dict:
    check_pairs, judge_pairs, correct_pairs, errors, items = [], [], [], [], []
    gate = asyncio.Semaphore(jobs)

    async def one(entry: Labelled) -> None:
        content = [b.text for b in entry.case.behaviours if not process_behaviour(b.text, skill_names)]
        by_text = {c.behaviour: c for c in checks.get(entry.case.key, [])}
        row = {"file": str(entry.path), "case": entry.case.key, "behaviours": []}
        for text in content:
            if text in by_text:
                passed, _ = run_check(by_text[text], entry.answer)
                check_pairs.append((entry.label(text), passed))
                row["behaviours"].append({"text": text, "label": entry.label(text), "check": passed})
        if judge is not None:
            try:
                async with gate:
                    judged = await judge.grade(entry.case.key, entry.case.prompt, entry.case.ground_truth, content, entry.answer)
            except JudgeError as failure:
                errors.append(f"{entry.path}: {failure}")
                return
            for text, verdict in zip(content, judged.behaviours):
                judge_pairs.append((entry.label(text), verdict.passed))
            correct_pairs.append((entry.correct, judged.correct.passed))
            row["judge"] = [v.passed for v in judged.behaviours]
        items.append(row)

    await asyncio.gather(*(one(entry) for entry in labelled))
    return {
        "answers": len(labelled),
        "good": sum(1 for e in labelled if e.good),
        "bad": sum(1 for e in labelled if not e.good),
        "judge": judge.describe() if judge else None,
        "checks": _score(check_pairs),
        "judge_behaviours": _score(judge_pairs) if judge else None,
        "judge_correct": _score(correct_pairs) if judge else None,
        "judge_errors": errors,
        "items": items,
    }
