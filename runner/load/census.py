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
        """The seeded draw's third, and every problem of a later round (wholly held out)."""
        if not self.draw:
            return []
        return sorted({*self.draw["heldout"], *(i for r in self.draw.get("rounds", []) for i in r["heldout"])})

    def round_of(self, problem_id: str) -> str | None:
        """The later round a problem was collected in, None for the first census."""
        for later in (self.draw or {}).get("rounds", []):
            if problem_id in later["heldout"]:
                return later["name"]
        return None

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
        seen = set(draw["population"])
        for index, later in enumerate(draw.get("rounds", [])):
            for position, problem_id in enumerate(later["heldout"]):
                where = located.line(("rounds", index, "heldout", position))
                if problem_id not in problems:
                    raise LoadError(draw_path, where, "census/draw", f"{problem_id} has no problem file")
                if problem_id in seen:
                    raise LoadError(draw_path, where, "census/draw", f"{problem_id} is already in an earlier round")
                seen.add(problem_id)
        unplaced = sorted(set(problems) - seen)
        if unplaced:
            raise LoadError(root / f"{unplaced[0]}.yaml", 1, "census/draw", f"{unplaced[0]} is in neither the draw's population nor a later round of {DRAW_FILE}")
    return Census(root, problems, draw)
