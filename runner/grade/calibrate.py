"""Calibration: grade hand-labelled answers with the deterministic checks and the judge, and
measure each against the labels (runner/load/labelled.py reads them): per grader, per check
kind, and for the combining policy, so that a verdict decides only where it is shown
reliable. Process behaviours ("Read the X skill ...") are graded from transcripts, not
text, so they are not labelled."""

from __future__ import annotations

import asyncio

from .. import stats
from ..load import ADMIT_MIN_DECIDED, Check, Labelled, meets_bar
from .checks import CLEAR, KINDS, says_nothing
from .executed import EXEC_KINDS, Observe
from .extract import extract
from .fields import FIELD_KINDS
from .judge import Judge, JudgeError
from .policy import ADMIT_PRECISION, CHECK_DECIDES, DEFINITE_FAILS, SAYS, check_verdicts
from .records import run_grader
from .transcript import process_behaviour

GRADERS = ("check", "field", "execute")


def score(pairs: list[tuple[bool, bool]]) -> dict:
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


def _kind_score(rows: list[tuple[bool, str]]) -> dict:
    """Per kind: how often what it says (pass or fail; nothing for the weak field-missing
    and execute-ungraded) is the label."""
    out = {}
    for kind in KINDS + FIELD_KINDS + EXEC_KINDS:
        labels = [label for label, k in rows if k == kind]
        says = SAYS[kind]
        right = sum(1 for label in labels if label == says) if says is not None else 0
        out[kind] = {"items": len(labels), "right": right, "precision": right / len(labels) if labels and says is not None else None, "decides": CHECK_DECIDES[kind]}
    return out


def _grader_score(rows: list[tuple[str, bool, bool | None]]) -> dict:
    """Per grader (check, field, execute), over what the policy lets it decide: precision
    on pass (decided passes labelled pass) and on fail (decided fails labelled fail)."""
    out = {}
    for grader in GRADERS:
        mine = [(label, verdict) for g, label, verdict in rows if g == grader]
        passes = [label for label, verdict in mine if verdict is True]
        fails = [label for label, verdict in mine if verdict is False]
        out[grader] = {
            "items": len(mine), "decided": len(passes) + len(fails),
            "passes": len(passes), "pass_right": sum(passes), "pass_precision": sum(passes) / len(passes) if passes else None,
            "fails": len(fails), "fail_right": len(fails) - sum(fails), "fail_precision": (len(fails) - sum(fails)) / len(fails) if fails else None,
        }
        out[grader]["admissible"] = meets_bar(out[grader])
    return out


def _policy_score(rows: list[tuple[bool, bool | None]]) -> dict:
    """The checks as the policy lets them decide (no judge): (label, verdict) with None
    where they decide nothing (left ungraded)."""
    decided = [(label, verdict) for label, verdict in rows if verdict is not None]
    result = score(decided)
    result["ungraded"] = len(rows) - len(decided)
    result["coverage"] = len(decided) / len(rows) if rows else None
    return result


async def calibrate(labelled: list[Labelled], skill_names: list[str], checks: dict[str, list[Check]], judge: Judge | None, *, jobs: int = 8, observe: Observe | None = None) -> dict:
    check_pairs, kind_rows, policy_rows, grader_rows, content_rows, judge_pairs, supported_pairs, correct_pairs, combined_pairs, errors, items = [], [], [], [], [], [], [], [], [], [], []
    unsupported = 0
    gate = asyncio.Semaphore(jobs)

    async def one(entry: Labelled) -> None:
        nonlocal unsupported
        content = [b.text for b in entry.case.behaviours if not process_behaviour(b.text, skill_names)]
        by_text = {c.behaviour: c for c in checks.get(entry.case.key, [])}
        row = {"file": str(entry.path), "case": entry.case.key, "behaviours": []}
        outcomes: dict[str, tuple[str, str]] = {}  # text -> (grader, kind)
        facts = extract(entry.answer) if any(c.grader != "check" for c in by_text.values()) else None
        for text in content:
            if text in by_text:
                check = by_text[text]
                says, kind, why = await run_grader(check, entry.answer, facts, observe)
                outcomes[text] = (check.grader, kind)
                if says is not None:
                    check_pairs.append((entry.label(text), says))
                kind_rows.append((entry.label(text), kind))
                row["behaviours"].append({"text": text, "label": entry.label(text), "grader": check.grader, "check": says, "kind": kind, "why": why})
        checked = list(outcomes)
        decided = dict(zip(checked, check_verdicts([outcomes[t][1] for t in checked])))
        policy_rows.extend((entry.label(t), decided[t]) for t in checked)
        grader_rows.extend((outcomes[t][0], entry.label(t), decided[t]) for t in checked)
        nothing = says_nothing(entry.answer)
        # every content behaviour, graded or not: what a run without a judge decides
        content_rows.extend((entry.label(t), False if nothing else decided.get(t)) for t in content)
        if judge is not None:
            try:
                async with gate:
                    judged = await judge.grade(entry.case.key, entry.case.prompt, entry.case.ground_truth, content, entry.answer)
            except JudgeError as failure:
                errors.append(f"{entry.path}: {failure}")
                return
            for text, verdict in zip(content, judged.behaviours):
                judge_pairs.append((entry.label(text), verdict.passed))
                if verdict.passed and not verdict.evidence_found:
                    unsupported += 1
                else:
                    supported_pairs.append((entry.label(text), verdict.passed))
                kind = outcomes.get(text, (None, None))[1]
                if kind in DEFINITE_FAILS:
                    combined_pairs.append((entry.label(text), False))
                elif not verdict.passed or verdict.evidence_found:
                    combined_pairs.append((entry.label(text), verdict.passed))
                elif decided.get(text) is not None:
                    combined_pairs.append((entry.label(text), decided[text]))
            correct_pairs.append((entry.correct, judged.correct.passed))
            row["judge"] = [v.passed for v in judged.behaviours]
        items.append(row)

    await asyncio.gather(*(one(entry) for entry in labelled))
    result = {
        "answers": len(labelled),
        "good": sum(1 for e in labelled if e.good),
        "bad": sum(1 for e in labelled if not e.good),
        "judge": judge.describe() if judge else None,
        "checks": score(check_pairs),
        "check_kinds": _kind_score(kind_rows),
        "graders": _grader_score(grader_rows),
        "policy_checks_only": _policy_score(policy_rows),
        "content_without_judge": _policy_score(content_rows),
        "judge_behaviours": score(judge_pairs) if judge else None,
        "judge_supported": score(supported_pairs) if judge else None,
        "judge_unsupported": unsupported if judge else None,
        "policy_with_judge": score(combined_pairs) if judge else None,
        "judge_correct": score(correct_pairs) if judge else None,
        "judge_errors": errors,
        "items": items,
    }
    return result


