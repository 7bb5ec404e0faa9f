"""Findings: what validation reports, one line each, `path:line: rule-id: message`."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str

    def format(self, relative_to: Path | None = None) -> str:
        shown = self.path
        if relative_to is not None:
            try:
                shown = os.path.relpath(self.path, relative_to)
            except ValueError:  # another drive; keep it absolute
                pass
            if shown.startswith(".." + os.sep + ".."):
                shown = self.path
        # One line, always: a message that carries a newline would break `path:line:` parsing.
        message = " ".join(self.message.split())
        return f"{shown}:{self.line}: {self.rule}: {message}"

    def to_dict(self) -> dict:
        return asdict(self)


class LoadError(Exception):
    """A file that cannot be read as what it should be; becomes a Finding."""

    def __init__(self, path: Path | str, line: int, rule: str, message: str):
        super().__init__(message)
        self.finding = Finding(str(path), max(int(line), 1), rule, message)


class UsageError(Exception):
    """Input the tool cannot work on at all (exit 2)."""
