"""Turning SDK exceptions into `ProviderError`, and waiting out rate limits.

Both SDKs already retry 408/409/429/5xx, connection errors and timeouts with backoff that
honours `Retry-After` (up to their own cap). When a 429 outlasts those retries, this layer
waits again as the server asks, for a bounded number of extra rounds: a long eval run
should slow down under a rate limit, not turn it into error records. A 200 whose body is
not the JSON it should be (cut off by a proxy, say) is not retried by the SDKs; it gets a
couple of rounds here too.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from typing import Awaitable, Callable, TypeVar

from .base import ProviderError

T = TypeVar("T")
MAX_WAIT_S = 300.0
FATAL_STATUS = {401: "auth", 403: "permission", 404: "not_found"}
PROTOCOL_ROUNDS = 2


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `retry-after` seconds or date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    return None


def classify(exc: BaseException, secrets: tuple[str, ...] = ()) -> ProviderError:
    """Map an openai/anthropic SDK exception (they share their class names) to a kind."""
    if isinstance(exc, ProviderError):
        return exc
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = redact(f"{name}: {exc}", secrets)
    if name == "APITimeoutError" or isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return ProviderError("timeout", message)
    if name == "APIConnectionError":
        return ProviderError("connection", message)
    if status == 429:
        return ProviderError("rate_limit", message, status=status)
    if status in FATAL_STATUS:
        return ProviderError(FATAL_STATUS[status], message, fatal=True, status=status)
    if isinstance(status, int) and status >= 500:
        return ProviderError("server", message, status=status)
    if isinstance(status, int):
        return ProviderError("bad_request", message, status=status)
    if name in ("APIResponseValidationError", "JSONDecodeError", "ValidationError"):
        return ProviderError("protocol", message)
    return ProviderError("unexpected", message)


async def with_rate_limit_patience(
    call: Callable[[], Awaitable[T]],
    *,
    extra_rounds: int,
    secrets: tuple[str, ...] = (),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    rounds = garbled = 0
    while True:
        try:
            return await call()
        except Exception as exc:  # SDK errors of every kind end up classified
            error = classify(exc, secrets)
            if error.kind == "protocol" and garbled < PROTOCOL_ROUNDS:
                garbled += 1
                await sleep(0.25 * garbled)
                continue
            if error.kind != "rate_limit" or rounds >= extra_rounds:
                raise error from None
            wait = retry_after_s(exc)
            if wait is None:
                wait = min(60.0, 2.0**rounds) * (0.75 + 0.25 * random.random())
            rounds += 1
            await sleep(min(wait, MAX_WAIT_S))
