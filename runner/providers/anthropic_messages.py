"""Anthropic Messages API. Assistant turns go back as the model's own content blocks
(thinking blocks must be returned unchanged inside a tool loop)."""

from __future__ import annotations

import json

from .base import HTTP_HOOKS, Reply, ToolCall, Usage
from .live import LiveProvider

DEFAULT_MAX_TOKENS = 4096  # the Messages API requires a value


def anthropic_messages(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            out.append({"role": "user", "content": message["content"]})
        elif role == "assistant":
            if isinstance(message.get("raw"), list):
                blocks = message["raw"]
            else:
                blocks = [{"type": "text", "text": message["content"]}] if message["content"] else []
                for call in message.get("tool_calls") or ():
                    blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": _as_object(call["arguments"])})
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"], "is_error": bool(message.get("is_error"))}
            # Results of one assistant turn travel together in a single user message.
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
    return out


def _as_object(arguments: str) -> dict:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class Messages(LiveProvider):
    name = "anthropic"
    api = "messages"
    default_url = "https://api.anthropic.com"

    def _make_client(self, api_key, base_url):
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=self.transport.timeout_s,
            max_retries=self.transport.max_retries,
            http_client=anthropic.DefaultAioHttpClient(event_hooks=HTTP_HOOKS),  # counts every attempt, retries included
        )

    async def _request(self, system, messages, tools, schema):
        s = self.settings
        kwargs: dict = {"model": self.model, "messages": anthropic_messages(messages), "max_tokens": s.max_tokens or DEFAULT_MAX_TOKENS}
        if system:
            kwargs["system"] = system
        output_config: dict = {}
        if s.reasoning_effort is not None:
            output_config["effort"] = s.reasoning_effort
        if schema is not None:
            output_config["format"] = {"type": "json_schema", "schema": schema}
        if output_config:
            kwargs["output_config"] = output_config
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        if tools:
            kwargs["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
        from anthropic.types import Message

        response = await self._post("/v1/messages", kwargs, Message)
        texts, calls = [], []
        for block in response.content or ():
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, block.input))
        usage = Usage.unknown()
        if response.usage is not None:
            usage = Usage(response.usage.input_tokens or 0, response.usage.output_tokens or 0, response.usage.cache_read_input_tokens or 0)
        raw = [block.model_dump(mode="json", exclude_none=True, warnings=False) for block in response.content or ()]
        return Reply("".join(texts), calls, usage, response.stop_reason, raw)
