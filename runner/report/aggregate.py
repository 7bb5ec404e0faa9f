"""The aggregate stage: grades -> the numbers of report.json (schema_version 2).

Unit of analysis: a case. Pass rates and uplift are over content behaviours only (what the
answer says); process behaviours (which skills were read) give activation figures for the
conditions that offer a skill tool, and routing, never a pass rate: a condition that offers
no skill could not pass them, so counting them would manufacture an uplift. A record counts
when its content is graded through (every content behaviour has a verdict), ran out of
turns or was cut off (failures); error, judge-error and ungraded records are left out of
every rate and mean, and counted in `coverage` (counted records over the records the run
asked for, for cases with a content behaviour) instead. A case's pass rate under a condition
is over its counted trials; a condition's rate is the mean over cases, its Wilson interval
counts each case once (trials of one case are not independent). Uplift compares conditions
case by case (paired), with a bootstrap interval over cases, undefined for fewer than two
cases or when every case differs by the same amount (a resample could not vary), and an
exact sign test on improved vs regressed cases. Beside them: each condition's mean with a
standard error clustered by case and, with more than one trial, the variance between and
within cases; each uplift's normal interval from the spread of the per-case differences, the
minimum detectable effect at the design's size (alpha 0.05, power 0.8), and across the
skills of a bundle Holm- and Benjamini-Hochberg-adjusted p-values."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

from .. import stats
from ..grade import GRADED, JUDGE_ERROR, PROCESS_ONLY, RECORD_ERROR, TRUNCATED, TURN_LIMIT, UNGRADED, RecordGrade

SCHEMA_VERSION = 3
ALPHA, POWER = 0.05, 0.8  # what the minimum detectable effect is computed at
BASE = "baseline"
NONE = "none"
OTHER = "a skill outside the bundle"


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return fmean(values) if values else None


def _total(values: list[float | None]) -> float | None:
    """A sum that is unknown when any part is."""
    return None if any(v is None for v in values) else sum(values)


def _means(counted: list[RecordGrade], ran: list[RecordGrade]) -> dict[str, Any]:
    """The per-record figures of a set of records: means over the counted ones, the cost
    total over every one that ran (it was paid for)."""
    return {
        "behaviour_rate": _mean([g.behaviour_rate for g in counted]),
        "routing": _mean([float(g.routing == "correct") for g in counted if g.routing is not None]),
        "tokens": _mean([g.tokens for g in counted]),
        "tokens_unknown": sum(1 for g in counted if g.tokens is None),
        "turns": _mean([g.turns for g in counted]),
        "cost_usd": _total([g.cost_usd for g in ran]),
        "cost_per_record": None if any(g.cost_usd is None for g in counted) else _mean([g.cost_usd for g in counted]),
    }


def _cell(cell: list[RecordGrade], expected: int) -> dict[str, Any]:
    counted = [g for g in cell if g.counted]
    n, c = len(counted), sum(1 for g in counted if g.passed)
    ks = sorted({1, n}) if n else []
    return {
        "expected": expected,
        "records": len(cell),
        "n": n,
        "passes": c,
        "pass_rate": c / n if n else None,
        "wilson": list(stats.wilson_interval(c, n)) if n else None,
        "pass_at_k": {str(k): stats.pass_at_k(n, c, k) for k in ks},
        "pass_hat_k": {str(k): stats.pass_hat_k(n, c, k) for k in ks},
        "coverage": n / expected if expected else None,
        "ungraded": sum(1 for g in cell if g.status == UNGRADED),
        "process_only": sum(1 for g in cell if g.status == PROCESS_ONLY),
        "errors": sum(1 for g in cell if g.status in (RECORD_ERROR, JUDGE_ERROR)),
        "missing": max(expected - len(cell), 0),
        "correct_rate": _mean([float(g.correct.verdict) for g in counted if g.correct and g.correct.verdict is not None]),
        **_means(counted, cell),
    }


def case_table(grades: list[RecordGrade], conditions: list[str], case_keys: list[str], trials: int, content_cases: set[str] | None = None) -> list[dict]:
    by_case: dict[str, dict[str, list[RecordGrade]]] = defaultdict(lambda: defaultdict(list))
    meta: dict[str, dict] = {}
    for key in case_keys:
        owner, _, case_id = key.partition("/")
        meta[key] = {"case": key, "owner": owner, "case_id": case_id, "expected_skill": None}
    for g in grades:
        by_case[g.case][g.condition].append(g)
        meta[g.case] = {"case": g.case, "owner": g.owner, "case_id": g.case_id, "expected_skill": g.expected_skill}
    rows = []
    for key in sorted(meta):
        content = content_cases is None or key in content_cases
        row = dict(meta[key], content=content, conditions={})
        for condition in conditions:
            # a case with no content behaviour asks for no counted record
            row["conditions"][condition] = _cell(by_case[key].get(condition, []), trials if content else 0)
        for condition in conditions:
            if condition == BASE:
                continue
            a, b = row["conditions"][condition]["pass_rate"], row["conditions"].get(BASE, {}).get("pass_rate")
            diff = None if a is None or b is None else a - b
            row.setdefault("uplift", {})[condition] = diff
            row.setdefault("change", {})[condition] = None if diff is None else "improved" if diff > 0 else "regressed" if diff < 0 else "unchanged"
        rows.append(row)
    return rows


def _interval(diffs: list[float]) -> str | None:
    """Why a bootstrap interval over these per-case differences would mean nothing."""
    if len(diffs) < 2:
        return f"{len(diffs)} case{'s' if len(diffs) != 1 else ''}: an interval needs at least two"
    if len(set(diffs)) == 1:
        return f"every case differs by {100 * diffs[0]:+.0f} pts: a resample cannot vary"
    return None


def _activation(cell: list[RecordGrade]) -> dict | None:
    """Process behaviours where a skill tool was offered: did the agent read the skill."""
    offered = [g for g in cell if g.routing is not None and g.process_passed is not None]  # records that did not run have no verdicts
    if not offered:
        return None
    passes = sum(1 for g in offered if g.process_passed)
    return {"records": len(offered), "passes": passes, "rate": passes / len(offered)}


def _design(pooled: list[RecordGrade], trials: int) -> dict:
    """A condition's record mean clustered by case, and where trials repeat a case, how its
    variance splits between and within cases."""
    by_case: dict[str, list[float]] = defaultdict(list)
    for g in pooled:
        by_case[g.case].append(float(g.passed))
    if not by_case:
        return {"clustered": None, "variance": None}
    c = stats.clustered_mean(list(by_case.values()))
    out = {"clustered": {"mean": c.mean, "se": c.se, "lo": c.lo, "hi": c.hi, "cases": c.cases, "records": c.records}, "variance": None}
    if trials > 1 and len(by_case) >= 2 and any(len(v) > 1 for v in by_case.values()):
        parts = stats.variance_components(list(by_case.values()))
        out["variance"] = {"between": parts.between, "within": parts.within, "trials": parts.trials, "advice": parts.advice}
    return out


def _paired_design(diffs: list[float]) -> dict:
    """The normal interval of the mean per-case difference (each case one cluster), its
    spread, and the smallest uplift this many cases would detect."""
    if len(diffs) < 2:
        return {"sd_difference": None, "se": None, "normal_lo": None, "normal_hi": None, "mde": None}
    c = stats.clustered_mean([[d] for d in diffs])
    sd = c.se * len(diffs) ** 0.5
    return {"sd_difference": sd, "se": c.se, "normal_lo": c.lo, "normal_hi": c.hi, "mde": stats.minimum_detectable_effect(sd, len(diffs), alpha=ALPHA, power=POWER)}


def _noise(grades: list[RecordGrade], conditions: list[str], chosen: set[str]) -> dict:
    """For each A/A arm (`baseline@2`), how often the same case and trial passed under one
    arm and failed under the other: the run's noise floor, beside every uplift."""
    out = {}
    for arm in conditions:
        of, sep, _ = arm.partition("@")
        if not sep or of not in conditions:
            continue
        outcome = {(g.case, g.condition, g.trial): g.passed for g in grades if g.case in chosen and g.counted and g.condition in (of, arm)}
        pairs = [(outcome[(case, of, trial)], outcome[(case, arm, trial)]) for (case, condition, trial) in outcome if condition == of and (case, arm, trial) in outcome]
        flips = sum(1 for a, b in pairs if a != b)
        out[arm] = {"of": of, "pairs": len(pairs), "flips": flips, "rate": flips / len(pairs) if pairs else None}
    return out


