"""Running a behaviour's deterministic check (runner/load/checks.py reads the sidecars)
over an answer."""

from __future__ import annotations

from ..load import Check


def run_check(check: Check, answer: str) -> tuple[bool, str]:
    """(passed, why) for one answer: every `must` pattern found, no `must_not` pattern found."""
    for pattern in check.must:
        if not pattern.search(answer):
            return False, f"missing /{pattern.pattern}/"
    for pattern in check.must_not:
        found = pattern.search(answer)
        if found:
            return False, f"found /{pattern.pattern}/: {found.group(0)[:80]!r}"
    return True, "all patterns agree"
