"""The report files (report.json, BENCHMARK.md, report.html, junit.xml, and grades.jsonl)
in the run directory, and the CI gates."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ..core import write_all_atomic
from ..grade import JUDGE_ERROR, PROCESS_ONLY, RECORD_ERROR, TRUNCATED, TURN_LIMIT, UNGRADED, RecordGrade
from .aggregate import BASE

DIMENSIONS = (
    ("pass_rate", "pass rate (every content verdict passes)", "rate"),
    ("coverage", "coverage (records counted / asked for)", "rate"),
    ("behaviour_rate", "behaviours passed", "rate"),
    ("correct_rate", "correct vs ground truth (judge)", "rate"),
    ("routing", "routing: expected skill only", "rate"),
    ("tokens", "tokens per record", "number"),
    ("turns", "model turns per record", "number"),
    ("cost_per_record", "cost per record, USD", "usd"),
    ("cost_usd", "cost of the records, USD", "usd"),
)


def _fmt(value, kind: str = "rate") -> str:
    if value is None:
        return "n/a" if kind == "rate" else "unknown"
    if kind == "rate":
        return f"{100 * value:.0f}%"
    if kind == "usd":
        return f"${value:.4f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _uplift(entry: dict | None) -> str:
    if not entry or entry["mean"] is None:
        return "n/a"
    interval = f"interval undefined: {entry['undefined']}" if entry["undefined"] else f"[{100 * entry['lo']:+.0f}, {100 * entry['hi']:+.0f}]"
    holm = f", Holm p={entry['p_holm']:.3g} over {entry['tests']} skills" if entry.get("tests", 0) > 1 else ""
    mde = f"; detects {100 * entry['mde']:.0f} pts or more" if entry.get("mde") is not None else ""
    if entry.get("underpowered"):
        mde += ": underpowered"
    return f"{100 * entry['mean']:+.0f} pts {interval} (+{entry['improved']}/-{entry['regressed']}, p={entry['p_value']:.3g}{holm}){mde}"


def _design_lines(summary: dict, conditions: list[str]) -> list[str]:
    """Each condition's clustered interval and, with repeated trials, where its noise lies."""
    lines = []
    for c in conditions:
        cell = summary["conditions"][c]
        clustered, variance = cell.get("clustered"), cell.get("variance")
        if clustered and clustered["se"] is not None:
            line = f"- {c}: record pass rate {100 * clustered['mean']:.0f}% with a case-clustered 95% interval [{100 * clustered['lo']:.0f}, {100 * clustered['hi']:.0f}] ({clustered['records']} records, {clustered['cases']} cases)"
            if variance:
                line += f"; variance between cases {variance['between']:.3f}, within {variance['within']:.3f}: {variance['advice']}"
            lines.append(line)
    return lines


