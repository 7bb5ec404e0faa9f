"""The claim registry and the context each check receives.

A check is a function registered with `@claim(skill, claim_id)`. It gets a `Context`
holding its SKILL.md section and fails by raising `ClaimFailed` (or AssertionError) with
a message saying what is no longer true. Checks compare in both directions: the library
must behave as the skill says, and the skill must still say it (`ctx.says`).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core import MbskillsError
from .sections import ClaimSection


class ClaimFailed(MbskillsError, AssertionError):
    """The claim is not true for the installed release, or the skill no longer states it."""


TIERS = ("cpu", "gpu")


@dataclass(frozen=True)
class Check:
    skill: str
    claim_id: str
    func: Callable[["Context"], None]
    tier: str = "cpu"  # gpu: the claim itself needs a GPU run; `func` is what a CPU can check of it


CHECKS: dict[tuple[str, str], Check] = {}


def claim(skill: str, claim_id: str, tier: str = "cpu") -> Callable[[Callable[["Context"], None]], Callable[["Context"], None]]:
    """Register a check. A `tier="gpu"` check runs on CPU too, but only to build and validate
    what the GPU run (gpu/validate.sh) will train; passing it reports the claim as needing a GPU."""
    if tier not in TIERS:
        raise ValueError(f"{skill}/{claim_id}: tier must be one of {TIERS}, not {tier!r}")

    def register(func: Callable[["Context"], None]) -> Callable[["Context"], None]:
        key = (skill, claim_id)
        if key in CHECKS:
            raise RuntimeError(f"two checks registered for {skill}/{claim_id}")
        CHECKS[key] = Check(skill, claim_id, func, tier)
        return func

    return register


def _squash(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Context:
    skill: str
    skill_root: Path
    section: ClaimSection
    sections: dict[str, ClaimSection]

    def sibling(self, claim_id: str) -> "Context":
        """Another claim of the same skill, e.g. the enablement block other claims build on."""
        if claim_id not in self.sections:
            raise ClaimFailed(f"SKILL.md lost claim {claim_id}, which claim {self.section.claim_id} builds on")
        return Context(self.skill, self.skill_root, self.sections[claim_id], self.sections)

    # --- what the skill says -----------------------------------------------------------

    def says(self, *phrases: str) -> None:
        """Each phrase must appear in this claim's section (whitespace-insensitive)."""
        text = self.section.text
        for phrase in phrases:
            if _squash(phrase) not in text:
                raise ClaimFailed(f"SKILL.md no longer says {phrase!r} under claim {self.section.claim_id}")

    def number_after(self, label: str) -> int:
        """The integer that follows `label` (e.g. 'bucket_size =') in the section."""
        match = re.search(re.escape(label) + r"\s*([0-9][0-9_]*)", self.section.text)
        if not match:
            raise ClaimFailed(f"SKILL.md states no number after {label!r} under claim {self.section.claim_id}")
        return int(match.group(1).replace("_", ""))

    def code(self, index: int = 0) -> str:
        blocks = self.section.code_blocks
        if len(blocks) <= index:
            raise ClaimFailed(f"claim {self.section.claim_id} has no code block #{index + 1} in SKILL.md")
        return blocks[index]

    def apply(self, cfg: Any, index: int = 0) -> Any:
        """Execute the section's code block with `cfg` bound, as a user pasting it would."""
        namespace: dict[str, Any] = {"cfg": cfg}
        exec(compile(self.code(index), f"{self.section.path}:claim:{self.section.claim_id}", "exec"), namespace)  # noqa: S102 - the skill's own snippet is the subject under test
        return namespace["cfg"]

    def symbols(self) -> list[str]:
        """Backticked dotted names under this claim that start with `megatron.`."""
        return re.findall(r"`(megatron(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", self.section.text)

    def resolve_symbols(self, minimum: int) -> list[Any]:
        """Import every code anchor named under this claim; at least `minimum` must be named."""
        names = self.symbols()
        self.expect(len(names) >= minimum, f"only {len(names)} code anchors are named under claim {self.section.claim_id}")
        return [resolve_symbol(name) for name in names]

    def load_script(self, relative: str) -> Any:
        """Import one of the skill's scripts as a module (what an agent would run)."""
        import importlib.util
        import sys

        path = self.skill_root / relative
        self.expect(path.is_file(), f"{relative} is missing from the skill")
        self.says(relative)
        name = f"mbskills_script_{self.skill_root.name}_{path.stem}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses in the script look their module up here
        spec.loader.exec_module(module)
        return module

    # --- what the library does ------------------------------------------------------------

    @staticmethod
    def expect_raises(action: Callable[[], Any], kind: type[BaseException], message: str) -> BaseException:
        try:
            action()
        except kind as error:
            if _squash(message) not in _squash(str(error)):
                raise ClaimFailed(f"{kind.__name__} raised with {str(error)!r}, not {message!r}") from None
            return error
        except Exception as error:  # a different failure is a failed claim too
            raise ClaimFailed(f"expected {kind.__name__} {message!r}, got {type(error).__name__}: {error}") from None
        raise ClaimFailed(f"expected {kind.__name__} {message!r}, but nothing was raised")

    @staticmethod
    def expect(condition: bool, message: str) -> None:
        if not condition:
            raise ClaimFailed(message)


def resolve_symbol(dotted: str) -> Any:
    """Import the longest module prefix of `dotted`, then walk attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name and (module == error.name or module.startswith(error.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise ClaimFailed(f"{dotted}: importing {module} failed: {error}") from None
        except ImportError as error:
            raise ClaimFailed(f"{dotted}: importing {module} failed: {error}") from None
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                raise ClaimFailed(f"{dotted}: {'.'.join(parts[:cut])} has no attribute path {'.'.join(parts[cut:])!r}")
            obj = getattr(obj, attribute)
        return obj
    raise ClaimFailed(f"{dotted}: no importable module")


def source_of(obj: Any) -> str:
    return _squash(inspect.getsource(obj))
