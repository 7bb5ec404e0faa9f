"""The release check a skill registers for the claim it opens with (`kit.check_release`): the Megatron-Bridge range (and megatron-core
release) it states must contain what is installed, and its front matter and card must
state the same range. Under `mbskills drift` this is the claim that says which releases
the skill holds for."""

from __future__ import annotations

import re

from ..load import CARD_FILE, load_yaml
from .environment import versions
from .registry import ClaimFailed, Context
from .sections import read_skill_sections

RANGE_RE = re.compile(r"(\d+(?:\.\d+)+)(?: to (\d+(?:\.\d+)+))?")


def parse_range(text: str) -> tuple[str, str]:
    match = RANGE_RE.fullmatch(text.strip())
    if not match:
        raise ClaimFailed(f"SKILL.md states the release range {text!r}; write X.Y.Z or X.Y.Z to X.Y.Z")
    return match.group(1), match.group(2) or match.group(1)


def _next(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:-1] + [str(int(parts[-1]) + 1)])


def _front_matter(text: str) -> dict:
    import yaml

    parts = text.split("---", 2)
    return yaml.safe_load(parts[1]) if len(parts) == 3 and not parts[0].strip() else {}


def check_release(ctx: Context) -> None:
    from packaging.version import Version

    r = ctx.read("Everything below holds for **Megatron-Bridge {bridge:text} with megatron-core {core:version}**.")
    low, high = parse_range(r.bridge)
    found = versions()
    ctx.expect(Version(low) <= Version(found["megatron-bridge"]) <= Version(high), f"SKILL.md says Megatron-Bridge {r.bridge}; {found['megatron-bridge']} is installed")
    ctx.expect(r.core == found["megatron-core"], f"SKILL.md says megatron-core {r.core}; {found['megatron-core']} is installed")
    s = ctx.read("Each statement carries a claim id (the HTML comment above it) whose check runs against those releases; `{card:code}` lists the claims and their status.")
    skill_md = ctx.skill_root / "SKILL.md"
    front = _front_matter(skill_md.read_text("utf-8"))
    ctx.expect(s.card == CARD_FILE == (front.get("metadata") or {}).get("card"), f"SKILL.md names {s.card!r} as its card; the front matter says {(front.get('metadata') or {}).get('card')!r}")
    card = load_yaml(ctx.skill_root / s.card).data
    ctx.expect({c["id"] for c in card.get("claims", [])} == set(read_skill_sections(ctx.skill_root)), f"{s.card} does not list exactly the claims marked in SKILL.md and references/")
    stated = f"Megatron-Bridge {r.bridge} with megatron-core {r.core}"
    ctx.expect(str(front.get("compatibility", "")).startswith(stated), f"the front matter's compatibility line does not start {stated!r}")
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        pins = {req.name: req.specifier for req in map(Requirement, str((front.get("metadata") or {}).get("targets", "")).split())}
    except InvalidRequirement as error:
        raise ClaimFailed(f"the front matter's metadata.targets is not a list of requirements: {error}") from None
    bridge_pin, core_pin = pins.get("megatron-bridge"), pins.get("megatron-core")
    ctx.expect(bridge_pin is not None and bridge_pin.contains(low) and bridge_pin.contains(high) and not bridge_pin.contains(_next(high)), f"metadata.targets pins megatron-bridge{bridge_pin}, not the range {r.bridge}")
    ctx.expect(core_pin is not None and core_pin.contains(r.core) and not core_pin.contains(_next(r.core)), f"metadata.targets pins megatron-core{core_pin}, not {r.core}")
    targets = card.get("targets", {})
    ctx.expect((targets.get("megatron-bridge"), targets.get("megatron-core")) == (r.bridge, r.core), f"{s.card} targets {targets.get('megatron-bridge')} / {targets.get('megatron-core')}, SKILL.md says {r.bridge} / {r.core}")