def _group_table(summary: dict, conditions: list[str]) -> list[str]:
    uplifts = [c for c in conditions if c != BASE and c in summary["uplift"]]
    head = ["dimension", *conditions, *(f"{c} - {BASE}" for c in uplifts)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, kind in DIMENSIONS:
        cells = [_fmt(summary["conditions"][c][key], kind) for c in conditions]
        diffs = []
        for c in uplifts:
            a, b = summary["conditions"][c][key], summary["conditions"][BASE][key]
            if key == "pass_rate":
                diffs.append(_uplift(summary["uplift"][c]))
            elif key == "cost_per_record":
                per_point = summary["uplift"][c]["cost_per_point"]
                diffs.append("unknown" if a is None or b is None else f"{a - b:+.4f}" + (f" (${per_point:.5f} per point of uplift)" if per_point is not None else ""))
            elif a is None or b is None:
                diffs.append("n/a")
            else:
                diffs.append(f"{100 * (a - b):+.0f} pts" if kind == "rate" else f"{a - b:+.4f}" if kind == "usd" else f"{a - b:+,.0f}")
        lines.append("| " + " | ".join([label, *cells, *diffs]) + " |")
    wilson = [summary["conditions"][c]["wilson"] for c in conditions]
    lines.append("| pass rate, Wilson 95% over cases | " + " | ".join(
        f"{summary['conditions'][c]['cases_counted']} cases [{100 * w[0]:.0f}, {100 * w[1]:.0f}]" if w else f"{summary['conditions'][c]['cases_counted']} cases, undefined" for c, w in zip(conditions, wilson)
    ) + " |" + " |" * len(uplifts))
    lines.append("| records passing | " + " | ".join(f"{summary['conditions'][c]['passes']}/{summary['conditions'][c]['records']}" for c in conditions) + " |" + " |" * len(uplifts))
    lines.append("| activation: process behaviours pass (skill tool offered) | " + " | ".join(
        f"{a['passes']}/{a['records']} ({100 * a['rate']:.0f}%)" if (a := summary["conditions"][c]["activation"]) else "no skill tool" for c in conditions
    ) + " |" + " |" * len(uplifts))
    lines.append("| left out: ungraded / errors / missing | " + " | ".join(
        f"{summary['conditions'][c]['ungraded']} / {summary['conditions'][c]['errors']} / {summary['conditions'][c]['missing']}" for c in conditions
    ) + " |" + " |" * len(uplifts))
    return lines


def banner(report: dict) -> list[str]:
    """What every report says first: a bundle that changed since the run, how complete the
    run and its grading are."""
    done, health = report["completeness"], report["health"]
    lines = []
    changes = report["run"]["bundle_changes"]
    if changes:
        lines.append(f"graded with a bundle that changed since the run (--allow-changed-bundle): {'; '.join(changes[:5])}{' ...' if len(changes) > 5 else ''}")
    if not done["complete"]:
        state = ", an eval is still writing it" if done["in_progress"] else ""
        lines.append(f"incomplete: {done['finished']} of {done['expected']} records ({done['missing']} missing, {done['errors']} ended in an error{state})")
    left = [f"{health['ungraded']} ungraded", f"{health['record_errors']} that did not run", f"{health['judge_errors']} the judge could not grade"]
    lines.append(
        f"{health['counted']} of {report['run']['records']} records count in the rates ({health['turn_limits']} ran out of turns, {health['truncated']} were cut off by the output limit, "
        f"{health['says_nothing']} said nothing: failures); left out of every rate and mean: {', '.join(left)}, {health['process_only']} from cases with no content behaviour (routing only)"
    )
    judge = report["grading"]["judge_verdicts"]
    if judge and judge["unsupported"]:
        lines.append(f"the judge's YES was unsupported (its quote is not in the answer, or shows nothing) {judge['unsupported']} times of {judge['yes']} ({100 * judge['unsupported_rate']:.0f}%); those verdicts count for nothing")
    return lines


def benchmark_md(report: dict) -> str:
    run, grading, conditions = report["run"], report["grading"], report["run"]["conditions"]
    model = run["model"]
    judge = grading["judge"]
    lines = [f"# Benchmark: {model['provider']}:{model['model']}", ""]
    loud = (1 if report["run"]["bundle_changes"] else 0) + (0 if report["completeness"]["complete"] else 1)
    lines += [f"> **{line[0].upper() + line[1:]}.**" if i < loud else f"> {line}." for i, line in enumerate(banner(report))]
    lines += [
        "",
        f"{run['records']} records: {len(report['cases'])} cases x {len(conditions)} conditions ({', '.join(conditions)}) x {run['trials']} trials. "
        f"Graded by: transcript, deterministic checks ({grading['cases_with_checks']} of the run's cases have them)"
        + (f", judge {judge['provider']}:{judge['model']}" if judge else ", no judge")
        + f"; {grading['behaviours_graded']} of {grading['behaviours']} behaviour verdicts graded.",
        "",
    ]
    if grading["judge_is_model_under_test"]:
        lines += ["> **Warning:** the judge is the model under test; its verdicts may favour its own answers.", ""]
    if run["bundle_changed_since_run"]:
        lines += ["> **Warning:** the bundle changed since this run; grades use the current eval files.", ""]
    lines += ["Pass rates and uplift count content behaviours only (what the answer says); reading a skill is reported as activation, where a skill tool was offered, and in routing. "
              "Uplift is in percentage points of case pass rate, with a paired bootstrap 95% interval over cases (undefined for fewer than two cases or a constant difference), cases improved/regressed, and an exact sign test. "
              "Cost per point of uplift is the extra cost per record over the baseline divided by the points gained.", ""]
    verdict = report.get("gates") or {}
    if verdict.get("given"):
        lines += [f"**Gates: {verdict['state']}.**" + ("" if not verdict["failed"] else " " + "; ".join(verdict["failed"])), ""]
    lines += ["## Overall", "", *_group_table(report["overall"], conditions), ""]
    design = _design_lines(report["overall"], conditions)
    for arm, noise in report["overall"].get("noise", {}).items():
        share = "n/a" if noise["rate"] is None else f"{100 * noise['rate']:.0f}%"
        design.append(f"- A/A arm {arm}: {noise['flips']} of {noise['pairs']} records ({share}) passed under one of {noise['of']} and {arm} and failed under the other, same case and trial: the noise floor of an uplift")
    for name, entry in report["overall"].get("placebo", {}).items():
        shown = "n/a" if entry["mean"] is None else f"{100 * entry['mean']:+.0f} pts " + (f"(interval undefined: {entry['undefined']})" if entry["undefined"] else f"[{100 * entry['lo']:+.0f}, {100 * entry['hi']:+.0f}]")
        design.append(f"- {name}: {entry['of']} - {entry['against']} {shown} over {entry['cases']} cases")
    if design:
        lines += ["Clustered by case (each case's trials are one unit, not independent records); an uplift's minimum detectable effect is at alpha 0.05 and power 0.8 (`mbskills plan` sizes the next run):", "", *design, ""]
    for owner, summary in report["groups"].items():
        lines += [f"## {owner} ({summary['cases']} cases)", "", *_group_table(summary, conditions), ""]
    routing = report["routing"]
    if routing:
        labels = routing["labels"]
        lines += ["## Routing (skills condition)", "", f"Accuracy {_fmt(routing['accuracy'])} over {routing['records']} counted records. Rows: expected skill; columns: first skill activated.", ""]
        lines += ["| expected \\ activated | " + " | ".join(labels) + " | recall |", "|" + "---|" * (len(labels) + 2)]
        for label in labels:
            lines.append(f"| {label} | " + " | ".join(str(routing["matrix"][label][other]) for other in labels) + f" | {_fmt(routing['per_label'][label]['recall'])} |")
        lines.append("| precision | " + " | ".join(_fmt(routing["per_label"][label]["precision"]) for label in labels) + " | |")
        lines.append("")
    changed = [(r["case"], c, ch) for r in report["cases"] for c, ch in (r.get("change") or {}).items() if ch in ("improved", "regressed")]
    if changed:
        lines += ["## Cases that changed", "", "| case | condition | change | baseline | condition |", "|---|---|---|---|---|"]
        for case, condition, change in changed:
            row = next(r for r in report["cases"] if r["case"] == case)
            lines.append(f"| {case} | {condition} | {change} | {_fmt(row['conditions'][BASE]['pass_rate'])} | {_fmt(row['conditions'][condition]['pass_rate'])} |")
        lines.append("")
    if grading["needs_judge"]:
        lines += ["## Behaviours that need a judge", "", "No deterministic check covers these; without `--judge` they stay ungraded, and so do their records.", ""]
        lines += [f"- `{b['case']}` #{b['index'] + 1}: {b['text']}" for b in grading["needs_judge"]]
        lines.append("")
    ungraded = [b for b in report["behaviours"] if b["ungraded"]]
    if ungraded:
        lines += ["## Ungraded behaviours", "", "No grader shown reliable settled these (a check that found nothing is weak evidence; a judge YES without its quote counts for nothing).", ""]
        lines += [f"- `{b['case']}` #{b['index'] + 1} ({b['ungraded']} records): {b['text']}" for b in ungraded]
        lines.append("")
    flagged = [b for b in report["behaviours"] if b["flag"]]
    if flagged:
        lines += ["## Behaviours that do not discriminate", "", "These pass (or fail) under every condition, so they do not measure the skill.", ""]
        lines += [f"- `{b['case']}` #{b['index'] + 1} ({b['flag']}): {b['text']}" for b in flagged]
        lines.append("")
    if report["unsupported"]:
        lines += ["## Unsupported judge verdicts", ""]
        lines += [f"- `{u['key']}` #{u['index'] + 1}: {u['text']} (quote {u['evidence'][:80]!r}: {u['problem']})" for u in report["unsupported"]]
        lines.append("")
    if report["disagreements"]:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report["disagreement_counts"].items()))
        lines += ["## Judge and checks disagree", "", f"{len(report['disagreements'])} verdicts ({counts}).", ""]
        lines += [f"- `{d['key']}` #{d['index'] + 1}: judge {'YES' if d['judge'] else 'NO'}, check {'YES' if d['check'] else 'NO'} ({d['check_kind']}: {d['check_why']}); verdict {d['verdict']} from {d['source']}: {d['text']}" for d in report["disagreements"]]
        lines.append("")
    return "\n".join(lines)


