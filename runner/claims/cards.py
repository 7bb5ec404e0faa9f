"""Rewriting skill cards in place: round-trip YAML that keeps comments, quoting and layout.

Both writers of `claims[].status` use it: `mbskills check --write-cards` for the CPU tier
(runner/claims/run.py) and `--gpu-results` for the GPU tier (runner/claims/gpu_results.py).
Light: ruamel.yaml only, no torch or megatron.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from ..core import write_atomic

R = TypeVar("R")


def card_yaml():
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the hand-written text
    yaml.indent(mapping=2, sequence=4, offset=2)  # the cards' "  - id:" layout
    return yaml


def load_card(path: Path) -> Any:
    return card_yaml().load(path.read_text("utf-8"))


def dump_card(card: Any) -> str:
    text = io.StringIO()
    card_yaml().dump(card, text)
    return text.getvalue()


def save_card(path: Path, card: Any) -> None:
    write_atomic(path, dump_card(card))  # a card is never left half-written


def update_claims(skills_dir: Path, card_file: str, results: Iterable[tuple[str, str, R]], apply: Callable[[Any, R], None]) -> list[Path]:
    """Apply each (skill, claim id, result) to its claim entry in that skill's card; return
    the cards written. Every card is loaded and changed before any is written, so a card
    that cannot be read stops the update with no card rewritten."""
    by_skill: dict[str, dict[str, R]] = {}
    for skill, claim_id, result in results:
        by_skill.setdefault(skill, {})[claim_id] = result
    changed = []
    for skill, claims in sorted(by_skill.items()):
        path = skills_dir / skill / card_file
        card = load_card(path)
        for entry in card["claims"]:
            if entry["id"] in claims:
                apply(entry, claims[entry["id"]])
        changed.append((path, card))
    for path, card in changed:
        save_card(path, card)
    return [path for path, _ in changed]
