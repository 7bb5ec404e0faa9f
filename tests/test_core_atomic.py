"""write_atomic: the target is either the old file or the new one, never a mix."""

from __future__ import annotations

import os

import pytest

from runner.core import UsageError, write_all_atomic, write_atomic


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
    # one line of unusable input naming the path and the errno, not an OSError traceback
    with pytest.raises(UsageError, match=r"run.json: cannot write \(No space left on device, errno 28\)"):
        write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_several_files_are_all_written_or_all_left_as_they_were(tmp_path, monkeypatch):
    old = {name: f"old {name}" for name in ("a.json", "b.md", "c.xml")}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    real = os.fsync
    calls = []

    def third_fails(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", third_fails)
    with pytest.raises(UsageError, match="c.xml: cannot write"):
        write_all_atomic({tmp_path / name: "new" for name in old})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old  # no mix, no temporary
