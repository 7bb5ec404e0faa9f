"""`mbskills compare RUN...`: graded runs of the same cases side by side, one row per run
and condition (the API loop, each agent client), so that a reader sees where a client loses
what a skill gives on a plain API. Every figure is the run's own report's: a rate over no
counted record is shown as n/a with its coverage, never as 0 or 100%."""

from __future__ import annotations

from typing import Any

from ..core import UsageError


def run_label(info: dict) -> str:
    model = info["model"]
    who = f"{model['agent']} {model.get('agent_version', '?')}" if model.get("agent") else "api loop"
    return f"{who} · {model['provider']}:{model['model']}"


def comparison(runs: list[tuple[str, dict, dict]]) -> dict[str, Any]:
    """runs: (path, run.json, report) each; the rows of the table, and the runs."""
    cases = [sorted(info["cases"]) for _, info, _ in runs]
    for (path, _, _), keys in zip(runs[1:], cases[1:]):
        if keys != cases[0]:
            ours, theirs = set(cases[0]), set(keys)
            example = sorted(ours ^ theirs)[0]
            raise UsageError(f"{path}: holds other cases than {runs[0][0]} ({len(theirs)} cases there, {len(ours)} here; {example} is in one only); compare runs of the same cases")
    rows = []
    for path, info, report in runs:
        for condition, cell in report["overall"]["conditions"].items():
            rows.append({
                "run": path,
                "label": run_label(info),
                "agent": info["model"].get("agent") or "api",
                "condition": condition,
                "counted": cell["cases_counted"],
                "coverage": cell["coverage"],
                "pass_rate": cell["pass_rate"],
                "routing": cell["routing"],
                "tokens": cell["tokens"],
                "turns": cell["turns"],
                "cost_per_record": cell["cost_per_record"],
                "errors": cell["errors"],
            })
    return {"cases": len(cases[0]), "rows": rows}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def comparison_markdown(table: dict[str, Any]) -> str:
    lines = [
        f"# Comparison over {table['cases']} cases",
        "",
        "| run | condition | counted (coverage) | pass rate | skill read when offered | tokens / record | turns / record | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table["rows"]:
        lines.append(
            f"| {r['label']} | {r['condition']} | {r['counted']} ({_pct(r['coverage'])}) | {_pct(r['pass_rate'])} | {_pct(r['routing'])} | {_num(r['tokens'])} | {_num(r['turns'], 1)} | {r['errors']} |"
        )
    lines += ["", "Pass rates count graded records only (coverage says how many); n/a: nothing counted. Skill read when offered: records whose expected skill was read, where skills were installed or offered."]
    return "\n".join(lines) + "\n"
