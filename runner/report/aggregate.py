"""The aggregate stage: grades -> the numbers of report.json (schema_version 1).

Unit of analysis: a case. A record passes when every graded verdict passes; a case's pass
rate under a condition is over its trials. Uplift compares conditions case by case (paired),
with a bootstrap interval over cases and an exact sign test on improved vs regressed
cases (McNemar's exact test when there is one trial)."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from .. import stats
from ..grade import GRADED, JUDGE_ERROR, RECORD_ERROR, RecordGrade

SCHEMA_VERSION = 1
BASE = "baseline"
NONE = "none"


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return fmean(values) if values else None


def case_table(grades: list[RecordGrade], conditions: list[str]) -> list[dict]:
    by_case: dict[str, dict[str, list[RecordGrade]]] = defaultdict(lambda: defaultdict(list))
    meta: dict[str, dict] = {}
    for g in grades:
        by_case[g.case][g.condition].append(g)
        meta[g.case] = {"case": g.case, "owner": g.owner, "case_id": g.case_id, "expected_skill": g.expected_skill}
    rows = []
    for key in sorted(by_case):
        row = dict(meta[key], conditions={})
        for condition in conditions:
            cell = by_case[key].get(condition, [])
            graded = [g for g in cell if g.passed is not None]
            n, c = len(graded), sum(1 for g in graded if g.passed)
            ks = sorted({1, n}) if n else []
            row["conditions"][condition] = {
                "records": len(cell),
                "n": n,
                "passes": c,
                "pass_rate": c / n if n else None,
                "wilson": list(stats.wilson_interval(c, n)) if n else None,
                "pass_at_k": {str(k): stats.pass_at_k(n, c, k) for k in ks},
                "pass_hat_k": {str(k): stats.pass_hat_k(n, c, k) for k in ks},
                "behaviour_rate": _mean([g.behaviour_rate for g in graded]),
                "correct_rate": _mean([float(g.correct.judge) for g in graded if g.correct]),
                "routing": _mean([float(g.routing in ("correct",)) for g in cell if g.routing is not None]),
                "tokens": _mean([g.tokens for g in cell]),
                "turns": _mean([g.turns for g in cell]),
                "errors": sum(1 for g in cell if g.status != GRADED),
            }
        for condition in conditions:
            if condition == BASE:
                continue
            a, b = row["conditions"][condition]["pass_rate"], row["conditions"].get(BASE, {}).get("pass_rate")
            diff = None if a is None or b is None else a - b
            row.setdefault("uplift", {})[condition] = diff
            row.setdefault("change", {})[condition] = None if diff is None else "improved" if diff > 0 else "regressed" if diff < 0 else "unchanged"
        rows.append(row)
    return rows


def summarise(rows: list[dict], grades: list[RecordGrade], conditions: list[str], *, resamples: int, seed: int) -> dict:
    out: dict = {"cases": len(rows), "conditions": {}, "uplift": {}}
    chosen = {r["case"] for r in rows}
    for condition in conditions:
        cells = [r["conditions"][condition] for r in rows]
        pooled = [g for g in grades if g.case in chosen and g.condition == condition and g.passed is not None]
        c = sum(1 for g in pooled if g.passed)
        out["conditions"][condition] = {
            "pass_rate": _mean([x["pass_rate"] for x in cells]),
            "records": len(pooled),
            "passes": c,
            "wilson": list(stats.wilson_interval(c, len(pooled))) if pooled else None,
            "behaviour_rate": _mean([x["behaviour_rate"] for x in cells]),
            "correct_rate": _mean([x["correct_rate"] for x in cells]),
            "routing": _mean([x["routing"] for x in cells]),
            "tokens": _mean([x["tokens"] for x in cells]),
            "turns": _mean([x["turns"] for x in cells]),
        }
    for condition in conditions:
        if condition == BASE or BASE not in conditions:
            continue
        diffs = [r["uplift"][condition] for r in rows if r["uplift"].get(condition) is not None]
        changes = [r["change"][condition] for r in rows if r["change"].get(condition)]
        improved, regressed = changes.count("improved"), changes.count("regressed")
        entry = {"cases": len(diffs), "improved": improved, "regressed": regressed, "unchanged": changes.count("unchanged"), "p_value": stats.sign_test(improved, regressed)}
        if diffs:
            mean, lo, hi = stats.paired_bootstrap(diffs, resamples=resamples, seed=seed)
            entry.update(mean=mean, lo=lo, hi=hi)
        else:
            entry.update(mean=None, lo=None, hi=None)
        out["uplift"][condition] = entry
    return out


def routing(grades: list[RecordGrade], skill_names: list[str]) -> dict | None:
    pairs, outcomes = [], defaultdict(int)
    for g in grades:
        if g.routing is None or g.status == RECORD_ERROR:
            continue
        outcomes[g.routing] += 1
        expected = g.expected_skill or NONE
        # the first skill the model reached for is its routing decision
        pairs.append((expected if expected in skill_names else NONE, g.activated[0] if g.activated else NONE))
    if not pairs:
        return None
    labels = sorted(skill_names) + [NONE]
    matrix = stats.confusion_matrix(pairs, labels)
    per = {}
    for label in labels:
        precision, recall = stats.precision_recall(matrix, label)
        per[label] = {"precision": precision, "recall": recall}
    accuracy = sum(matrix[label][label] for label in labels) / len(pairs)
    return {"labels": labels, "matrix": matrix, "per_label": per, "accuracy": accuracy, "records": len(pairs), "outcomes": dict(outcomes)}


def behaviour_table(grades: list[RecordGrade], conditions: list[str]) -> list[dict]:
    cells: dict[tuple, dict] = {}
    for g in grades:
        for b in g.behaviours:
            entry = cells.setdefault((g.case, b.index), {"case": g.case, "index": b.index, "text": b.text, "kind": b.kind, "source": set(), "results": defaultdict(list)})
            if b.verdict is not None:
                entry["results"][g.condition].append(b.verdict)
                entry["source"].add(b.source)
    rows = []
    for (case, index), entry in sorted(cells.items()):
        rates = {c: (sum(v) / len(v) if (v := entry["results"].get(c)) else None) for c in conditions}
        known = [r for r in rates.values() if r is not None]
        flag = None
        if len(known) == len(conditions) and len(conditions) > 1:
            flag = "always-passes" if all(r == 1 for r in known) else "never-passes" if all(r == 0 for r in known) else None
        rows.append({"case": case, "index": index, "text": entry["text"], "kind": entry["kind"], "sources": sorted(entry["source"]), "rates": rates, "flag": flag})
    return rows


def build(run_info: dict, grades: list[RecordGrade], *, skill_names: list[str], judge: dict | None, fingerprint_now: str | None, checks_cases: int, resamples: int = 10000, seed: int = 0) -> dict:
    conditions = list(run_info["conditions"])
    rows = case_table(grades, conditions)
    groups = {}
    for owner in sorted({r["owner"] for r in rows}):
        groups[owner] = summarise([r for r in rows if r["owner"] == owner], grades, conditions, resamples=resamples, seed=seed)
    behaviours = behaviour_table(grades, conditions)
    errors: dict[str, int] = defaultdict(int)
    for g in grades:
        if g.status != GRADED:
            errors[f"{g.status}:{g.error['kind']}"] += 1
    model = run_info["model"]
    return {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "model": model,
            "conditions": conditions,
            "trials": run_info["trials"],
            "records": len(grades),
            "bundle_fingerprint": run_info.get("bundle_fingerprint"),
            "bundle_changed_since_run": fingerprint_now is not None and fingerprint_now != run_info.get("bundle_fingerprint"),
        },
        "grading": {
            "judge": judge,
            "judge_is_model_under_test": bool(judge) and judge.get("provider") == model.get("provider") and judge.get("model") == model.get("model"),
            "cases_with_checks": checks_cases,
            "behaviours": sum(len(g.behaviours) for g in grades),
            "behaviours_graded": sum(1 for g in grades for b in g.behaviours if b.verdict is not None),
            "bootstrap": {"resamples": resamples, "seed": seed, "confidence": 0.95},
        },
        "health": {
            "record_errors": sum(1 for g in grades if g.status == RECORD_ERROR),
            "judge_errors": sum(1 for g in grades if g.status == JUDGE_ERROR),
            "by_kind": dict(errors),
        },
        "overall": summarise(rows, grades, conditions, resamples=resamples, seed=seed),
        "groups": groups,
        "cases": rows,
        "routing": routing(grades, skill_names),
        "behaviours": behaviours,
        "disagreements": [
            {"key": g.key, "index": b.index, "text": b.text, "judge": b.judge, "check": b.check, "check_why": b.check_why}
            for g in grades
            for b in g.behaviours
            if b.index in g.disagreements
        ],
    }