def summarise(rows: list[dict], grades: list[RecordGrade], conditions: list[str], *, resamples: int, seed: int, trials: int = 1) -> dict:
    out: dict = {"cases": len(rows), "content_cases": sum(1 for r in rows if r["content"]), "conditions": {}, "uplift": {}}
    chosen = {r["case"] for r in rows}
    for condition in conditions:
        cells = [r["conditions"][condition] for r in rows]
        cell = [g for g in grades if g.case in chosen and g.condition == condition]
        pooled = [g for g in cell if g.counted]
        c = sum(1 for g in pooled if g.passed)
        expected = sum(x["expected"] for x in cells)
        rates = [x["pass_rate"] for x in cells if x["pass_rate"] is not None]
        out["conditions"][condition] = {
            "pass_rate": _mean(rates),
            "cases_counted": len(rates),
            "records": len(pooled),
            "passes": c,
            "wilson": list(w) if (w := stats.wilson_over_clusters(rates)) else None,
            "expected": expected,
            "coverage": len(pooled) / expected if expected else None,
            "ungraded": sum(x["ungraded"] for x in cells),
            "process_only": sum(x["process_only"] for x in cells),
            "errors": sum(x["errors"] for x in cells),
            "missing": sum(x["missing"] for x in cells),
            "correct_rate": _mean([x["correct_rate"] for x in cells]),
            "activation": _activation(cell),
            **_means(pooled, cell),
            **_design(pooled, trials),
        }
    for condition in conditions:
        if condition == BASE or BASE not in conditions:
            continue
        diffs = [r["uplift"][condition] for r in rows if r["uplift"].get(condition) is not None]
        changes = [r["change"][condition] for r in rows if r["change"].get(condition)]
        improved, regressed = changes.count("improved"), changes.count("regressed")
        entry = {"cases": len(diffs), "improved": improved, "regressed": regressed, "unchanged": changes.count("unchanged"), "p_value": stats.sign_test(improved, regressed)}
        entry["mean"] = (sum(diffs) / len(diffs)) if diffs else None
        entry["undefined"] = _interval(diffs) if diffs else "no case counted under both conditions"
        entry["lo"] = entry["hi"] = None
        if entry["undefined"] is None:
            _, entry["lo"], entry["hi"] = stats.paired_bootstrap(diffs, resamples=resamples, seed=seed)
        entry.update(_paired_design(diffs))
        # the interval cannot tell the observed uplift from none, and these cases could
        # not detect an effect that size (gates judge the same against their threshold)
        entry["underpowered"] = entry["lo"] is not None and entry["lo"] <= 0 <= entry["hi"] and entry["mde"] is not None and entry["mde"] > abs(entry["mean"])
        a, b = out["conditions"][condition]["cost_per_record"], out["conditions"][BASE]["cost_per_record"]
        # what one point of uplift costs per record, on top of the baseline
        entry["cost_per_point"] = (a - b) / (100 * entry["mean"]) if entry["mean"] and entry["mean"] > 0 and a is not None and b is not None else None
        out["uplift"][condition] = entry
    out["noise"] = _noise(grades, conditions, chosen)
    out["placebo"] = _placebo(rows, conditions, resamples=resamples, seed=seed)
    return out