def _agreement(name: str, result: dict | None) -> str:
    if not result or not result["items"]:
        return f"  {name:<24} no items"
    kappa = "n/a" if result["kappa"] is None else f"{result['kappa']:.3f}"
    extra = f", {result['ungraded']} left ungraded" if "ungraded" in result else ""
    return f"  {name:<24} {result['items']:>4} items  accuracy {100 * result['accuracy']:5.1f}%  kappa {kappa}  (false passes {result['fp']}, false fails {result['fn']}{extra})"


def calibration_lines(result: dict) -> list[str]:
    """What `mbskills calibrate` prints: each set, the held-out one first."""
    lines = []
    for entry in result["sets"]:
        lines.append(f"{entry['name']} set ({entry['path']}): {entry['answers']} labelled answers ({entry['good']} good, {entry['bad']} bad)")
        lines.append(_agreement("checks", entry["checks"]))
        for kind, figures in entry["check_kinds"].items():
            if figures["items"]:
                role = "decides" if figures["decides"] else "passes only beside a decided pass in the same answer" if kind == CLEAR else "weak: judge or ungraded"
                right = f"right {figures['right']:>4} ({100 * figures['precision']:5.1f}%)" if figures["precision"] is not None else "says nothing"
                lines.append(f"    {kind:<16} {figures['items']:>4} items, {right}  {role}")
        for grader, figures in entry.get("graders", {}).items():
            if figures["items"]:
                on_pass = f"{100 * figures['pass_precision']:5.1f}% of {figures['passes']}" if figures["passes"] else "n/a"
                on_fail = f"{100 * figures['fail_precision']:5.1f}% of {figures['fails']}" if figures["fails"] else "n/a"
                bar = "meets" if figures["admissible"] else "under"
                lines.append(f"  grader {grader:<8} {figures['items']:>4} items, {figures['decided']:>4} decided: precision on pass {on_pass}, on fail {on_fail} ({bar} the bar: {100 * ADMIT_PRECISION:.0f}% each way over {ADMIT_MIN_DECIDED}+ verdicts)")
        lines.append(_agreement("policy, checks only", entry["policy_checks_only"]))
        if entry.get("content_without_judge"):
            whole = entry["content_without_judge"]
            wrong = whole["fp"] + whole["fn"]
            share = f"{100 * wrong / whole['items']:.1f}%" if whole["items"] else "n/a"
            lines.append(f"  {'content, no judge':<24} {whole['items']:>4} of {whole['items'] + whole['ungraded']} content behaviours decided ({100 * (whole['coverage'] or 0):.1f}%), {wrong} wrong ({share}: false passes {whole['fp']}, false fails {whole['fn']})")
        if entry["judge"]:
            lines.append(_agreement("judge: behaviours", entry["judge_behaviours"]))
            lines.append(f"  {'judge: unsupported YES':<24} {entry['judge_unsupported']:>4} (quote not in the answer; they count for nothing)")
            lines.append(_agreement("policy, with judge", entry["policy_with_judge"]))
            lines.append(_agreement("judge: correctness", entry["judge_correct"]))
    return lines
