"""Running one client process: an environment built from nothing, no terminal, a timeout
that ends its whole process group (and whatever it left behind), and with
`--isolate-network` its own network namespace whose only route is a relay to the model
endpoint."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..core import UsageError
from .jail import pump  # the same byte pump inside the namespace and out

JAIL = Path(__file__).with_name("jail.py")
INNER_PORT = 18181  # inside each client's own namespace, so never taken
STDERR_TAIL = 20  # lines of a failed client's stderr kept in its record


@dataclass
class Finished:
    rc: int | None  # None: killed on timeout
    stdout: str
    stderr: str
    seconds: float

    def stderr_tail(self) -> str:
        return "\n".join(self.stderr.strip().splitlines()[-STDERR_TAIL:])


def base_env(home: Path, binary: Path) -> dict[str, str]:
    """A HOME of its own with its XDG folders and TMPDIR; PATH with the client's folder and
    node; nothing of the caller's environment (no keys, no config) but what is added."""
    for sub in (".config", ".local/share", ".cache", ".local/state", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    node = shutil.which("node")
    folders = [str(binary.parent), *([str(Path(node).parent)] if node else []), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": os.pathsep.join(dict.fromkeys(folders)),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
    }


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def launch(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> Finished:
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
        rc = process.returncode
    except asyncio.TimeoutError:
        _kill_group(process.pid)
        out, err = await process.communicate()
        rc = None
    except asyncio.CancelledError:
        _kill_group(process.pid)
        raise
    finally:
        _kill_group(process.pid)  # daemons a client left behind go with its group
    return Finished(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - started)


# -- isolation -----------------------------------------------------------------------------
def isolation_prefix() -> list[str]:
    """`unshare --net` (mapping root when not root), checked to work here; UsageError if not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise UsageError("--isolate-network: unshare (util-linux) not found; install it or run without --isolate-network")
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    probe = subprocess.run([unshare, *flags, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else f"exit {probe.returncode}"
        raise UsageError(f"--isolate-network: cannot make a network namespace here ({why}); run without --isolate-network")
    return [unshare, *flags]


def relay_target(base_url: str | None) -> tuple[str, int]:
    """The host and port an isolated client's requests are relayed to: a plain-HTTP base
    URL only (a TLS endpoint's certificate would not match the relay's 127.0.0.1)."""
    if not base_url:
        raise UsageError("--isolate-network needs --base-url: the client inside reaches only that endpoint, relayed")
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise UsageError(f"--isolate-network: --base-url {base_url} must be an http:// URL (a local server or proxy); TLS cannot be relayed to 127.0.0.1")
    return parts.hostname, parts.port or 80


def inner_url(base_url: str) -> str:
    """The base URL as the isolated client sees it: the same path on its own loopback."""
    parts = urlsplit(base_url)
    return urlunsplit(("http", f"127.0.0.1:{INNER_PORT}", parts.path, parts.query, parts.fragment))


async def open_relay(socket_path: Path, host: str, port: int) -> asyncio.AbstractServer:
    """A Unix socket that relays each connection to host:port, byte for byte."""

    async def forward(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    return await asyncio.start_unix_server(forward, path=str(socket_path))


def jailed(prefix: list[str], socket_path: Path, argv: list[str]) -> list[str]:
    return [*prefix, sys.executable, "-S", str(JAIL), str(INNER_PORT), str(socket_path), "--", *argv]
