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
import json
import random
import time
from typing import Awaitable, Callable, TypeVar

from ..core import redact as redact_text
from ..core import register_secret
from .base import ProviderError

T = TypeVar("T")
MAX_WAIT_S = 300.0
FATAL_STATUS = {401: "auth", 403: "permission", 404: "not_found"}
PROTOCOL_ROUNDS = 2


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """Error text with the provider's own keys replaced (every sink redacts again)."""
    for secret in secrets:
        register_secret(secret)
    return redact_text(text)


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


def _causes(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _body(exc: BaseException) -> str:
    """The server's own words for an HTTP error, one line (a bare "Error code: 404" hides a
    missing route): its JSON error message, else the start of its body."""
    response = getattr(exc, "response", None)
    try:
        text = response.text if response is not None else ""
    except Exception:  # a body that cannot be read adds nothing
        return ""
    try:
        data = json.loads(text)
        error = data.get("error") if isinstance(data, dict) else None
        found = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
        if isinstance(found, str) and found.strip():
            text = found
    except ValueError:
        pass
    text = " ".join(str(text).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _where(exc: BaseException) -> str:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    return f" at {url}" if url else ""


def classify(exc: BaseException, secrets: tuple[str, ...] = (), url: str | None = None) -> ProviderError:
    """Map an openai/anthropic SDK exception (they share their class names) to a kind,
    naming the cause as it is: a refused connection is not a timeout."""
    if isinstance(exc, ProviderError):
        return exc
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = f"{name}: {exc}"
    body = _body(exc) if isinstance(status, int) else ""
    if body and body not in message:
        message += f" (server said: {body})"
    if status == 404:
        message += _where(exc)
    message = redact(message, secrets)
    if any(isinstance(cause, ConnectionRefusedError) for cause in _causes(exc)):
        return ProviderError("connection", f"connection refused to {url or 'the server'} (is it running, and is the URL right?)")
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
    url: str | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    deadline_s: float | None = None,
) -> T:
    """`call()`, with up to `extra_rounds` further waits on 429 once the SDK's retries gave
    up; all the waits of one call together stay within `deadline_s`."""
    rounds = garbled = 0
    waited = 0.0
    while True:
        try:
            return await call()
        except Exception as exc:  # SDK errors of every kind end up classified
            error = classify(exc, secrets, url)
            if error.kind == "protocol" and garbled < PROTOCOL_ROUNDS:
                garbled += 1
                await sleep(0.25 * garbled)
                continue
            if error.kind != "rate_limit" or rounds >= extra_rounds:
                raise error from None
            wait = retry_after_s(exc)
            if wait is None:
                wait = min(60.0, 2.0**rounds) * (0.75 + 0.25 * random.random())
            wait = min(wait, MAX_WAIT_S)
            if deadline_s is not None and waited + wait > deadline_s:
                raise ProviderError("rate_limit", f"{error} (gave up: waiting {wait:.0f} s more would pass --rate-limit-deadline {deadline_s:g} s)", status=error.status) from None
            rounds += 1
            waited += wait
            await sleep(wait)
