"""A pool of worker subprocesses (runner/execute/worker.py), started on first use, each
importing Megatron once; a request that runs past its time or a worker that dies costs that
request (an `error` observation) and a restart, never the grading run."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..core import MbskillsError

IMPORT_TIMEOUT_S = 240.0  # the first import of torch and megatron on a cold 2-core machine
REQUEST_TIMEOUT_S = 30.0
MEMORY_MB = 8192  # address-space limit of a worker


class ExecuteError(MbskillsError):
    """The worker could not be started at all (no Megatron-Bridge installed, say)."""


class _Worker:
    def __init__(self, memory_mb: int, command: list[str] | None = None) -> None:
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "runner.execute.worker", "--memory-mb", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(root),
        )
        self.lines: "queue.Queue[str | None]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def receive(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return {"error": f"the worker exited (code {self.process.wait()})"}
            try:
                return json.loads(line)
            except ValueError:
                continue  # a stray print from an import, not a reply

    def send(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class ExecutePool:
    """`observe(request)` from any thread; requests are answered in order, one worker per
    slot, identical requests once."""

    def __init__(self, workers: int = 1, *, timeout_s: float = REQUEST_TIMEOUT_S, import_timeout_s: float = IMPORT_TIMEOUT_S, memory_mb: int = MEMORY_MB, command: list[str] | None = None) -> None:
        # `command`: another worker program speaking the same protocol (the tests' stand-ins)
        self.size, self.timeout_s, self.import_timeout_s, self.memory_mb, self.command = max(1, workers), timeout_s, import_timeout_s, memory_mb, command
        self.idle: "queue.Queue[_Worker | None]" = queue.Queue()
        for _ in range(self.size):
            self.idle.put(None)  # a slot; its worker starts on first use
        self.cache: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.started = 0  # workers started (each one import)
        self.import_s: list[float] = []

    def _start(self) -> _Worker | dict:
        try:
            worker = _Worker(self.memory_mb, self.command)
        except OSError as error:
            raise ExecuteError(f"cannot start the execute worker: {error}") from None
        ready = worker.receive(self.import_timeout_s)
        if not ready or not ready.get("ready"):
            worker.kill()
            return {"error": (ready or {}).get("error") or f"the worker did not import Megatron-Bridge within {self.import_timeout_s:.0f} s"}
        self.started += 1
        self.import_s.append(ready.get("import_s", 0.0))
        return worker

    def observe(self, request: dict) -> dict:
        key = json.dumps(request, sort_keys=True)
        with self.lock:
            if key in self.cache:
                return self.cache[key]
        worker = self.idle.get()
        try:
            if worker is None:
                started = self._start()
                if isinstance(started, dict):
                    return started
                worker = started
            worker.send(request)
            reply = worker.receive(self.timeout_s)
            if reply is None or "error" in reply and reply.get("fatal"):
                worker.kill()
                worker = None
                return {"error": f"the worker gave no answer within {self.timeout_s:.0f} s"} if reply is None else reply
            if worker.process.poll() is not None:
                worker = None
        finally:
            self.idle.put(worker)
        with self.lock:
            self.cache[key] = reply
        return reply

    def close(self) -> None:
        for _ in range(self.size):
            worker = self.idle.get()
            if worker is not None:
                worker.kill()
            self.idle.put(None)

    def __enter__(self) -> "ExecutePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
