"""What every provider speaks: neutral messages in, one `Reply` out.

Transcript messages are plain dicts so that they go to JSON, the cache key and the run
directory unchanged:
  {"role": "user", "content": str}
  {"role": "assistant", "content": str, "tool_calls": [ToolCall.to_dict()], "raw": native}
  {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}
`raw` keeps an assistant turn in the provider's own shape (thinking blocks, reasoning
items) so that the same provider can send it back verbatim on the next turn.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import MbskillsError


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments object


def arguments_text(value: Any) -> str:
    """Tool-call arguments as the text the model sent. Some OpenAI-compatible servers send a
    JSON object where the API has a string; it is kept as that object's JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class ToolCall:
    id: str
    name: str
    raw_arguments: str  # exactly what the model sent; may be invalid JSON

    def __post_init__(self) -> None:
        self.raw_arguments = arguments_text(self.raw_arguments)

    @property
    def arguments(self) -> dict | None:
        """The arguments as an object, or None when the model sent something else."""
        try:
            value = json.loads(self.raw_arguments) if self.raw_arguments.strip() else {}
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.raw_arguments}

    @classmethod
    def from_dict(cls, data: dict) -> "ToolCall":
        return cls(data["id"], data["name"], data["arguments"])


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    unreported: int = 0  # replies that carried no token counts: their tokens are unknown, not 0

    @classmethod
    def unknown(cls) -> "Usage":
        return cls(unreported=1)

    @property
    def known(self) -> bool:
        return self.unreported == 0

    def add(self, other: "Usage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.unreported += other.unreported

    def to_dict(self) -> dict:
        out = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "cached_input_tokens": self.cached_input_tokens}
        if self.unreported:
            out["unreported"] = self.unreported
        return out


# HTTP attempts made on behalf of the current task (one record, or one judge call): the
# SDKs retry inside one call, and every attempt is a request a server saw and may bill.
_ATTEMPTS: ContextVar[list[int] | None] = ContextVar("attempts", default=None)


def count_attempts() -> list[int]:
    """Start counting HTTP attempts in this task; the returned one-item list holds the count."""
    counter = [0]
    _ATTEMPTS.set(counter)
    return counter


async def _on_request(request: Any) -> None:
    counter = _ATTEMPTS.get()
    if counter is not None:
        counter[0] += 1


HTTP_HOOKS = {"request": [_on_request]}  # for the SDKs' HTTP clients


def text_of(value: Any, where: str) -> str:
    """A reply's text from what the server sent: a string, nothing, or the "list of parts"
    several OpenAI-compatible servers send (joined where every part is text); any other
    shape is a protocol error naming it, never a non-string answer."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for index, part in enumerate(value):
            text = part if isinstance(part, str) else part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            kind = part.get("type", "text") if isinstance(part, dict) else "text"
            if not isinstance(text, str) or kind not in ("text", "output_text"):
                raise ProviderError("protocol", f"{where}[{index}] is not a text part ({type(part).__name__} of type {kind!r}); cannot read it as an answer")
            texts.append(text)
        return "".join(texts)
    raise ProviderError("protocol", f"{where} is {type(value).__name__}, not text; cannot read it as an answer")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class Reply:
    """One model response: text, tool calls, token counts, why it stopped. Built from what
    a server sent, so every field is checked here: a wrong shape is a protocol error."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    raw: Any = None

    def __post_init__(self) -> None:
        self.text = text_of(self.text, "the reply's text")
        if self.stop_reason is not None and not isinstance(self.stop_reason, str):
            raise ProviderError("protocol", f"the reply's stop reason is {type(self.stop_reason).__name__}, not text")
        for name in ("input_tokens", "output_tokens", "cached_input_tokens", "unreported"):
            if not _count(getattr(self.usage, name)):
                raise ProviderError("protocol", f"the reply's usage.{name} is {getattr(self.usage, name)!r}, not a count")
        for call in self.tool_calls:
            if not isinstance(call.id, str) or not isinstance(call.name, str):
                raise ProviderError("protocol", f"a tool call's id or name is not text ({call.id!r}, {call.name!r})")

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Reply":
        return cls(
            data["text"],
            [ToolCall.from_dict(c) for c in data["tool_calls"]],
            Usage(**data["usage"]),
            data.get("stop_reason"),
            data.get("raw"),
        )

    def as_message(self) -> dict:
        message: dict = {"role": "assistant", "content": self.text, "tool_calls": [c.to_dict() for c in self.tool_calls]}
        if self.raw is not None:
            message["raw"] = self.raw
        return message


@dataclass(frozen=True)
class Situation:
    """Where a request comes from. Live models never see it; replay answers by it."""

    case_key: str
    condition: str
    trial: int


class ProviderError(MbskillsError):
    """A request that failed for good, after retries. `kind` groups causes for reports;
    `fatal` errors (bad key, unknown model) stop the whole run."""

    def __init__(self, kind: str, message: str, *, fatal: bool = False, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.fatal = fatal
        self.status = status


class Provider(Protocol):
    name: str  # "openai", "anthropic", "replay"
    model: str
    cacheable: bool

    def identity(self) -> dict:
        """Everything besides the messages that decides the answer (cache key, run.json)."""

    async def complete(self, system: str, messages: list[dict], tools: list[Tool], situation: Situation, schema: dict | None = None) -> Reply:
        """`schema`: ask for a JSON object of this JSON schema (structured output)."""

    async def aclose(self) -> None: ...
