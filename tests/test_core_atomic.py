"""write_atomic: the target is either the old file or the new one, never a mix."""

from __future__ import annotations

import os

import pytest

from runner.core import write_atomic


def test_replaces_the_whole_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old and longer than the new text")
    write_atomic(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("old")

    def broken(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["run.json"]
