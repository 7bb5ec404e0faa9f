"""Token cost from a pricing table (runner/providers/data/pricing.yaml, extendable with --pricing)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from ..core import LoadError, UsageError
from ..load import load_yaml
from .base import Usage


@dataclass(frozen=True)
class Price:
    provider: str
    match: str
    input: float
    output: float
    cached_input: float

    @property
    def free(self) -> bool:
        return self.input == self.output == self.cached_input == 0

    def cost(self, usage: Usage) -> float | None:
        """US dollars; None when some reply carried no token counts (unless it costs nothing)."""
        if not usage.known and not self.free:
            return None
        fresh = max(usage.input_tokens - usage.cached_input_tokens, 0)
        return (fresh * self.input + usage.cached_input_tokens * self.cached_input + usage.output_tokens * self.output) / 1e6


def _entries(data: object, source: str) -> list[Price]:
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise UsageError(f"{source}: expected a mapping with a 'models' list")
    prices = []
    for index, entry in enumerate(models):
        try:
            prices.append(
                Price(str(entry["provider"]), str(entry["match"]), float(entry["input"]), float(entry["output"]), float(entry.get("cached_input", entry["input"])))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{source}: models[{index}]: needs provider, match, input and output as numbers ({exc})") from None
    return prices


class PriceTable:
    def __init__(self, extra: Path | None = None):
        text = resources.files(__package__).joinpath("data/pricing.yaml").read_text()
        self.prices = _entries(yaml.safe_load(text), "runner/providers/data/pricing.yaml")
        if extra is not None:
            try:
                data = load_yaml(extra).data
            except LoadError as error:
                raise UsageError(f"{error.one_line()} (cannot read the pricing file)") from None
            self.prices = _entries(data, str(extra)) + self.prices  # the user's entries win

    def lookup(self, provider: str, model: str) -> Price | None:
        candidates = [p for p in self.prices if p.provider == provider and model.startswith(p.match)]
        if not candidates:
            return None
        # A user entry equal in length to a shipped one comes first in the list and wins.
        return max(candidates, key=lambda p: len(p.match))
