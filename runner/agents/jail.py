"""Runs inside a fresh network namespace (started through `unshare --net` by
`mbskills eval --isolate-network`, and by the client tests): brings up loopback, forwards
127.0.0.1:PORT to a Unix socket outside (the model endpoint's relay, or the scripted
server), runs the client and exits with its status. Loopback is the only interface, so the
client reaches nothing but that socket. Standard library only: it runs as a plain script.

usage: python jail.py PORT SOCKET -- ARGV...
"""

from __future__ import annotations

import asyncio
import subprocess
import sys


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main(port: int, socket_path: str, argv: list[str]) -> int:
    async def forward(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    async with server:
        # stdin closed: a headless client must not wait for a terminal.
        process = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL)
        return await process.wait()


if __name__ == "__main__":
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    port, socket_path, sep, *argv = sys.argv[1:]
    assert sep == "--", "usage: jail.py PORT SOCKET -- ARGV..."
    sys.exit(asyncio.run(main(int(port), socket_path, argv)))
