"""The census of real user problems (evals/problems/*.yaml) and its held-out draw.

Each problem file follows runner/core/schemas/problem.schema.json; evals/problems/draw.yaml
records the seed, the population it was drawn from and the held-out third, so the split can
be recomputed and a problem added later never moves an old one across it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import LoadError, check_schema
from .parsing import load_yaml

CENSUS_DIR = Path("evals") / "problems"
DRAW_FILE = "draw.yaml"


@dataclass(frozen=True)
class Census:
    root: Path
    problems: dict[str, dict[str, Any]]  # id -> the file's content
    draw: dict[str, Any] | None

    @property
    def heldout(self) -> list[str]:
        return list(self.draw["heldout"]) if self.draw else []

    @property
    def training(self) -> list[str]:
        held = set(self.heldout)
        return sorted(i for i in self.problems if i not in held)


def draw_heldout(ids: list[str], seed: int) -> list[str]:
    """A third of `ids` (rounded down), drawn with `seed` from their sorted order."""
    population = sorted(ids)
    return sorted(random.Random(seed).sample(population, k=len(population) // 3))


def load_census(root: Path) -> Census:
    """Every problem file under `root`; a broken one is a one-line LoadError naming it."""
    if not root.is_dir():
        raise LoadError(root, 1, "census/missing", "no census folder")
    problems: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.yaml")):
        if path.name == DRAW_FILE:
            continue
        located = load_yaml(path)
        found = check_schema("problem", located.data)
        if found:
            raise LoadError(path, located.line(found[0].path), "census/schema", f"{found[0].where}: {found[0].message}")
        data = located.data
        if data["id"] != path.stem:
            raise LoadError(path, located.line(("id",)), "census/id", f"id {data['id']!r} is not the file's name {path.stem!r}")
        problems[data["id"]] = data
    draw = None
    draw_path = root / DRAW_FILE
    if draw_path.is_file():
        located = load_yaml(draw_path)
        found = check_schema("problem-draw", located.data)
        if found:
            raise LoadError(draw_path, located.line(found[0].path), "census/schema", f"{found[0].where}: {found[0].message}")
        draw = located.data
        unknown = sorted(set(draw["population"]) - set(problems))
        if unknown:
            raise LoadError(draw_path, located.line(("population",)), "census/draw", f"{unknown[0]} has no problem file")
        if sorted(draw["heldout"]) != draw_heldout(draw["population"], draw["seed"]):
            raise LoadError(draw_path, located.line(("heldout",)), "census/draw", f"heldout is not the draw of seed {draw['seed']} over its population")
    return Census(root, problems, draw)
