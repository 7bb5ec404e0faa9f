"""`mbskills show RUN`: a run's records as a table, or whole transcripts."""

from __future__ import annotations

import fnmatch
import json
import textwrap


def select_records(records: list[dict], *, pattern: str | None, condition: str | None, trial: int | None) -> list[dict]:
    out = records
    if pattern:
        out = [r for r in out if fnmatch.fnmatchcase(r["case"], pattern) or fnmatch.fnmatchcase(str(r["case_id"]), pattern)]
    if condition:
        out = [r for r in out if r["condition"] == condition]
    if trial is not None:
        out = [r for r in out if r["trial"] == trial]
    return sorted(out, key=lambda r: (r["case"], r["condition"], r["trial"]))


def records_table(info: dict, records: list[dict]) -> str:
    model = info.get("model", {})
    tokens_in = sum(r["usage"]["input_tokens"] for r in records)
    tokens_out = sum(r["usage"]["output_tokens"] for r in records)
    unknown = sum(1 for r in records if r["usage"].get("unreported"))
    costs = [r["cost_usd"] for r in records]
    cost = "unknown" if any(c is None for c in costs) else f"${sum(costs):.4f}"
    errors = sum(1 for r in records if r["status"] == "error")
    lines = [
        f"run: {_who(model)}  conditions {','.join(info.get('conditions', []))}  trials {info.get('trials')}",
        f"{len(records)} records, {errors} errors, {sum(1 for r in records if r['status'] == 'turn_limit')} out of turns, "
        + (f"{tokens_in} input + {tokens_out} output tokens" + (f" ({unknown} records with unknown usage)" if unknown else "") if unknown < len(records) else "tokens unknown")
        + f", cost {cost}",
    ]
    header = ("case", "condition", "trial", "status", "activated", "turns", "tokens in/out")
    rows = [
        (
            r["case"],
            r["condition"],
            str(r["trial"]),
            f"error:{r['error']['kind']}" if r["status"] == "error" else r["finish"],
            ",".join(r["activated_skills"]) or "-",
            str(len(r["turns"])),
            f"{r['usage']['input_tokens']}/{r['usage']['output_tokens']}",
        )
        for r in records
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    for row in (header, *rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)


def _block(text: str, indent: str = "    ") -> str:
    return textwrap.indent(text.rstrip() or "(empty)", indent)


def transcript(record: dict, *, full_tools: bool = False) -> str:
    model = record["model"]
    out = [
        f"=== {record['key']}  ({_who(model)}, {record['finish']}, {len(record['turns'])} turns, {record['usage']['input_tokens']}+{record['usage']['output_tokens']} tokens, {record['latency_s']:.2f} s)",
        f"expected skill: {record['expected_skill'] or 'none'}   activated: {', '.join(record['activated_skills']) or 'none'}   files read: {', '.join(record['files_read']) or 'none'}",
    ]
    if record["inlined_skill"]:
        out.append(f"inlined skill: {record['inlined_skill']}")
    if record["error"]:
        out.append(f"error: {record['error']['kind']}: {record['error']['message']}")
    out.append(f"--- system ({len(record['system'])} chars)")
    out.append(_block(record["system"] if full_tools else textwrap.shorten(record["system"], 300, placeholder=" ...")))
    for message in record["messages"]:
        role = message["role"]
        if role == "user":
            out += ["--- user", _block(message["content"])]
        elif role == "assistant":
            out.append("--- assistant")
            if message["content"]:
                out.append(_block(message["content"]))
            for call in message.get("tool_calls") or ():
                out.append(f"    -> {call['name']}({call['arguments']})")
        elif role == "tool":
            body = message["content"]
            if not full_tools and len(body) > 400:
                body = body[:400] + f"\n... ({len(message['content'])} chars; --full to see all)"
            out += [f"--- tool {message['name']}{' (error)' if message.get('is_error') else ''}", _block(body)]
    return "\n".join(out)


def records_json(records: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in records)


def _who(model: dict) -> str:
    """The model, and the agent client that ran it when one did."""
    name = f"{model.get('provider')}:{model.get('model')}"
    return f"{model['agent']} {model.get('agent_version', '?')} · {name}" if model.get("agent") else name
