"""Shared test helpers: the fixture bundle and a way to drop one bad file into a copy of it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
GOOD_BUNDLE = FIXTURES / "good-bundle"
BAD = FIXTURES / "bad"
SHARED_FORMATS = REPO.parent / "shared" / "formats"

# Where a bad file goes in the fixture bundle, by its name's prefix.
ROLES = {
    "skill-md-": "skills/demo-skill/SKILL.md",
    "skill-card-": "skills/demo-skill/card.yaml",
    "skill-evals-": "skills/demo-skill/evals/evals.json",
    "bundle-card-": "card.yaml",
    "bundle-evals-": "evals/{name}",
    "script-py-": "skills/demo-skill/scripts/{name}",
    "script-sh-": "skills/demo-skill/scripts/{name}",
    "standalone-evals-": None,  # validated on its own, outside any bundle
}


def place_bad_file(name: str, root: Path) -> Path:
    """Copy the good bundle to `root`, put bad file `name` in its role; return the path to validate."""
    for prefix, target in ROLES.items():
        if name.startswith(prefix):
            break
    else:
        raise KeyError(f"{name}: no role for this prefix")
    if target is None:
        dest = root / name
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BAD / name, dest)
        return dest
    bundle = root / "bundle"
    shutil.copytree(GOOD_BUNDLE, bundle)
    dest = bundle / target.format(name=name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BAD / name, dest)
    return bundle


@pytest.fixture
def good_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(GOOD_BUNDLE, bundle)
    return bundle


@pytest.fixture
def repo_bundle(tmp_path: Path) -> Path:
    """A copy of this repository's own bundle (skills, card, evals)."""
    bundle = tmp_path / "repo-bundle"
    bundle.mkdir()
    shutil.copytree(REPO / "skills", bundle / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "evals", bundle / "evals")
    shutil.copyfile(REPO / "card.yaml", bundle / "card.yaml")
    return bundle


def python() -> str:
    return sys.executable


SENTINEL_KEY = "sk-test-SENTINEL-0123456789abcdef"


@pytest.fixture
def sentinel_keys(monkeypatch) -> str:
    """Both SDKs' keys set to a sentinel (tests search written files for it), and no
    base URL or CI flag inherited from the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "CI"):
        monkeypatch.delenv(name, raising=False)
    return SENTINEL_KEY


def copy_bundle(tmp_path: Path) -> Path:
    """A copy of this repository's bundle (skills, evals, card) to change in a test."""
    root = tmp_path / "bundle"
    shutil.copytree(REPO / "skills", root / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "evals", root / "evals")
    shutil.copyfile(REPO / "card.yaml", root / "card.yaml")
    return root


@pytest.fixture
def repo_server():
    """Scripted models (tests/model_server.py) on 127.0.0.1 that know this bundle's cases."""
    from model_server import CaseInfo, ModelServer
    from runner.load import Bundle, bundle_cases

    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in bundle_cases(Bundle(REPO))}, {}).start()
    yield served
    served.stop()


def admit_every_grader(root: Path, kinds: tuple[str, ...] = ("check", "field", "execute")) -> Path:
    """Write ROOT/evals/admissions.yaml admitting every written grader of those kinds, as a
    round that cleared the bar would: for tests of what graders decide once admitted (the
    admission itself is tests/test_admission.py's)."""
    import yaml

    from runner.load import Bundle, bundle_cases, load_checks

    cases = bundle_cases(Bundle(root))
    graders = [c.fingerprint(key) for key, found in load_checks(cases).items() for c in found if c.grader in kinds]
    met = {"items": 40, "decided": 40, "passes": 20, "pass_precision": 1.0, "fails": 20, "fail_precision": 1.0, "admissible": True}
    entry = {"answers": "evals/rounds/test-fixture", "measured": "2026-12-07T00:00:00Z", "figures": {kind: dict(met) for kind in kinds},
             "admitted_kinds": list(kinds), "admitted": sorted(graders), "not_admitted": []}
    path = root / "evals" / "admissions.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"rounds": {"test-fixture": entry}}, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def admitted_repo(tmp_path_factory) -> Path:
    """A copy of this repository's bundle in which every written grader is admitted: for
    tests of what the graders decide, whatever the shipped rounds admitted."""
    root = copy_bundle(tmp_path_factory.mktemp("admitted"))
    admit_every_grader(root)
    return root