# (what is measured, condition, condition it is compared with)
PLACEBO_CONTRASTS = (
    ("content", "inline", "inline-placebo"),  # the skill's text against as much unrelated text
    ("context", "inline-placebo", BASE),  # as much unrelated text against none
    ("decoy", "placebo", "skills"),  # a decoy beside the real skills in the catalogue
)


def _placebo(rows: list[dict], conditions: list[str], *, resamples: int, seed: int) -> dict:
    """What the placebo arms separate: per case, the pass-rate difference between two
    conditions, with the same paired bootstrap as the uplift."""
    out = {}
    for name, a, b in PLACEBO_CONTRASTS:
        if a not in conditions or b not in conditions:
            continue
        diffs = [ra - rb for r in rows if (ra := r["conditions"][a]["pass_rate"]) is not None and (rb := r["conditions"][b]["pass_rate"]) is not None]
        entry = {"of": a, "against": b, "cases": len(diffs), "mean": sum(diffs) / len(diffs) if diffs else None, "lo": None, "hi": None}
        entry["undefined"] = _interval(diffs) if diffs else f"no case counted under both {a} and {b}"
        if entry["undefined"] is None:
            _, entry["lo"], entry["hi"] = stats.paired_bootstrap(diffs, resamples=resamples, seed=seed)
        out[name] = entry
    return out


