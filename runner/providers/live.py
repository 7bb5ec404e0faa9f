"""Shared part of the three live wire formats: identity, retries, error mapping.

Speed (measured by bench/perf.py): the SDK client is built on the first request, so a run
answered wholly from the cache never imports the SDK (about 1.7 s for openai); it uses the
SDK's aiohttp transport, whose connection pool costs far less CPU per request than the
default one at 64 requests in flight; and bodies go through the client's documented raw
`post()`, which skips `create()`'s walk over every message to convert parameters our plain
JSON bodies do not need. Retries, timeouts, errors and response parsing stay the SDK's."""

from __future__ import annotations

from typing import Any

from ..core import register_secret
from .base import ProviderError, Reply, Situation, Tool
from .errors import classify, with_rate_limit_patience
from .settings import Settings, Transport


class LiveProvider:
    name = "live"
    api = "live"
    cacheable = True
    counts_attempts = True  # its HTTP client counts every attempt (runner/providers/base.py)
    default_url = "the API"

    def __init__(self, model: str, settings: Settings, transport: Transport, *, api_key: str, base_url: str | None):
        self.model = model
        self.settings = settings
        self.transport = transport
        self.base_url = base_url
        self._secrets = (api_key,)
        register_secret(api_key)  # every file and stream the process writes redacts it
        # settings this API cannot take, recorded with results
        self.ignored: list[str] = ["seed"] if settings.seed is not None and not self.takes_seed else []
        self._client: Any = None

    takes_seed = False

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client(self._secrets[0], self.base_url)
        return self._client

    def _make_client(self, api_key: str, base_url: str | None) -> Any:
        raise NotImplementedError

    async def _post(self, path: str, body: dict, cast_to: type) -> Any:
        result = await self.client.post(path, cast_to=cast_to, body=body)
        if isinstance(result, str):  # the SDK hands back the text of a non-JSON body
            raise ProviderError("not_json", f"server returned {_sniff(result)}, not JSON: {' '.join(result.split())[:80]!r}")
        return result

    @property
    def url(self) -> str:
        return self.base_url or self.default_url

    def identity(self) -> dict:
        return {"provider": self.name, "api": self.api, "base_url": self.base_url, "model": self.model, "settings": self.settings.to_dict()}

    async def _request(self, system: str, messages: list[dict], tools: list[Tool], schema: dict | None) -> Reply:
        raise NotImplementedError

    async def complete(self, system: str, messages: list[dict], tools: list[Tool], situation: Situation, schema: dict | None = None) -> Reply:
        async def call() -> Reply:
            return await self._request(system, messages, tools, schema)

        try:
            return await with_rate_limit_patience(call, extra_rounds=self.transport.rate_limit_rounds, secrets=self._secrets, url=self.url, deadline_s=self.transport.rate_limit_deadline_s)
        except ProviderError:
            raise
        except Exception as exc:  # a response the parser could not read
            raise classify(exc, self._secrets, self.url) from None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def _sniff(text: str) -> str:
    head = text.lstrip()[:64].lower()
    if head.startswith(("<!doctype html", "<html")) or "<body" in head:
        return "text/html"
    if head.startswith(("data:", "event:", ":")):
        return "text/event-stream"
    return "text" if head else "an empty body"


def protocol_error(what: str) -> ProviderError:
    return ProviderError("protocol", what)
