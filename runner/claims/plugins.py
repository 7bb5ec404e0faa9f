"""Finding a skill's own claim checks: the plug-in convention.

A skill that states facts carries the checks for them in `skills/<skill>/checks/`, next to
its SKILL.md (left out of installs, as evals/ is). Every `*.py` file there whose name does
not start with `_` is a module of one package, imported in name order; the checks in it
register themselves with `runner.claims.kit.claim` (CPU tier) and `kit.gpu_check` (the GPU
run), and they belong to the skill whose folder holds them. A module may import its
siblings relatively (`from .core import fsdp_config`). `checks/drift-notes.yaml`, when
present, explains why a claim fails on an older release (`mbskills drift`).

The engine names no skill: what runs is what the skill folders hold. Standard library only
at import (gpu/launch.py reads the GPU checks before anything is installed), and so must a
check module be at its top level: megatron and torch are imported inside the checks.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from pathlib import Path

from ..core import UsageError

CHECKS_DIR = "checks"
DRIFT_NOTES = "drift-notes.yaml"
PACKAGE_PREFIX = "mbskills_checks_"

# package name -> skill name, for `claim()` to know whose check it registers
_PACKAGES: dict[str, str] = {}
# skill name -> (checks folder, fingerprint of its files) last loaded
_LOADED: dict[str, tuple[Path, str]] = {}


def checks_dir(skill_root: Path) -> Path:
    return Path(skill_root) / CHECKS_DIR


def check_modules(skill_root: Path) -> list[Path]:
    folder = checks_dir(skill_root)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.py") if p.is_file() and not p.name.startswith("_"))


def package_name(skill: str) -> str:
    return PACKAGE_PREFIX + "".join(ch if ch.isalnum() else "_" for ch in skill)


def skill_of_module(module: str) -> str | None:
    """The skill whose checks folder `module` (a dotted name) was loaded from."""
    return _PACKAGES.get(module.split(".", 1)[0])


def _fingerprint(modules: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in modules:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_skill_checks(skill_root: Path) -> list[str]:
    """Import the checks of the skill in `skill_root` (once per content: a second bundle
    holding the same skill with other checks replaces the first one's). Returns the modules
    imported. A module that fails to import is a UsageError naming its file."""
    from .registry import forget_skill

    root = Path(skill_root).resolve()
    skill = root.name
    modules = check_modules(root)
    key = (checks_dir(root), _fingerprint(modules))
    if _LOADED.get(skill) == key:
        return []
    forget_skill(skill)
    package = package_name(skill)
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
    _LOADED.pop(skill, None)
    if not modules:
        _LOADED[skill] = key
        return []
    module = types.ModuleType(package, f"the claim checks of skill {skill}")
    module.__path__ = [str(checks_dir(root))]
    module.__file__ = None
    sys.modules[package] = module
    _PACKAGES[package] = skill
    importlib.invalidate_caches()
    imported = []
    for path in modules:
        name = f"{package}.{path.stem}"
        if name in sys.modules:  # imported already by a sibling's relative import
            imported.append(name)
            continue
        try:
            importlib.import_module(name)
        except Exception as error:  # a broken plug-in is the skill's problem: say which file
            forget_skill(skill)
            raise UsageError(f"{path}: cannot import this skill's checks: {type(error).__name__}: {error}") from None
        imported.append(name)
    _LOADED[skill] = key
    return imported


def load_checks_of(skill_roots: list[Path]) -> None:
    for root in skill_roots:
        load_skill_checks(root)


def skill_roots(bundle_root: Path) -> list[Path]:
    """The skill folders of a bundle, without reading its card (gpu/launch.py has no YAML)."""
    skills = Path(bundle_root) / "skills"
    if not skills.is_dir():
        return []
    return sorted(p for p in skills.iterdir() if p.is_dir() and (p / "SKILL.md").is_file())
