"""Skills and bundles on disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import LoadError, UsageError
from .parsing import SkillDocument, read_text, split_frontmatter

SKILL_FILE = "SKILL.md"
CARD_FILE = "card.yaml"
EVALS_FILE = Path("evals") / "evals.json"
# A skill's folders for the project, not the agent: its eval cases (ground truth) and its
# claim checks. Installs, the skill tools and the run's fingerprint leave them out.
PRIVATE_DIRS = frozenset({"evals", "checks"})


@dataclass
class Skill:
    root: Path
    document: SkillDocument

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def skill_md(self) -> Path:
        return self.root / SKILL_FILE

    @property
    def frontmatter(self) -> dict:
        return self.document.frontmatter.data

    @property
    def description(self) -> str:
        value = self.frontmatter.get("description")
        return value.strip() if isinstance(value, str) else ""

    @property
    def body(self) -> str:
        return self.document.body


def load_skill(root: Path) -> Skill:
    """Read a skill folder's SKILL.md; raises LoadError when it is absent or unreadable."""
    skill_md = root / SKILL_FILE
    if not skill_md.is_file():
        raise LoadError(skill_md, 1, "skill/missing", "skill folder has no SKILL.md")
    return Skill(root, split_frontmatter(skill_md, read_text(skill_md)))


@dataclass
class Bundle:
    """A folder holding skills/ (one folder per skill), card.yaml and evals/."""

    root: Path

    @property
    def card_path(self) -> Path:
        return self.root / CARD_FILE

    @property
    def skills_dir(self) -> Path:
        return self.root / "skills"

    @property
    def evals_dir(self) -> Path:
        return self.root / "evals"

    def skill_dirs(self) -> list[Path]:
        return sorted(p for p in self.skills_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def skill_names(self) -> set[str]:
        return {p.name for p in self.skill_dirs()}

    def require_skills(self, names: list[str] | tuple[str, ...] | None) -> None:
        """--skill values must name skills of this bundle."""
        unknown = set(names or ()) - self.skill_names()
        if unknown:
            raise UsageError(f"--skill: no such skill in {self.root}: {', '.join(sorted(unknown))}")

    def bundle_eval_files(self) -> list[Path]:
        if not self.evals_dir.is_dir():
            return []
        return sorted(p for p in self.evals_dir.glob("*.json") if p.is_file() or p.is_symlink())


def is_bundle(path: Path) -> bool:
    return (path / "skills").is_dir()


def is_skill(path: Path) -> bool:
    return (path / SKILL_FILE).is_file()


def find_bundle(start: Path) -> Bundle | None:
    """The nearest bundle at or above `start` (a skill's parent's parent, usually)."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if is_bundle(candidate):
            return Bundle(candidate)
    return None


def owning_skill_root(path: Path) -> Path | None:
    """For skills/<name>/evals/evals.json, the folder skills/<name>."""
    path = path.resolve()
    for parent in path.parents:
        if is_skill(parent):
            return parent
    return None
