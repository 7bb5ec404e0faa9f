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


@dataclass
class Reply:
    """One model response: text, tool calls, token counts, why it stopped."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    raw: Any = None

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