def _adjust_across(groups: dict[str, dict]) -> None:
    """Per-skill p-values are many tests at once: each group's uplift gets its Holm
    (family-wise) and Benjamini-Hochberg (false discovery rate) adjusted p-value, over the
    groups that have that uplift."""
    conditions = sorted({c for g in groups.values() for c in g["uplift"]})
    for condition in conditions:
        named = [(name, g["uplift"][condition]) for name, g in groups.items() if condition in g["uplift"] and g["uplift"][condition]["cases"]]
        ps = [entry["p_value"] for _, entry in named]
        for (_, entry), holm, bh in zip(named, stats.holm(ps), stats.benjamini_hochberg(ps)):
            entry["p_holm"], entry["p_bh"], entry["tests"] = holm, bh, len(ps)


def routing(grades: list[RecordGrade], skill_names: list[str]) -> dict | None:
    pairs, outcomes = [], defaultdict(int)
    for g in grades:
        if g.routing is None or not g.counted:
            continue
        outcomes[g.routing] += 1
        expected = g.expected_skill or NONE
        # the first skill the model reached for is its routing decision; one outside the
        # bundle (the placebo's decoy) is a label of its own
        first = g.activated[0] if g.activated else NONE
        pairs.append((expected if expected in skill_names else NONE, first if first in skill_names or first == NONE else OTHER))
    if not pairs:
        return None
    labels = sorted(skill_names) + [NONE] + ([OTHER] if any(p[1] == OTHER for p in pairs) else [])
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
            entry = cells.setdefault(
                (g.case, b.index), {"case": g.case, "index": b.index, "text": b.text, "kind": b.kind, "source": set(), "results": defaultdict(list), "ungraded": 0, "unsupported": 0, "disagreements": 0}
            )
            if b.kind == "process" and g.routing is None:
                continue  # no skill tool offered: the behaviour could not happen here
            if b.verdict is not None:
                entry["results"][g.condition].append(b.verdict)
                entry["source"].add(b.source)
            else:
                entry["ungraded"] += 1
            entry["unsupported"] += int(b.unsupported)
            entry["disagreements"] += int(b.index in g.disagreements)
    rows = []
    for (case, index), entry in sorted(cells.items()):
        rates = {c: (sum(v) / len(v) if (v := entry["results"].get(c)) else None) for c in conditions}
        known = [r for r in rates.values() if r is not None]
        flag = None
        if len(known) == len(conditions) and len(conditions) > 1:
            flag = "always-passes" if all(r == 1 for r in known) else "never-passes" if all(r == 0 for r in known) else None
        rows.append(
            {"case": case, "index": index, "text": entry["text"], "kind": entry["kind"], "sources": sorted(entry["source"]), "rates": rates, "flag": flag,
             "ungraded": entry["ungraded"], "unsupported": entry["unsupported"], "disagreements": entry["disagreements"]}
        )
    return rows


def _judge_figures(grades: list[RecordGrade]) -> dict:
    yes = [b for g in grades for b in g.behaviours if b.judge]
    unsupported = [b for b in yes if b.unsupported]
    correct_yes = [g.correct for g in grades if g.correct and g.correct.judge]
    correct_unsupported = [c for c in correct_yes if not c.evidence_found]
    return {
        "yes": len(yes),
        "unsupported": len(unsupported),
        "unsupported_rate": len(unsupported) / len(yes) if yes else None,
        "correct_yes": len(correct_yes),
        "correct_unsupported": len(correct_unsupported),
    }


