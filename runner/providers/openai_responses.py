"""OpenAI Responses API (`--api responses`). Stateless: the whole conversation is sent
each turn, with the model's own output items (reasoning included) sent back verbatim."""

from __future__ import annotations

from .base import Reply, ToolCall, Usage
from .live import LiveProvider
from .openai_chat import openai_client


def response_input(messages: list[dict]) -> list[dict]:
    items: list[dict] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            items.append({"role": "user", "content": message["content"]})
        elif role == "assistant":
            if isinstance(message.get("raw"), list):
                items.extend(message["raw"])
                continue
            if message["content"]:
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or ():
                items.append({"type": "function_call", "call_id": call["id"], "name": call["name"], "arguments": call["arguments"]})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]})
    return items


class Responses(LiveProvider):
    name = "openai"
    api = "responses"
    default_url = "https://api.openai.com/v1"

    def _make_client(self, api_key, base_url):
        return openai_client(api_key, base_url, self.transport)

    async def _request(self, system, messages, tools, schema):
        s, kwargs = self.settings, {"model": self.model, "input": response_input(messages)}
        if schema is not None:
            kwargs["text"] = {"format": {"type": "json_schema", "name": "grades", "schema": schema, "strict": True}}
        if system:
            kwargs["instructions"] = system
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        if s.max_tokens is not None:
            kwargs["max_output_tokens"] = s.max_tokens
        if s.reasoning_effort is not None:
            kwargs["reasoning"] = {"effort": s.reasoning_effort}
        if tools:
            kwargs["tools"] = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False} for t in tools]
        from openai.types.responses import Response

        response = await self._post("/responses", kwargs, Response)
        texts, calls = [], []
        for item in response.output or ():
            if item.type == "message":
                texts.extend(part.text for part in item.content if getattr(part, "type", "") == "output_text")
            elif item.type == "function_call":
                calls.append(ToolCall(item.call_id, item.name, item.arguments))
        usage = Usage.unknown()
        if response.usage is not None:
            details = response.usage.input_tokens_details
            usage = Usage(response.usage.input_tokens or 0, response.usage.output_tokens or 0, (details.cached_tokens or 0) if details else 0)
        stop = response.status
        if response.incomplete_details is not None and response.incomplete_details.reason:
            stop = response.incomplete_details.reason
        raw = [item.model_dump(mode="json", exclude_none=True, warnings=False) for item in response.output or ()]
        return Reply("".join(texts), calls, usage, stop, raw)
