"""Install skills into an agent's skills folder (default .agents/skills) and verify them later.

A copy leaves out each skill's evals/ (ground truth must not reach the model) and records
every file's sha256 in a manifest beside DEST (`.mbskills-<DEST name>.json` in DEST's
parent: inside DEST a client would take it for a skill, as Qwen Code warns); `verify`
compares the folder with it. `link` makes each DEST/<skill> a symlink to the skill's folder
(a client such as Codex does not discover a symlinked SKILL.md). Reinstalling is safe: each
skill is staged beside DEST and swapped in by rename, and a copy that was edited since
install is only overwritten with --force.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..core import UsageError, write_atomic
from ..load import PRIVATE_DIRS, Bundle

LEGACY_MANIFEST = ".mbskills-manifest.json"  # where earlier installs put it; read, and moved out on reinstall
LEFT_OUT_DIRS = {"__pycache__", ".pytest_cache", *PRIVATE_DIRS}
LEFT_OUT_SUFFIXES = {".pyc", ".pyo"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _shipped(root: Path) -> list[Path]:
    """The files of a skill that are installed, relative to its root (not evals/ or checks/)."""
    out = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in LEFT_OUT_DIRS or any(p in LEFT_OUT_DIRS for p in relative.parts):
            continue
        if path.is_file() and path.suffix not in LEFT_OUT_SUFFIXES:
            out.append(relative)
    return out


def _refuse_escapes(root: Path) -> None:
    """A symlink inside a skill that leads out of it (or nowhere) would install a file the
    skill does not own; refuse before anything is written."""
    inside = root.resolve()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_symlink() or any(p in LEFT_OUT_DIRS for p in relative.parts):
            continue
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise UsageError(f"{path}: a symlink that leads nowhere (or loops); fix or remove it before installing") from None
        if not target.is_relative_to(inside):
            raise UsageError(f"{path}: a symlink out of the skill (to {target}); install does not follow it")


@dataclass
class Difference:
    kind: str  # added | changed | missing
    path: str  # relative to DEST

    def format(self) -> str:
        return f"{self.kind}: {self.path}"


@dataclass
class InstallResult:
    dest: Path
    manifest: Path
    installed: list[str] = field(default_factory=list)
    files: int = 0


def manifest_path(dest: Path) -> Path:
    dest = Path(os.path.realpath(dest))  # a folder reached through a link keeps one manifest
    return dest.parent / f".mbskills-{dest.name}.json"


def read_manifest(dest: Path) -> dict | None:
    path = manifest_path(dest)
    if not path.exists():
        path = dest / LEGACY_MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: manifest is unreadable ({exc}); reinstall with --force") from None
    if not isinstance(data, dict) or not isinstance(data.get("skills"), dict):
        raise UsageError(f"{path}: manifest has no 'skills' mapping; reinstall with --force")
    return data


def _prepare_dest(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: exists and is not a directory")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{dest}: cannot create directory ({exc.strerror or exc})") from None
    for folder in (dest, manifest_path(dest).parent):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{folder}: directory is not writable")


def install(bundle: Bundle, dest: Path, *, link: bool = False, force: bool = False) -> InstallResult:
    _prepare_dest(dest)
    manifest = None
    try:
        manifest = read_manifest(dest)
    except UsageError:
        if not force:
            raise
    manifest = manifest or {"skills": {}}
    skills = bundle.skill_dirs()
    if not skills:
        raise UsageError(f"{bundle.skills_dir}: no skills to install")
    for skill in skills:
        _refuse_escapes(skill)

    if not force:
        problems = []
        for skill in skills:
            target = dest / skill.name
            if not target.exists() and not target.is_symlink():
                continue
            if skill.name not in manifest["skills"]:
                problems.append(f"{target} exists and was not installed by mbskills")
                continue
            problems += [f"{dest / d.path} {d.kind} since install" for d in _verify_skill(dest, skill.name, manifest["skills"][skill.name])]
        if problems:
            raise UsageError("refusing to overwrite local changes: " + "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "") + " (rerun with --force to overwrite)")

    result = InstallResult(dest, manifest_path(dest))
    for skill in skills:
        entry = _install_one(skill, dest, link)
        manifest["skills"][skill.name] = entry
        result.installed.append(skill.name)
        result.files += len(entry["files"])

    manifest.update(tool="mbskills", tool_version=__version__, bundle_root=str(bundle.root), dest=str(Path(os.path.abspath(dest))), installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    write_atomic(result.manifest, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    legacy = dest / LEGACY_MANIFEST
    if legacy.exists():
        legacy.unlink()
    return result


def _install_one(skill: Path, dest: Path, link: bool) -> dict:
    staging = dest / f".mbskills-staging-{skill.name}-{os.getpid()}"
    retired = dest / f".mbskills-retired-{skill.name}-{os.getpid()}"
    for leftover in (staging, retired):
        _remove(leftover)
    try:
        if link:
            # The folder itself: clients skip a SKILL.md that is a symlink, not a folder link.
            os.symlink(skill.resolve(), staging, target_is_directory=True)
            entry = {"mode": "link", "source": str(skill.resolve()), "files": {}}
        else:
            staging.mkdir()
            files = {}
            for relative in _shipped(skill):
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(skill / relative, target)
                files[relative.as_posix()] = _sha256(target)
            entry = {"mode": "copy", "source": str(skill.resolve()), "files": files}
        final = dest / skill.name
        if final.is_dir() and not final.is_symlink():
            os.replace(final, retired)
        elif final.exists() or final.is_symlink():
            final.unlink()
        os.replace(staging, final)
    except BaseException:
        _remove(staging)
        if retired.exists() and not (dest / skill.name).exists():
            os.replace(retired, dest / skill.name)  # put the old copy back
        raise
    _remove(retired)
    return entry


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _verify_skill(dest: Path, name: str, entry: dict) -> list[Difference]:
    root, out = dest / name, []
    recorded = entry.get("files", {})
    if entry.get("mode") == "link" and not recorded:  # a folder link
        if not root.is_symlink():
            return [Difference("missing" if not root.exists() else "changed", f"{name}/")]
        if os.readlink(root) != entry.get("source"):
            return [Difference("changed", f"{name}/")]
        if not (root / "SKILL.md").is_file():
            return [Difference("missing", f"{name}/SKILL.md")]
        return []
    if not root.is_dir():
        return [Difference("missing", f"{name}/")]
    if entry.get("mode") == "link":  # per-file links, as earlier installs made them
        for entry_name, info in recorded.items():
            path = root / entry_name
            if not path.is_symlink() and not path.exists():
                out.append(Difference("missing", f"{name}/{entry_name}"))
            elif not path.is_symlink() or os.readlink(path) != info.get("link"):
                out.append(Difference("changed", f"{name}/{entry_name}"))
        for entry_name in sorted(p.name for p in root.iterdir()):
            if entry_name not in recorded:
                out.append(Difference("added", f"{name}/{entry_name}"))
        return out
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    for relative, digest in sorted(recorded.items()):
        path = root / relative
        if relative not in present:
            out.append(Difference("missing", f"{name}/{relative}"))
        elif path.is_symlink() or _sha256(path) != digest:
            out.append(Difference("changed", f"{name}/{relative}"))
    for relative in sorted(present - set(recorded)):
        out.append(Difference("added", f"{name}/{relative}"))
    return out


def verify(dest: Path) -> list[Difference]:
    if not dest.exists():
        raise UsageError(f"{dest}: no such folder; nothing was installed there")
    if not dest.is_dir():
        raise UsageError(f"{dest}: not a directory")
    manifest = read_manifest(dest)
    if manifest is None:
        raise UsageError(f"{dest}: no manifest ({manifest_path(dest)}); was it installed with `mbskills install`?")
    out = []
    for name, entry in sorted(manifest["skills"].items()):
        if not isinstance(entry, dict):
            raise UsageError(f"{manifest_path(dest)}: entry for {name!r} is not an object; reinstall with --force")
        out += _verify_skill(dest, name, entry)
    return out


def uninstall(dest: Path, *, force: bool = False) -> list[str]:
    """Remove the skills the manifest records from DEST, and the manifest. A copy edited
    since install stays unless `force`: then nothing is removed. Other folders in DEST,
    and a linked skill's source, are left alone."""
    if not dest.is_dir():
        raise UsageError(f"{dest}: no such folder; nothing was installed there")
    manifest = read_manifest(dest)
    if manifest is None:
        raise UsageError(f"{dest}: no manifest ({manifest_path(dest)}); nothing here was installed by mbskills")
    entries = manifest["skills"]
    if not force:
        problems = [f"{dest / d.path} {d.kind} since install" for name, entry in sorted(entries.items()) for d in _verify_skill(dest, name, entry) if d.kind != "missing"]
        if problems:
            raise UsageError("refusing to remove local changes: " + "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "") + " (rerun with --force to remove them too)")
    removed = []
    for name in sorted(entries):
        target = dest / name
        if target.is_symlink() or target.exists():
            _remove(target)  # a link goes, never what it points to
            removed.append(name)
    for path in (manifest_path(dest), dest / LEGACY_MANIFEST):
        if path.exists():
            path.unlink()
    return removed