# Characters XML 1.0 cannot hold even as a reference: written as a visible \\xNN escape.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100 else f"\\u{ord(m.group(0)):04x}", text)


def junit_xml(report: dict, grades: list[RecordGrade], *, gated: bool = False) -> str:
    """One test per case x condition. Ungraded trials are `skipped` for a look at the
    numbers, but failures when a gate was given (`gated`): a CI reading JUnit must not pass
    what nobody graded."""
    suites = ET.Element("testsuites", name="mbskills eval")
    changes = report["run"]["bundle_changes"]
    if changes:  # graded with --allow-changed-bundle: said first, as in every report
        suite = ET.SubElement(suites, "testsuite", name="bundle", tests="1", failures="0", errors="0", skipped="1")
        ET.SubElement(ET.SubElement(suite, "testcase", classname="run", name="bundle-changed"), "skipped", message=banner(report)[0])
    done = report["completeness"]
    if not done["complete"]:
        suite = ET.SubElement(suites, "testsuite", name="run", tests="1", failures="0", errors="1")
        test = ET.SubElement(suite, "testcase", classname="run", name="completeness")
        ET.SubElement(test, "error", message=banner(report)[0])
    by_condition: dict[str, list[RecordGrade]] = {}
    for g in grades:
        by_condition.setdefault(g.condition, []).append(g)
    for condition in report["run"]["conditions"]:
        cell = by_condition.get(condition, [])
        per_case: dict[str, list[RecordGrade]] = {}
        for g in cell:
            per_case.setdefault(g.case, []).append(g)
        suite = ET.SubElement(suites, "testsuite", name=condition, tests=str(len(per_case)))
        failures = errors = skipped = 0
        for case in sorted(per_case):
            trials = sorted(per_case[case], key=lambda g: g.trial)
            test = ET.SubElement(suite, "testcase", classname=f"{condition}.{trials[0].owner}", name=str(trials[0].case_id))
            broken = [g for g in trials if g.status in (RECORD_ERROR, JUDGE_ERROR)]
            failed = [g for g in trials if g.passed is False]
            ungraded = [g for g in trials if g.status == UNGRADED]
            if all(g.status == PROCESS_ONLY for g in trials):
                ET.SubElement(test, "skipped", message="no content behaviour: this case counts in routing and activation only")
                skipped += 1
                continue
            if broken:
                errors += 1
                ET.SubElement(test, "error", message=f"{len(broken)} of {len(trials)} trials not graded: " + "; ".join(f"{g.error['kind']}: {g.error['message']}" for g in broken)[:500])
            elif failed:
                failures += 1
                detail = []
                for g in failed:
                    if g.status in (TURN_LIMIT, TRUNCATED):
                        missed = ["ran out of turns without an answer" if g.status == TURN_LIMIT else "the output limit cut the answer off"]
                    elif g.says_nothing:
                        missed = [g.says_nothing]
                    else:
                        missed = [f"#{b.index + 1} {b.text}" for b in g.behaviours if b.verdict is False and b.kind != "process"]
                    if g.correct and g.correct.verdict is False:
                        missed.append("answer incorrect vs ground truth")
                    detail.append(f"trial {g.trial}: " + "; ".join(missed))
                node = ET.SubElement(test, "failure", message=f"{len(failed)} of {len(trials)} trials failed")
                node.text = "\n".join(detail)
            elif ungraded:
                open_items = sorted({f"#{b.index + 1}" for g in ungraded for b in g.ungraded})
                message = f"{len(ungraded)} of {len(trials)} trials ungraded (behaviours {', '.join(open_items) or 'correctness'} have no reliable verdict; a judge can settle them)"
                if gated:
                    failures += 1
                    ET.SubElement(test, "failure", message=f"not graded, and a gate was given: {message}")
                else:
                    skipped += 1
                    ET.SubElement(test, "skipped", message=message)
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped))
    ET.indent(suites)
    return _xml_safe(ET.tostring(suites, encoding="unicode", xml_declaration=True)) + "\n"


