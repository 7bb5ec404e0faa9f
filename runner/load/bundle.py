"""The bundle as the stages see it: found from where the user stands, its eval cases (each
evals file once, ids unique run-wide), selections of them, and the fingerprint of
everything a model could see."""

from __future__ import annotations

import fnmatch
import hashlib
from pathlib import Path

from ..core import LoadError, UsageError
from .cases import Case, read_evals
from .skills import EVALS_FILE, PRIVATE_DIRS, Bundle, Skill, find_bundle, is_bundle

# This package's own checkout, when it runs from one (an editable install or a clone).
SOURCE_CHECKOUT = Path(__file__).resolve().parents[2]


def resolve_bundle(explicit: str | Path | None, *, recorded: str | None = None, start: Path | None = None) -> Bundle:
    """The bundle a command works on: `explicit` (--bundle), else `recorded` (a run's
    run.json), else the nearest bundle at or above `start` (the working directory), else
    the checkout this package runs from. None of them: a UsageError saying what to pass."""
    if explicit or recorded:
        source = Path(explicit or recorded)
        if not is_bundle(source):
            raise UsageError(f"{source}: not a bundle (no skills/ folder); pass --bundle DIR")
        return Bundle(source.resolve())
    found = find_bundle(start or Path.cwd())
    if found is not None:
        return found
    if is_bundle(SOURCE_CHECKOUT):
        return Bundle(SOURCE_CHECKOUT)
    raise UsageError(f"no bundle at or above {start or Path.cwd()} (a folder with skills/); run inside one or pass --bundle DIR")


def bundle_cases(bundle: Bundle) -> list[Case]:
    # A symlink that leads nowhere is an error to report, not a skill without cases.
    files = [p for d in bundle.skill_dirs() if (p := d / EVALS_FILE).is_file() or p.is_symlink()]
    cases: list[Case] = []
    seen: dict[str, Case] = {}
    for path in files + bundle.bundle_eval_files():
        try:
            evals = read_evals(path)
        except LoadError as error:
            raise UsageError(f"{error.one_line()} (run `mbskills validate` for every finding)") from None
        if evals.findings:
            raise UsageError(f"{evals.findings[0].format()} (run `mbskills validate` for every finding)")
        for case in evals.cases:
            if case.key in seen:
                raise UsageError(f"{path}:{evals.case_line(case.index, 'id')}: evals/duplicate-id: case id {case.id!r} appears twice (records are keyed by it)")
            seen[case.key] = case
        cases.extend(evals.cases)
    return cases


def select_cases(cases: list[Case], *, skills: list[str] | None = None, pattern: str | list[str] | tuple[str, ...] | None = None, limit: int | None = None) -> list[Case]:
    """--skill keeps cases of that skill's evals file or expecting that skill; --case (one
    glob or several, any of which may match) is over `owner/id` or the bare id; --limit
    keeps the first N."""
    chosen = cases
    if skills:
        chosen = [c for c in chosen if c.owner in skills or c.expected_skill in skills]
    patterns = [pattern] if isinstance(pattern, str) else list(pattern or ())
    if patterns:
        chosen = [c for c in chosen if any(fnmatch.fnmatchcase(c.key, p) or fnmatch.fnmatchcase(str(c.id), p) for p in patterns)]
    if limit is not None:
        chosen = chosen[:limit]
    return chosen


def bundle_files(root: Path, skills: list[Skill], cases: list[Case]) -> dict[str, str]:
    """sha256 of every file that decides a run or its grades, by path under `root`: each
    skill's files but evals/ and checks/ (SKILL.md, references, scripts: what a model can see), and the
    evals files holding `cases` with their checks sidecars and the admissions of their
    graders (what grades the answers)."""
    from .checks import sidecar_for

    def name(path: Path) -> str:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()

    paths = []
    for skill in skills:
        # a skill's evals/ enters below, through the cases that come from it
        paths += [p for p in skill.root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.relative_to(skill.root).parts[0] not in PRIVATE_DIRS]
    for source in {c.source for c in cases}:
        paths += [source] + [s for s in (sidecar_for(source),) if s.is_file()]
    admissions = root / "evals" / "admissions.yaml"  # which field and execute graders decide
    if admissions.is_file():
        paths.append(admissions)
    return {name(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(paths)}


def fingerprint(files: dict[str, str]) -> str:
    """One hash of bundle_files(): it changes when any of those files does."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return digest.hexdigest()[:16]


def changed_files(then: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two bundle_files() maps, one phrase per file."""
    out = [f"{p} changed" for p in sorted(then.keys() & now.keys()) if then[p] != now[p]]
    out += [f"{p} removed" for p in sorted(then.keys() - now.keys())]
    out += [f"{p} added" for p in sorted(now.keys() - then.keys())]
    return out
