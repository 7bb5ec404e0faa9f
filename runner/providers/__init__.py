"""Model providers: `openai:MODEL` (Chat Completions or Responses), `anthropic:MODEL`
(Messages), any OpenAI-compatible server (`openai:MODEL --base-url URL`), `replay:DIR`;
and what the agent loop and the judge share about requests: the response cache and the
price table.

The SDKs are imported only when a live provider is opened, so the CLI starts fast."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from ..core import KEY_VARIABLES, UsageError
from .base import Provider, ProviderError, Reply, Situation, Tool, ToolCall, Usage, count_attempts
from .cache import NoCache, ResponseCache, open_cache, request_key
from .pricing import Price, PriceTable
from .settings import Settings, Transport

__all__ = [
    "NoCache",
    "Price",
    "PriceTable",
    "Provider",
    "ProviderError",
    "Reply",
    "ResponseCache",
    "Settings",
    "Situation",
    "count_attempts",
    "Tool",
    "ToolCall",
    "Transport",
    "Usage",
    "open_cache",
    "open_provider",
    "parse_model",
    "price_for",
    "request_key",
]

KINDS = ("openai", "anthropic", "replay")
BASE_URL_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
# OpenAI-compatible servers (vLLM, Ollama, llama.cpp) accept any key; the SDK insists on one.
LOCAL_KEY = "unused-local-key"


def parse_model(spec: str, flag: str = "--model") -> tuple[str, str]:
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS or not rest.strip():
        raise UsageError(f"{flag} {spec!r}: expected openai:MODEL, anthropic:MODEL or replay:DIR")
    return kind, rest.strip()


def open_provider(
    spec: str,
    settings: Settings = Settings(),
    transport: Transport = Transport(),
    *,
    api: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] = os.environ,
    flag: str = "--model",
) -> Provider:
    """The provider for `spec`; a missing key or a wrong combination is a UsageError here,
    before any request is made, naming the options as the user typed them (`flag` is
    --model or --judge; --api/--base-url follow it: --judge-api, --judge-base-url)."""
    api_flag, url_flag = ("--api", "--base-url") if flag == "--model" else (f"{flag}-api", f"{flag}-base-url")
    kind, model = parse_model(spec, flag)
    if kind == "replay":
        if base_url or api:
            raise UsageError(f"{url_flag} and {api_flag} do not apply to replay:DIR ({flag} {spec})")
        from .replay import Replay, split_variants

        directory, variants = split_variants(model)
        return Replay(Path(directory), variants)
    if api not in (None, "chat", "responses") or (api == "responses" and kind != "openai"):
        raise UsageError(f"{api_flag} {api}: only openai: models take {api_flag} chat|responses")
    base_url = base_url or env.get(BASE_URL_VARIABLES[kind]) or None
    variable = KEY_VARIABLES[kind]
    key = env.get(variable, "").strip()
    if not key:
        if kind == "openai" and base_url:
            key = LOCAL_KEY
        else:
            raise UsageError(f"{variable} is not set: {flag} {spec} needs it" + (f" (or {url_flag} for a local OpenAI-compatible server)" if kind == "openai" else ""))
    if kind == "anthropic":
        from .anthropic_messages import Messages

        return Messages(model, settings, transport, api_key=key, base_url=base_url)
    if api == "responses":
        from .openai_responses import Responses

        return Responses(model, settings, transport, api_key=key, base_url=base_url)
    from .openai_chat import ChatCompletions

    return ChatCompletions(model, settings, transport, api_key=key, base_url=base_url)


def price_for(provider: Provider, prices: PriceTable) -> Price | None:
    """The price of `provider`'s model. Behind --base-url (or OPENAI_BASE_URL /
    ANTHROPIC_BASE_URL) a model is priced as `openai-compatible` or `anthropic-compatible`:
    a local server or gateway is not billed at the vendor's list price."""
    identity = provider.identity()
    kind = f"{identity['provider']}-compatible" if identity.get("base_url") else identity["provider"]
    return prices.lookup(kind, provider.model)
