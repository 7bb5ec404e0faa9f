"""A run directory: `run.json` (what was asked), `records.jsonl` (one record per case x
condition x trial, appended as each completes) and a lock.

Resuming: the same command on the same folder skips records already written, retries
records that ended in an error (their old line is dropped first, by write-then-rename),
and drops a last line cut short by a kill. A record key appears at most once in the file.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ..core import UsageError, write_atomic

RUN_FILE, RECORDS_FILE, LOCK_FILE = "run.json", "records.jsonl", ".lock"


def record_key(case_key: str, condition: str, trial: int) -> str:
    return f"{case_key}#{condition}#{trial}"


def read_records(path: Path) -> tuple[list[dict], bool]:
    """Records of a records.jsonl, and whether a cut-off last line was left out."""
    if not path.exists():
        return [], False
    records, raw = [], path.read_bytes()
    lines = raw.split(b"\n")
    truncated = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        last = number == len(lines)  # no newline after it: the write never finished
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "key" not in record:
                raise ValueError("not a record")
        except ValueError:
            if last:
                truncated = True
                continue
            raise UsageError(f"{path}:{number}: not a run record (damaged file); move it away to start over") from None
        if last:
            truncated = True  # complete JSON but no newline: keep it, rewrite the file
        records.append(record)
    return records, truncated


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self._lock_fd: int | None = None
        self._records_fd: int | None = None

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS_FILE

    def _lock(self) -> None:
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UsageError(f"{self.path}: another mbskills eval is writing this run (pid {holder}); wait for it or choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def open(self, run_info: dict, identity_fields: tuple[str, ...]) -> dict[str, dict]:
        """Lock the folder, check it belongs to this command, and return the finished
        records by key (error records are dropped so that they run again)."""
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path}: exists and is not a folder")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot create the run directory ({exc.strerror or exc})") from None
        self._lock()
        run_file = self.path / RUN_FILE
        if run_file.exists():
            try:
                previous = json.loads(run_file.read_text())
            except ValueError:
                raise UsageError(f"{run_file}:1: not JSON; this folder is not a run directory") from None
            for field in identity_fields:
                if previous.get(field) != run_info.get(field):
                    raise UsageError(f"{self.path}: made by a different command ({field}: {json.dumps(previous.get(field))} there, {json.dumps(run_info.get(field))} now); use another --out")
        elif set(os.listdir(self.path)) - {LOCK_FILE}:
            raise UsageError(f"{self.path}: not empty and not a run directory; choose another --out")
        write_atomic(run_file, json.dumps(run_info, indent=2) + "\n")
        records, truncated = read_records(self.records_path)
        kept = {r["key"]: r for r in records if r.get("status") == "ok"}
        if truncated or len(kept) != len(records):
            write_atomic(self.records_path, "".join(json.dumps(r) + "\n" for r in kept.values()))
        self._records_fd = os.open(self.records_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return kept

    def append(self, record: dict) -> None:
        # One write() of one whole line on an O_APPEND descriptor: a kill leaves either
        # the full line or a cut-off last line, which the next open drops.
        assert self._records_fd is not None
        os.write(self._records_fd, (json.dumps(record) + "\n").encode())

    def close(self) -> None:
        for fd in (self._records_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._records_fd = self._lock_fd = None


def load_run(path: Path) -> tuple[dict, list[dict]]:
    """run.json and the records of a run directory, for `show` and grading."""
    run_file = path / RUN_FILE
    if not run_file.is_file():
        raise UsageError(f"{path}: not a run directory (no {RUN_FILE})")
    try:
        info = json.loads(run_file.read_text())
    except ValueError:
        raise UsageError(f"{run_file}:1: not JSON") from None
    records, _ = read_records(path / RECORDS_FILE)
    return info, records

