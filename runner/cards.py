"""Rewriting skill cards in place: round-trip YAML that keeps comments, quoting and layout.

Both writers of `claims[].status` use it: `mbskills check --write-cards` for the CPU tier
(runner/claims/run.py) and `--gpu-results` for the GPU tier (runner/gpu_results.py).
Light: ruamel.yaml only, no torch or megatron.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from .atomic import write_atomic


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
