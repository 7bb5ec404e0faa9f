"""What the GPU tier's CPU-side tests share: the skills and claims it covers, gpu/launch.py
(standard library only) and the claim-check fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "gpu"))
import launch  # noqa: E402,F401 - gpu/launch.py, standard library only; the tests import it from here

FSDP = "nemo-mbridge-perf-megatron-fsdp"
OVERLAP = "nemo-mbridge-perf-tp-dp-comm-overlap"
MOE = "nemo-mbridge-perf-moe-ep-comm-overlap"
GPU_CLAIMS = {(FSDP, "fsdp-gpu-train-save-resume"), (OVERLAP, "overlap-gpu-dp-overlap-trains"), (OVERLAP, "overlap-gpu-tp-overlap"), (MOE, "moe-gpu-overlap-trains")}


@pytest.fixture(scope="module")
def checks():
    """The registered claim checks (imports Megatron-Bridge once per module)."""
    from runner.claims.plugins import skill_roots
    from runner.claims.run import load_checks

    return load_checks(skill_roots(REPO))


def skill_module(skill: str, stem: str):
    """A module of a skill's checks/ folder, as the engine loaded it (after `checks`)."""
    from runner.claims.plugins import load_skill_checks, package_name

    load_skill_checks(REPO / "skills" / skill)
    return sys.modules[f"{package_name(skill)}.{stem}"]


def context(skill: str, claim: str, root: Path = REPO):
    from runner.claims.gpu import skill_context

    return skill_context(root, skill, claim)


def snapshot_cards(bundle: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted((bundle / "skills").glob("*/card.yaml"))}
