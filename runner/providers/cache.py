"""Response cache in SQLite: one row per request, keyed by everything that decides the
answer (provider, API, base URL, model, settings, system prompt, full message list,
tools, trial index). Rerunning a command makes no request that was answered before.
Errors are never cached."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

from ..core import UsageError, defaults, redact
from .base import Reply, Tool

SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, reply TEXT NOT NULL, created REAL NOT NULL)"


def default_path() -> Path:
    if os.environ.get("MBSKILLS_CACHE"):
        return Path(os.environ["MBSKILLS_CACHE"])
    return defaults.cache_home() / "responses.sqlite"


def request_key(identity: dict, system: str, messages: list[dict], tools: tuple[Tool, ...] | list[Tool], trial: int, arm: str | None = None) -> str:
    # The tools spelled out rather than through dataclasses.asdict, whose deep copy was most
    # of this function's time on a cached rerun; the JSON, and so the key, is the same.
    tool_dicts = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
    payload = {"identity": identity, "system": system, "messages": messages, "tools": tool_dicts, "trial": trial}
    if arm is not None:  # an A/A arm asks the model again: it must not read the first arm's answers
        payload["arm"] = arm
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"{path}: cannot use as the response cache ({exc})") from None
        self.hits = 0
        self.stores = 0

    def get(self, key: str) -> Reply | None:
        row = self.db.execute("SELECT reply FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            reply = Reply.from_dict(json.loads(row[0]))
        except (ValueError, KeyError, TypeError):  # a damaged row is a miss, and is replaced
            return None
        self.hits += 1
        return reply

    def put(self, key: str, reply: Reply) -> None:
        self.db.execute("INSERT OR REPLACE INTO responses (key, reply, created) VALUES (?, ?, ?)", (key, redact(json.dumps(reply.to_dict())), time.time()))
        self.stores += 1

    def close(self) -> None:
        self.db.close()


def open_cache(path: str | None, disabled: bool, provider) -> "ResponseCache | NoCache":
    """The cache a command asked for; providers that answer locally (replay) get none."""
    if disabled or not provider.cacheable:
        return NoCache()
    return ResponseCache(Path(path) if path else default_path())


class NoCache:
    path = None
    hits = stores = 0

    def get(self, key: str) -> Reply | None:
        return None

    def put(self, key: str, reply: Reply) -> None:
        return None

    def close(self) -> None:
        return None