def gates(report: dict, *, fail_under_uplift: float | None, fail_under_pass: float | None, fail_on_regression: bool, min_coverage: float | None = None, min_cases: int = 0, condition: str = "skills") -> list[str]:
    """The gate failures, each one line; empty when every gate holds. `min_coverage` holds
    for every condition of the run: a rate over too few counted records proves nothing; a
    rate or uplift over fewer than `min_cases` cases is `underpowered`, and so is an uplift
    whose interval includes 0 when the smallest effect its cases could detect exceeds the
    gate; an uplift whose interval is undefined fails; verdicts of a judge nobody calibrated decide no gate."""
    failed = []
    overall = report["overall"]
    trust = report["grading"]["judge_trust"]
    if report["grading"]["judge"] and (fail_under_uplift is not None or fail_under_pass is not None or fail_on_regression) and not (trust and trust["ok"]):
        failed.append(trust["line"] if trust else "the judge has no calibration for this bundle; run `mbskills calibrate --judge MODEL --out FILE` and pass --calibration FILE")
    if min_coverage is not None:
        for name, cell in overall["conditions"].items():
            coverage = cell["coverage"]
            if coverage is None or coverage < min_coverage:
                shown = "n/a" if coverage is None else f"{coverage:.3f}"
                failed.append(f"coverage under {name} {shown} < {min_coverage:.3f} ({cell['records']} of {cell['expected']} records counted; {cell['ungraded']} ungraded, {cell['errors']} errors, {cell['missing']} missing)")
    if fail_under_uplift is not None:
        uplift = overall["uplift"].get(condition)
        if not uplift or uplift["mean"] is None:
            failed.append(f"--fail-under-uplift: no {condition} vs baseline uplift in this run")
        elif uplift["cases"] < min_cases:
            failed.append(f"underpowered: uplift {condition} - baseline over {uplift['cases']} cases < --min-cases {min_cases}")
        elif uplift["undefined"]:
            failed.append(f"uplift {condition} - baseline {uplift['mean']:+.3f} has no interval ({uplift['undefined']}), so it is no evidence of an uplift")
        elif uplift["mean"] < fail_under_uplift:
            failed.append(f"uplift {condition} - baseline {uplift['mean']:+.3f} < {fail_under_uplift:+.3f}")
        elif uplift["lo"] <= 0 <= uplift["hi"] and uplift.get("mde") is not None and uplift["mde"] > fail_under_uplift:
            failed.append(
                f"underpowered: uplift {condition} - baseline {uplift['mean']:+.3f}, interval [{uplift['lo']:+.3f}, {uplift['hi']:+.3f}] includes 0,"
                f" and {uplift['cases']} cases detect only {uplift['mde']:+.3f} or more (alpha 0.05, power 0.8) > the gate {fail_under_uplift:+.3f}; size the eval with `mbskills plan`"
            )
    if fail_under_pass is not None:
        cell = overall["conditions"].get(condition)
        rate = cell["pass_rate"] if cell else None
        if cell and rate is not None and cell["cases_counted"] < min_cases:
            failed.append(f"underpowered: pass rate under {condition} over {cell['cases_counted']} cases < --min-cases {min_cases}")
        elif rate is None or rate < fail_under_pass:
            failed.append(f"pass rate under {condition} {'n/a' if rate is None else f'{rate:.3f}'} < {fail_under_pass:.3f}")
    if fail_on_regression:
        regressed = [r["case"] for r in report["cases"] if (r.get("change") or {}).get(condition) == "regressed"]
        if regressed:
            failed.append(f"{len(regressed)} cases regressed under {condition}: {', '.join(regressed[:5])}{' ...' if len(regressed) > 5 else ''}")
        if condition not in overall["conditions"] or "baseline" not in overall["conditions"]:
            failed.append(f"--fail-on-regression: the run has no {condition} and baseline conditions to compare")
    return failed


def write_all(out: Path, report: dict, grades: list[RecordGrade], *, gated: bool = False) -> list[Path]:
    from .html import render

    paths = {
        "grades.jsonl": "".join(json.dumps(g.to_dict()) + "\n" for g in grades),
        "report.json": json.dumps(report, indent=2) + "\n",
        "BENCHMARK.md": benchmark_md(report),
        "report.html": render(report),
        "junit.xml": junit_xml(report, grades, gated=gated),
    }
    # staged together: a full disk leaves the previous reports whole, never a mix
    write_all_atomic({out / name: text for name, text in paths.items()})
    return [out / name for name in paths]
