"""Whole-file writes that a crash, a kill or a full disk can never leave half-done: write a
temporary file beside the target, flush it to disk, rename it over the target. A write
that fails (no space, a read-only folder) leaves the target as it was and is one line of
unusable input (exit 2) naming the path and the errno."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError
from .secrets import redact


def cannot_write(path: Path, exc: OSError) -> UsageError:
    """The one line a failed write becomes."""
    reason = exc.strerror or str(exc)
    errno = f", errno {exc.errno}" if exc.errno else ""
    return UsageError(f"{path}: cannot write ({reason}{errno}); nothing half-written was left, free space or fix the permissions and run the same command again")


def _temporary(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _stage(path: Path, text: str) -> Path:
    temporary = _temporary(path)
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(redact(text))  # a key never reaches a file
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from None
        raise
    return temporary


def write_atomic(path: Path, text: str) -> None:
    write_all_atomic({path: text})


def write_all_atomic(files: dict[Path, str]) -> None:
    """Several files together: every one is written in full beside its target before any is
    renamed into place, so running out of space leaves all of them as they were."""
    staged: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            staged[path] = _stage(path, text)
        for path, temporary in staged.items():
            try:
                os.replace(temporary, path)
            except OSError as exc:
                raise cannot_write(path, exc) from None
    finally:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)
