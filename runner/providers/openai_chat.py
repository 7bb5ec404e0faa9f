"""OpenAI Chat Completions, also the dialect of vLLM, Ollama, llama.cpp server and NIM."""

from __future__ import annotations

from .base import HTTP_HOOKS, Reply, ToolCall, Usage, text_of
from .live import LiveProvider, protocol_error


def openai_client(api_key: str, base_url: str | None, transport):
    import openai

    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=transport.timeout_s,
        max_retries=transport.max_retries,
        http_client=openai.DefaultAioHttpClient(event_hooks=HTTP_HOOKS),  # counts every attempt, retries included
    )


def chat_messages(system: str, messages: list[dict]) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        role = message["role"]
        if role == "user":
            out.append({"role": "user", "content": message["content"]})
        elif role == "assistant":
            item: dict = {"role": "assistant", "content": message["content"] or None}
            if message.get("tool_calls"):
                item["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in message["tool_calls"]
                ]
            out.append(item)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": message["tool_call_id"], "content": message["content"]})
    return out


class ChatCompletions(LiveProvider):
    name = "openai"
    api = "chat"
    default_url = "https://api.openai.com/v1"

    takes_seed = True

    def _make_client(self, api_key, base_url):
        return openai_client(api_key, base_url, self.transport)

    def _params(self) -> dict:
        s, params = self.settings, {}
        if s.temperature is not None:
            params["temperature"] = s.temperature
        if s.max_tokens is not None:
            # api.openai.com wants max_completion_tokens (reasoning models refuse max_tokens);
            # OpenAI-compatible servers mostly know only max_tokens.
            params["max_tokens" if self.base_url else "max_completion_tokens"] = s.max_tokens
        if s.reasoning_effort is not None:
            params["reasoning_effort"] = s.reasoning_effort
        if s.seed is not None:
            params["seed"] = s.seed
        return params

    async def _request(self, system, messages, tools, schema):
        body = {"model": self.model, "messages": chat_messages(system, messages), **self._params()}
        if schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "grades", "schema": schema, "strict": True}}
        if tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}} for t in tools]
        from openai.types.chat import ChatCompletion

        response = await self._post("/chat/completions", body, ChatCompletion)
        if not response.choices:
            raise protocol_error("response has no choices")
        choice = response.choices[0]
        calls = [
            ToolCall(c.id, c.function.name, c.function.arguments)
            for c in (choice.message.tool_calls or [])
            if getattr(c, "type", "function") == "function"
        ]
        usage = Usage.unknown()
        if response.usage is not None:
            details = response.usage.prompt_tokens_details
            usage = Usage(response.usage.prompt_tokens or 0, response.usage.completion_tokens or 0, (details.cached_tokens or 0) if details else 0)
        return Reply(text_of(choice.message.content, "message.content"), calls, usage, choice.finish_reason)
