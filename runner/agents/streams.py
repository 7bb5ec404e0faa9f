"""Reading each client's JSON event stream (its headless `--json` / `stream-json` output)
into one transcript: the text it wrote, the tool calls it made with their results, the
final answer, and the tokens and cost the client reported.

Every line is data from a program under test: a line that is not JSON, or an event of a
shape this version does not know, is skipped and counted, never trusted further."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Call:
    id: str
    name: str
    arguments: dict
    result: str | None = None
    is_error: bool = False
    refused: bool = False  # the client would not run it (not offered, denied, sandboxed)


@dataclass
class Transcript:
    steps: list = field(default_factory=list)  # str (text the model wrote) or Call, in order
    answer: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int = 0
    turns: list[dict] = field(default_factory=list)  # one per model reply the stream shows
    tools: list[str] = field(default_factory=list)  # offered, where the client lists them
    version: str | None = None
    reported_cost_usd: float | None = None
    usage_by_model: dict = field(default_factory=dict)
    failed: str | None = None  # the client said the session failed
    skipped_lines: int = 0

    @property
    def calls(self) -> list[Call]:
        return [s for s in self.steps if isinstance(s, Call)]

    def call(self, call_id: str) -> Call | None:
        return next((c for c in self.calls if c.id == call_id), None)


def _events(stdout: str, transcript: Transcript):
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            transcript.skipped_lines += 1
            continue
        if isinstance(event, dict):
            yield event
        else:
            transcript.skipped_lines += 1


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(part.get("text", "")) if isinstance(part, dict) else "" for part in content)
    return ""


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _args(value) -> dict:
    return value if isinstance(value, dict) else {}


def codex(stdout: str) -> Transcript:
    """`codex exec --json`: items (command_execution, agent_message) and turn.completed usage."""
    t = Transcript()
    for e in _events(stdout, t):
        kind, item = e.get("type"), e.get("item") if isinstance(e.get("item"), dict) else {}
        if kind == "item.completed" and item.get("type") == "command_execution":
            output = item.get("aggregated_output") if isinstance(item.get("aggregated_output"), str) else ""
            failed = item.get("exit_code") not in (0, None)
            refused = failed and any(m in output for m in ("Read-only file system", "Operation not permitted", "Permission denied"))
            t.steps.append(Call(str(item.get("id", "")), "exec_command", {"cmd": str(item.get("command", ""))}, output, failed, refused))
        elif kind == "item.completed" and item.get("type") == "agent_message":
            text = item.get("text") if isinstance(item.get("text"), str) else ""
            t.steps.append(text)
            t.answer = text
        elif kind == "turn.completed":
            usage = _args(e.get("usage"))
            t.input_tokens = (t.input_tokens or 0) + _int(usage.get("input_tokens"))
            t.output_tokens = (t.output_tokens or 0) + _int(usage.get("output_tokens"))
            t.cached_input_tokens += _int(usage.get("cached_input_tokens"))
        elif kind in ("turn.failed", "error"):
            t.failed = str(_args(e.get("error")).get("message") or e.get("message") or kind)
    # Codex's stream has no event per model request: one turn per agent message or command.
    t.turns = [{"usage": None} for _ in t.steps]
    return t


def _anthropic_like(stdout: str, version_key: str, skill_text_follows: bool) -> Transcript:
    """Claude Code's and Qwen Code's `stream-json`: system/init, assistant and user
    messages in the Messages shape, and a closing result."""
    t = Transcript()
    answers: list[str] = []
    for e in _events(stdout, t):
        kind, message = e.get("type"), _args(e.get("message"))
        if kind == "system" and e.get("subtype") == "init":
            t.tools = [x for x in e.get("tools") or () if isinstance(x, str)]
            t.version = e.get(version_key) if isinstance(e.get(version_key), str) else None
        elif kind == "assistant":
            usage = _args(message.get("usage"))
            t.turns.append({"usage": {"input_tokens": _int(usage.get("input_tokens")), "output_tokens": _int(usage.get("output_tokens"))} if usage else None, "stop_reason": message.get("stop_reason")})
            for block in message.get("content") or ():
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    t.steps.append(block["text"])
                    answers.append(block["text"])
                elif block.get("type") == "tool_use":
                    t.steps.append(Call(str(block.get("id", "")), str(block.get("name", "")), _args(block.get("input"))))
                    answers.clear()  # an answer is the text after the last tool call
        elif kind == "user":
            content = message.get("content")
            for block in content if isinstance(content, list) else ():
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_result":
                    call = t.call(str(block.get("tool_use_id", "")))
                    if call is not None:
                        call.result = _text(block.get("content"))
                        call.is_error = block.get("is_error") is True
                        call.refused = call.is_error and any(m in call.result for m in ("No such tool available", "permission", "not allowed", "denied"))
                elif block.get("type") == "text" and skill_text_follows and t.calls:
                    # Claude Code sends a skill's body as a message after the Skill result.
                    last = t.calls[-1]
                    last.result = f"{last.result or ''}\n{block.get('text', '')}".strip()
        elif kind == "result":
            if isinstance(e.get("result"), str):
                t.answer = e["result"]
            if e.get("is_error") is True or (isinstance(e.get("subtype"), str) and e["subtype"].startswith("error")):
                t.failed = str(e.get("result") or e.get("subtype"))
            usage = _args(e.get("usage"))
            if usage:
                t.input_tokens = _int(usage.get("input_tokens")) + _int(usage.get("cache_read_input_tokens")) + _int(usage.get("cache_creation_input_tokens"))
                t.output_tokens = _int(usage.get("output_tokens"))
                t.cached_input_tokens = _int(usage.get("cache_read_input_tokens"))
            if isinstance(e.get("total_cost_usd"), (int, float)):
                t.reported_cost_usd = float(e["total_cost_usd"])
            for model, figures in _args(e.get("modelUsage")).items():
                figures = _args(figures)
                t.usage_by_model[model] = {"input_tokens": _int(figures.get("inputTokens")), "output_tokens": _int(figures.get("outputTokens"))}
            for denial in e.get("permission_denials") or ():
                call = t.call(str(_args(denial).get("tool_use_id", "")))
                if call is not None:
                    call.refused = True
    if not t.answer and answers:
        t.answer = "".join(answers)
    return t


def claude_code(stdout: str) -> Transcript:
    return _anthropic_like(stdout, "claude_code_version", skill_text_follows=True)


def qwen_code(stdout: str) -> Transcript:
    return _anthropic_like(stdout, "qwen_code_version", skill_text_follows=False)


def gemini_cli(stdout: str) -> Transcript:
    """`gemini -o stream-json`: init, messages (assistant text in deltas), tool_use and
    tool_result by id, and a closing result with per-model stats."""
    t = Transcript()
    text: list[str] = []  # the assistant's text since the last tool call

    def flush():
        if text:
            t.steps.append("".join(text))
            t.turns.append({"usage": None})
            text.clear()

    for e in _events(stdout, t):
        kind = e.get("type")
        if kind == "message" and e.get("role") == "assistant" and isinstance(e.get("content"), str):
            text.append(e["content"])
        elif kind == "tool_use":
            flush()
            t.steps.append(Call(str(e.get("tool_id", "")), str(e.get("tool_name", "")), _args(e.get("parameters"))))
            t.turns.append({"usage": None})
        elif kind == "tool_result":
            call = t.call(str(e.get("tool_id", "")))
            if call is not None:
                call.result = e.get("output") if isinstance(e.get("output"), str) else ""
                call.is_error = e.get("status") == "error"
                error_type = str(_args(e.get("error")).get("type", ""))
                call.refused = call.is_error and ("not_registered" in error_type or "denied" in error_type or "policy" in error_type)
        elif kind == "result":
            flush()
            if e.get("status") not in (None, "success"):
                t.failed = str(_args(e.get("error")).get("message") or e.get("status"))
            stats = _args(e.get("stats"))
            if stats:
                t.input_tokens, t.output_tokens = _int(stats.get("input_tokens")), _int(stats.get("output_tokens"))
                t.cached_input_tokens = _int(stats.get("cached"))
            for model, figures in _args(stats.get("models")).items():
                figures = _args(figures)
                t.usage_by_model[model] = {"input_tokens": _int(figures.get("input_tokens")), "output_tokens": _int(figures.get("output_tokens"))}
        elif kind == "error":
            t.failed = str(e.get("message") or "error")
    flush()
    last_call = max((i for i, s in enumerate(t.steps) if isinstance(s, Call)), default=-1)
    t.answer = "".join(s for s in t.steps[last_call + 1 :] if isinstance(s, str))
    return t


def opencode(stdout: str) -> Transcript:
    """`opencode run --format json`: steps (one per model request, with tokens and cost),
    tool parts (an unavailable tool shows as the `invalid` tool) and text parts."""
    t = Transcript()
    cost = 0.0
    answer_parts: list[str] = []
    for e in _events(stdout, t):
        kind, part = e.get("type"), _args(e.get("part"))
        if kind == "tool_use":
            state = _args(part.get("state"))
            name, arguments = str(part.get("tool", "")), _args(state.get("input"))
            output = state.get("output") if isinstance(state.get("output"), str) else (str(state.get("error") or ""))
            refused = name == "invalid" or (state.get("status") == "error" and any(m in output.lower() for m in ("permission", "denied", "rejected")))
            if name == "invalid":  # the tool the model asked for is in the input
                name, arguments = str(arguments.get("tool", "invalid")), {"error": arguments.get("error")}
            t.steps.append(Call(str(part.get("callID", "")), name, arguments, output, state.get("status") == "error" or refused, refused))
            answer_parts.clear()
        elif kind == "text" and isinstance(part.get("text"), str):
            t.steps.append(part["text"])
            answer_parts.append(part["text"])
        elif kind == "step_finish":
            tokens = _args(part.get("tokens"))
            cache = _args(tokens.get("cache"))
            t.turns.append({"usage": {"input_tokens": _int(tokens.get("input")), "output_tokens": _int(tokens.get("output"))} if tokens else None, "stop_reason": part.get("reason")})
            t.input_tokens = (t.input_tokens or 0) + _int(tokens.get("input")) + _int(cache.get("read"))
            t.output_tokens = (t.output_tokens or 0) + _int(tokens.get("output"))
            t.cached_input_tokens += _int(cache.get("read"))
            if isinstance(part.get("cost"), (int, float)):
                cost += float(part["cost"])
        elif kind == "error":
            error = _args(e.get("error"))  # {"name": ..., "data": {"message": ...}}
            t.failed = str(_args(error.get("data")).get("message") or error.get("name") or "error")
    t.answer = "".join(answer_parts)
    t.reported_cost_usd = cost if t.turns else None
    return t


PARSERS = {"codex": codex, "claude-code": claude_code, "gemini-cli": gemini_cli, "qwen-code": qwen_code, "opencode": opencode}
