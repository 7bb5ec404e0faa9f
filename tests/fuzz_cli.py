"""A CLI runner for the property-based tests: one subprocess that imports `runner.cli` (and
what its commands load) once, then runs each request in a forked child, with the child's
stdout and stderr going to files. Starting a fresh interpreter per generated input would
cost about 0.3 s each; a fork costs milliseconds, and the child is the same `mbskills`
process a user runs, from `main(argv)` on, exit code and streams included.

Protocol: one JSON object per line on stdin, {"argv": [...], "cwd": "...", "env": {...}};
one JSON object per line on stdout, {"code": N, "stdout": "...", "stderr": "..."}. A child
that raises out of `main` prints the traceback as Python would and exits 1; one that runs
past `timeout` seconds is killed (code -9)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback


def _warm() -> None:
    # what the commands import on first use, so that each child starts with it loaded
    import jinja2  # noqa: F401
    import jsonschema  # noqa: F401
    import yaml  # noqa: F401

    import runner.cli  # noqa: F401
    from runner import grade, load, providers, report, run, validate  # noqa: F401
    from runner.core import schemas

    for name in schemas.SCHEMAS:
        schemas._validator(name)
    try:
        import anthropic  # noqa: F401
        import openai  # noqa: F401
    except ImportError:
        pass


def _child(request: dict, out: str, err: str) -> None:
    fd_out, fd_err = os.open(out, os.O_WRONLY | os.O_TRUNC), os.open(err, os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd_out, 1)
    os.dup2(fd_err, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    code = 1
    try:
        os.chdir(request.get("cwd") or os.getcwd())
        os.environ.clear()
        os.environ.update(request.get("env") or {})
        from runner.cli import main

        code = main(list(request["argv"]))
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # what an uncaught exception would print, and its exit status
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def serve() -> None:
    _warm()
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as work:
        _serve(os.path.join(work, "out"), os.path.join(work, "err"))


def _serve(out: str, err: str) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        for path in (out, err):
            open(path, "w").close()
        pid = os.fork()
        if pid == 0:
            _child(request, out, err)
        deadline = time.monotonic() + float(request.get("timeout", 60))
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.002)
        else:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
            reply = {"code": code, "stdout": o.read(), "stderr": e.read()}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class Runner:
    """The test side: start the server once, then `run(argv, cwd, env)` per input."""

    def __init__(self, python: str, root: str):
        import subprocess

        self.proc = subprocess.Popen([python, os.path.abspath(__file__)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
        self.runs = 0

    def run(self, argv: list[str], cwd: str, env: dict, timeout: float = 60) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "env": env, "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fuzz CLI server died")
        self.runs += 1
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(30)


if __name__ == "__main__":
    serve()
