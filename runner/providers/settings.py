"""Generation settings (they change answers, so they are part of the cache key and of
every record) and transport options (they do not)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core import defaults

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class Settings:
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    seed: int | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Transport:
    timeout_s: float = defaults.TIMEOUT_S
    max_retries: int = defaults.MAX_RETRIES
    rate_limit_rounds: int = defaults.RATE_LIMIT_ROUNDS
    rate_limit_deadline_s: float = defaults.RATE_LIMIT_DEADLINE_S
