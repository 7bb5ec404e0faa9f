"""The placebo arms: a decoy skill as long as the real ones on a topic no case is about, so
that a report can tell what more context does from what the skill's content does.

`placebo` lists the decoy in the catalogue beside the real skills (it can be activated like
them); `inline-placebo` puts a decoy body as long as the expected skill's body where
`inline` puts that body. The text is generated deterministically from a fixed set of
sentences (aquarium water care), so a run, its cache keys and its reruns stay the same.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path

from ..load import Skill, split_frontmatter

DECOY = "aquarium-water-care"
_SENTENCES = (
    "Test the tank water once a week for ammonia, nitrite and nitrate.",
    "Replace a fifth of the water each week with dechlorinated water at the same temperature.",
    "A new tank needs four to six weeks for its filter bacteria to settle before fish move in.",
    "Rinse filter sponges in old tank water, never under the tap, so the bacteria survive.",
    "Feed only what the fish eat in two minutes; leftover food fouls the water.",
    "Keep the heater steady: tropical fish prefer twenty-four to twenty-six degrees.",
    "Live plants take up nitrate and shade the glass, which slows algae.",
    "Light the tank eight hours a day on a timer; longer days feed algae.",
    "Add new fish a few at a time so the filter can catch up with the extra waste.",
    "Quarantine new fish for two weeks in a separate tank before they join the others.",
    "Scrape algae from the front glass with a soft pad before each water change.",
    "Vacuum the gravel in one corner per week, not the whole floor at once.",
    "Cloudy water in a new tank is a bacterial bloom and clears on its own.",
    "Snails and shrimp eat leftover food but add to the waste the filter handles.",
    "Check the fish at feeding time: clamped fins or gasping at the surface mean trouble.",
    "Keep a log of readings and changes; slow trends show up there first.",
)


def decoy_text(length: int, seed: int = 0) -> str:
    """About `length` characters of decoy prose (whole sentences, then whole words), the
    same for the same arguments."""
    rng = random.Random(f"{seed}:{length}")
    words: list[str] = []
    size = 0
    while size < length:
        for word in rng.choice(_SENTENCES).split():
            if size + len(word) + (1 if words else 0) > length:
                return " ".join(words) if words else word[:length]
            size += len(word) + (1 if words else 0)
            words.append(word)
    return " ".join(words)


@lru_cache(maxsize=64)
def _decoy(body_length: int, description_length: int) -> Skill:
    description = decoy_text(description_length, seed=1)
    text = f"---\nname: {DECOY}\ndescription: {json.dumps(description)}\n---\n\n{decoy_text(body_length)}\n"  # JSON quotes are YAML
    # Never written anywhere: its folder does not exist, so it lists no files.
    root = Path("/nonexistent-mbskills-placebo") / DECOY
    return Skill(root, split_frontmatter(root / "SKILL.md", text))


def decoy_skill(skills: list[Skill]) -> Skill:
    """A decoy as long as the bundle's skills are on average, body and description."""
    if not skills:
        return _decoy(2000, 300)
    body = round(sum(len(s.body) for s in skills) / len(skills))
    description = round(sum(len(s.description) for s in skills) / len(skills))
    return _decoy(body, description)
