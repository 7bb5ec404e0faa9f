"""Judge calibration: grade hand-labelled answers (evals/calibration/) with the judge and
the deterministic checks, and measure both against the labels.

    evals/calibration/<owner>/<case id>.md         known-good: every behaviour passes, correct
    evals/calibration/<owner>/<case id>.bad-N.md   known-bad, frontmatter:
        fails: [exact behaviour texts the answer fails]
        correct: false
Process behaviours ("Read the X skill ...") are graded from transcripts, not text, so they
are not labelled here."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from . import stats
from .cases import Case
from .findings import LoadError, UsageError
from .grading.checks import Check
from .grading.judge import Judge, JudgeError
from .grading.transcript import process_behaviour
from .parsing import read_text, split_frontmatter


@dataclass
class Labelled:
    path: Path
    case: Case
    answer: str
    fails: set[str]
    correct: bool
    good: bool

    def label(self, text: str) -> bool:
        return text not in self.fails


def load_labelled(directory: Path, cases: list[Case]) -> list[Labelled]:
    out = []
    for case in cases:
        folder = directory / case.owner
        good = folder / f"{case.id}.md"
        if not good.is_file():
            continue
        for path in [good, *sorted(folder.glob(f"{case.id}.bad-*.md"))]:
            text = read_text(path)
            fails, correct, body = set(), True, text.strip()
            if text.startswith("---"):
                document = split_frontmatter(path, text)
                data, body = document.frontmatter.data, document.body.strip()
                if path != good:
                    raw = data.get("fails")
                    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
                        raise LoadError(path, document.frontmatter.line(("fails",)), "calibration/labels", "a bad answer needs 'fails': a list of the behaviour texts it fails")
                    known = {b.text for b in case.behaviours}
                    for n, item in enumerate(raw):
                        if item.strip() not in known:
                            raise LoadError(path, document.frontmatter.line(("fails", n)), "calibration/labels", f"{case.key} has no behaviour {item!r}")
                    fails = {item.strip() for item in raw}
                    if not isinstance(data.get("correct"), bool):
                        raise LoadError(path, document.frontmatter.line(("correct",)), "calibration/labels", "'correct' must be true or false")
                    correct = data["correct"]
                    if not fails and correct:
                        raise LoadError(path, document.frontmatter.line(), "calibration/labels", "a bad answer must fail a behaviour or be incorrect (correct: false)")
            elif path != good:
                raise LoadError(path, 1, "calibration/labels", "a bad answer needs frontmatter with 'fails' and 'correct'")
            out.append(Labelled(path, case, body, fails, correct, path == good))
    return out


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
                passed, _ = by_text[text].run(entry.answer)
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


def require_labels(directory: Path, cases: list[Case]) -> list[Labelled]:
    if not directory.is_dir():
        raise UsageError(f"{directory}: no calibration answers (expected <owner>/<case id>.md and .bad-N.md files)")
    try:
        labelled = load_labelled(directory, cases)
    except LoadError as error:
        raise UsageError(error.finding.format()) from None
    if not labelled:
        raise UsageError(f"{directory}: no calibration answer matches a case of the bundle")
    return labelled
