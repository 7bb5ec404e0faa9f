"""The package's one exception hierarchy and the finding every validation rule reports.

Each error class carries the exit code the CLI gives it, so the mapping from failure to
exit status lives here and is applied in one place (`cli.main`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


@dataclass(frozen=True, order=True)
class Finding:
    """What validation reports, one line each: `path:line: rule-id: message`."""

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


class MbskillsError(Exception):
    """Base of every error the package raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_USAGE

    def one_line(self) -> str:
        return " ".join(str(self).split())


class UsageError(MbskillsError):
    """Input the tool cannot work on at all (exit 2)."""


class LoadError(MbskillsError):
    """A file that cannot be read as what it should be; carries the Finding that says where."""

    def __init__(self, path: Path | str, line: int, rule: str, message: str):
        super().__init__(message)
        self.finding = Finding(str(path), max(int(line), 1), rule, message)

    @classmethod
    def from_finding(cls, finding: Finding) -> "LoadError":
        return cls(finding.path, finding.line, finding.rule, finding.message)

    def one_line(self) -> str:
        return self.finding.format()


class HarnessError(MbskillsError):
    """The harness could not do its part (a judge that cannot be asked, records that did not run): exit 3."""

    exit_code = EXIT_HARNESS
