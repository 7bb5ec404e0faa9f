"""Shared part of the three live wire formats: identity, retries, error mapping."""

from __future__ import annotations

from typing import Any

from .base import ProviderError, Reply, Situation, Tool
from .errors import classify, with_rate_limit_patience
from .settings import Settings, Transport


class LiveProvider:
    name = "live"
    api = "live"
    cacheable = True

    def __init__(self, model: str, settings: Settings, transport: Transport, *, api_key: str, base_url: str | None):
        self.model = model
        self.settings = settings
        self.transport = transport
        self.base_url = base_url
        self._secrets = (api_key,)
        self.ignored: list[str] = []  # settings this API cannot take, recorded with results
        self.client = self._make_client(api_key, base_url)

    def _make_client(self, api_key: str, base_url: str | None) -> Any:
        raise NotImplementedError

    def identity(self) -> dict:
        return {"provider": self.name, "api": self.api, "base_url": self.base_url, "model": self.model, "settings": self.settings.to_dict()}

    async def _request(self, system: str, messages: list[dict], tools: list[Tool], schema: dict | None) -> Reply:
        raise NotImplementedError

    async def complete(self, system: str, messages: list[dict], tools: list[Tool], situation: Situation, schema: dict | None = None) -> Reply:
        async def call() -> Reply:
            return await self._request(system, messages, tools, schema)

        try:
            return await with_rate_limit_patience(call, extra_rounds=self.transport.rate_limit_rounds, secrets=self._secrets)
        except ProviderError:
            raise
        except Exception as exc:  # a response the parser could not read
            raise classify(exc, self._secrets) from None

    async def aclose(self) -> None:
        await self.client.close()


def protocol_error(what: str) -> ProviderError:
    return ProviderError("protocol", what)