def build(run_info: dict, grades: list[RecordGrade], *, skill_names: list[str], judge: dict | None, fingerprint_now: str | None, checks_cases: int, completeness: dict, needs_judge: list[dict] | None = None,
          content_cases: list[str] | None = None, bundle_changes: list[str] | None = None, judge_trust: dict | None = None, resamples: int = 10000, seed: int = 0) -> dict:
    conditions = list(run_info["conditions"])
    trials = int(run_info["trials"])
    rows = case_table(grades, conditions, list(run_info.get("cases") or sorted({g.case for g in grades})), trials, None if content_cases is None else set(content_cases))
    groups = {}
    for owner in sorted({r["owner"] for r in rows}):
        groups[owner] = summarise([r for r in rows if r["owner"] == owner], grades, conditions, resamples=resamples, seed=seed, trials=trials)
    _adjust_across(groups)
    behaviours = behaviour_table(grades, conditions)
    errors: dict[str, int] = defaultdict(int)
    for g in grades:
        if g.status in (RECORD_ERROR, JUDGE_ERROR):
            errors[f"{g.status}:{g.error['kind']}"] += 1
    model = run_info["model"]
    graders = defaultdict(int)
    for g in grades:
        for b in g.behaviours:
            if b.index in g.disagreements:
                graders["judge says YES, check says NO" if b.judge else "judge says NO, check says YES"] += 1
    return {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "model": model,
            "conditions": conditions,
            "trials": trials,
            "records": len(grades),
            "bundle_fingerprint": run_info.get("bundle_fingerprint"),
            "bundle_changed_since_run": bool(bundle_changes) or (fingerprint_now is not None and fingerprint_now != run_info.get("bundle_fingerprint")),
            "bundle_changes": bundle_changes or [],
        },
        "completeness": completeness,
        "grading": {
            "judge": judge,
            "judge_is_model_under_test": bool(judge) and judge.get("provider") == model.get("provider") and judge.get("model") == model.get("model"),
            "cases_with_checks": checks_cases,
            "behaviours": sum(len(g.behaviours) for g in grades),
            "behaviours_graded": sum(1 for g in grades for b in g.behaviours if b.verdict is not None),
            "judge_verdicts": _judge_figures(grades) if judge else None,
            "judge_trust": judge_trust,
            "needs_judge": needs_judge or [],
            "bootstrap": {"resamples": resamples, "seed": seed, "confidence": 0.95},
        },
        "health": {
            "record_errors": sum(1 for g in grades if g.status == RECORD_ERROR),
            "judge_errors": sum(1 for g in grades if g.status == JUDGE_ERROR),
            "ungraded": sum(1 for g in grades if g.status == UNGRADED),
            "turn_limits": sum(1 for g in grades if g.status == TURN_LIMIT),
            "truncated": sum(1 for g in grades if g.status == TRUNCATED),
            "process_only": sum(1 for g in grades if g.status == PROCESS_ONLY),
            "says_nothing": sum(1 for g in grades if g.says_nothing and g.counted),
            "counted": sum(1 for g in grades if g.counted),
            "graded": sum(1 for g in grades if g.status == GRADED),
            "by_kind": dict(errors),
            "cases_wholly_ungraded": _wholly_ungraded(grades),
        },
        "overall": summarise(rows, grades, conditions, resamples=resamples, seed=seed, trials=trials),
        "groups": groups,
        "cases": rows,
        "routing": routing(grades, skill_names),
        "behaviours": behaviours,
        "unsupported": [
            {"key": g.key, "index": b.index, "text": b.text, "evidence": b.evidence, "problem": b.evidence_problem}
            for g in grades
            for b in g.behaviours
            if b.unsupported
        ],
        "disagreements": [
            {"key": g.key, "index": b.index, "text": b.text, "judge": b.judge, "check": b.check, "check_kind": b.check_kind, "check_why": b.check_why, "verdict": b.verdict, "source": b.source}
            for g in grades
            for b in g.behaviours
            if b.index in g.disagreements
        ],
        "disagreement_counts": dict(graders),
    }


def _wholly_ungraded(grades: list[RecordGrade]) -> list[str]:
    """Content cases where no record had one content behaviour decided: nothing graded them."""
    decided: dict[str, bool] = {}
    for g in grades:
        contents = [b for b in g.behaviours if b.kind == "content"]
        if contents:
            decided[g.case] = decided.get(g.case, False) or any(b.verdict is not None for b in contents)
    return sorted(case for case, any_decided in decided.items() if not any_decided)
