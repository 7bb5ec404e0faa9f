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
from dataclasses import dataclass
from pathlib import Path

from ..core import UsageError, cannot_write, check_schema, redact, write_atomic

RUN_FILE, RECORDS_FILE, LOCK_FILE = "run.json", "records.jsonl", ".lock"
# A record's status: answered, failed for good (runs again on resume), out of turns, or
# cut off by the output limit (the model's own outcome: kept, and graded as a failure).
OK, ERROR, TURN_LIMIT, TRUNCATED = "ok", "error", "turn_limit", "truncated"
FINISHED = (OK, TURN_LIMIT, TRUNCATED)  # records a rerun keeps
# Stop reasons that mean the output limit cut the reply: Chat Completions, Messages, Responses.
TRUNCATION_STOPS = frozenset({"length", "max_tokens", "max_output_tokens"})


def record_key(case_key: str, condition: str, trial: int) -> str:
    return f"{case_key}#{condition}#{trial}"


def read_numbered(path: Path) -> tuple[list[tuple[int, dict]], bool]:
    """(line number, record) of a records.jsonl, and whether a cut-off last line was left out."""
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
        records.append((number, record))
    return records, truncated


def read_records(path: Path) -> tuple[list[dict], bool]:
    """Records of a records.jsonl, and whether a cut-off last line was left out."""
    numbered, truncated = read_numbered(path)
    return [record for _, record in numbered], truncated


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self._lock_fd: int | None = None
        self._records_fd: int | None = None
        self._made_lock = False

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS_FILE

    def _lock(self) -> None:
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise cannot_write(self.path / LOCK_FILE, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UsageError(f"{self.path}: another mbskills eval is writing this run (pid {holder}); wait for it or choose another --out") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError:
            pass  # the pid is only a hint for the "another eval" message; the lock holds without it
        self._lock_fd = fd

    def _refuse(self, message: str) -> UsageError:
        """Leave the user's folder as it was found: drop the lock file if this call made it."""
        self.close()
        if self._made_lock:
            (self.path / LOCK_FILE).unlink(missing_ok=True)
        return UsageError(message)

    def open(self, run_info: dict, identity_fields: tuple[str, ...]) -> dict[str, dict]:
        """Lock the folder, check it belongs to this command, and return the finished
        records by key (error records are dropped so that they run again). A run whose
        records all failed (a wrong --base-url, a bad key) may be reused by a corrected
        command; a refused folder is left as it was found."""
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path}: exists and is not a folder")
        if self.path.is_dir() and not (self.path / RUN_FILE).exists() and set(os.listdir(self.path)) - {LOCK_FILE}:
            raise UsageError(f"{self.path}: not empty and not a run directory; choose another --out")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot create the run directory ({exc.strerror or exc})") from None
        self._made_lock = not (self.path / LOCK_FILE).exists()
        self._lock()
        run_file = self.path / RUN_FILE
        numbered, truncated = read_numbered(self.records_path) if run_file.exists() else ([], False)
        for number, record in numbered:
            try:
                _check_record(self.records_path, number, record)
            except UsageError as bad:
                raise self._refuse(f"{bad}; move {self.records_path} away to start over") from None
        records = [record for _, record in numbered]
        kept = {r["key"]: r for r in records if r.get("status") in FINISHED}
        if run_file.exists():
            try:
                previous = json.loads(run_file.read_text(encoding="utf-8-sig"))
                if not isinstance(previous, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError):
                raise self._refuse(f"{run_file}:1: not a JSON object; this folder is not a run directory") from None
            changed = [f for f in identity_fields if previous.get(f) != run_info.get(f)]
            if changed and kept:
                field = changed[0]
                raise self._refuse(
                    f"{self.path}: made by a different command ({field}: {json.dumps(previous.get(field))} there, {json.dumps(run_info.get(field))} now) "
                    f"and holds {len(kept)} finished records; use another --out, or delete {self.path} to start over"
                )
        try:
            write_atomic(run_file, json.dumps(run_info, indent=2) + "\n")
            if truncated or len(kept) != len(records):
                write_atomic(self.records_path, "".join(json.dumps(r) + "\n" for r in kept.values()))
            self._records_fd = os.open(self.records_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except UsageError as failed:
            raise self._refuse(str(failed)) from None
        except OSError as exc:
            raise self._refuse(str(cannot_write(self.records_path, exc))) from None
        return kept

    def append(self, record: dict) -> None:
        # One whole line on an O_APPEND descriptor: a kill leaves either the full line or a
        # cut-off last line, which the next open drops; a write that fails (a full disk) is
        # cut back to where the line began, so no partial record is left.
        assert self._records_fd is not None
        line = (redact(json.dumps(record)) + "\n").encode()
        start = os.lseek(self._records_fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(line):
                written += os.write(self._records_fd, line[written:])
        except OSError as exc:
            try:
                os.ftruncate(self._records_fd, start)
            except OSError:
                pass  # the next open drops a cut-off last line all the same
            raise cannot_write(self.records_path, exc) from None

    def close(self) -> None:
        for fd in (self._records_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._records_fd = self._lock_fd = None


@dataclass(frozen=True)
class RunStatus:
    """How far a run got: the records its run.json asks for against those written."""

    expected: int
    finished: int  # ok or out of turns
    errors: int  # ended in an error (a rerun retries them)
    missing: int  # never written
    in_progress: bool  # an eval holds the run's lock now
    command: str | None

    @property
    def complete(self) -> bool:
        return self.finished == self.expected and not self.in_progress

    def line(self, path: Path) -> str:
        parts = [f"{self.missing} missing", f"{self.errors} ended in an error"]
        if self.in_progress:
            parts.append("an eval is still writing it")
        finish = f"`{self.command}`" if self.command else f"the same `mbskills eval` command with --out {path}"
        return f"{path}: incomplete: {self.finished} of {self.expected} records ({', '.join(parts)}); finish it with {finish}, or grade what is there with --allow-incomplete"

    def to_dict(self) -> dict:
        return {"expected": self.expected, "finished": self.finished, "errors": self.errors, "missing": self.missing, "in_progress": self.in_progress, "complete": self.complete}


def _locked(path: Path) -> bool:
    lock = path / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def run_status(path: Path, info: dict, records: list[dict]) -> RunStatus:
    expected = planned_keys(info)
    by_key = {r["key"]: r for r in records}
    finished = sum(1 for key in expected if by_key.get(key, {}).get("status") in FINISHED)
    errors = sum(1 for key in expected if by_key.get(key, {}).get("status") == ERROR)
    return RunStatus(len(expected), finished, errors, len(expected) - finished - errors, _locked(path), info.get("command"))


def planned_keys(info: dict) -> set[str]:
    """The record keys run.json asks for: its cases x conditions x trials."""
    return {record_key(case, condition, trial) for case in info["cases"] for condition in info["conditions"] for trial in range(info["trials"])}


def _where(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".") or "the line"


def _check_info(run_file: Path, info: object) -> dict:
    problems = check_schema("run", info)
    if problems:
        first = problems[0]
        raise UsageError(f"{run_file}: {'field ' + repr(_where(first.path)) + ' ' if first.path else ''}{first.message}")
    if type(info["trials"]) is not int:  # JSON Schema calls 2.0 an integer; range() does not
        raise UsageError(f"{run_file}: field 'trials' {info['trials']!r} is not a whole number")
    return info  # type: ignore[return-value]


def _check_record(records_file: Path, number: int, record: dict) -> None:
    problems = check_schema("record", record)
    if problems:
        first = problems[0]
        raise UsageError(f"{records_file}:{number}: field {_where(first.path)!r} {first.message}; this run directory was not written by this version of `mbskills eval`, or was edited")


def _check_plan(path: Path, info: dict, numbered: list[tuple[int, dict]]) -> None:
    """Every record belongs to the plan once, under the run's model: a run directory is one
    run, so that a rate counts the records it asked for and nothing else."""
    planned, first = planned_keys(info), {}
    records_file = path / RECORDS_FILE
    model = info["model"]
    for number, record in numbered:
        _check_record(records_file, number, record)
        key = record["key"]
        where = f"{records_file}:{number}"
        if key in first:
            raise UsageError(f"{where}: record {key} appears again (first on line {first[key]}); a run holds each record once, so rerun `mbskills eval` into a new --out")
        first[key] = number
        if key not in planned:
            raise UsageError(f"{where}: record {key} is outside this run's plan ({len(info['cases'])} cases x {', '.join(info['conditions'])} x {info['trials']} trials in run.json); rerun `mbskills eval` into a new --out")
        fields = (record.get("case"), record.get("condition"), record.get("trial"))
        if not isinstance(fields[2], int) or record_key(*fields) != key:
            raise UsageError(f"{where}: record {key} says case {fields[0]!r}, condition {fields[1]!r}, trial {fields[2]!r}, which is another record")
        theirs = record.get("model")
        if theirs != model:  # the whole identity: provider, API, URL, model and settings
            shown = f"{theirs.get('provider')}:{theirs.get('model')}" if isinstance(theirs, dict) else "no model"
            raise UsageError(f"{where}: record {key} was written by {shown}, this run is {model['provider']}:{model['model']}; rerun `mbskills eval` into a new --out")


def load_run(path: Path) -> tuple[dict, list[dict]]:
    """run.json and the records of a run directory, for `show` and grading; a record twice,
    outside the plan or from another model is unusable input, one line naming it."""
    run_file = path / RUN_FILE
    if not run_file.is_file():
        raise UsageError(f"{path}: not a run directory (no {RUN_FILE})")
    try:
        info = json.loads(run_file.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"{run_file}:1: not JSON") from None
    info = _check_info(run_file, info)
    numbered, _ = read_numbered(path / RECORDS_FILE)
    _check_plan(path, info, numbered)
    return info, [record for _, record in numbered]
