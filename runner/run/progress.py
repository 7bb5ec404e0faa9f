"""Progress of an eval run: a rich bar on a terminal, one plain line per record elsewhere
(CI logs, pipes)."""

from __future__ import annotations

import os
import sys
from typing import TextIO


def _interactive(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


class PlainProgress:
    def __init__(self, total: int, stream: TextIO):
        self.total, self.done, self.stream = total, 0, stream
        self.width = len(str(total))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def advance(self, record: dict) -> None:
        self.done += 1
        status = record["status"] if record["status"] == "error" else record["finish"]
        extra = f"  {record['error']['kind']}: {record['error']['message'][:120]}" if record["error"] else ""
        source = "cached" if record["requests"] == 0 and record["cached_responses"] else f"{record['requests']} req"
        print(f"[{self.done:>{self.width}}/{self.total}] {status:<10} {record['key']}  {len(record['turns'])} turns, {source}, {record['latency_s']:.2f} s{extra}", file=self.stream, flush=True)


class RichProgress:
    def __init__(self, total: int, stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.errors = 0
        self.progress = Progress(
            TextColumn("[bold]eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[errors]} errors"),
            console=Console(file=stream),
            transient=False,
        )
        self.task = self.progress.add_task("eval", total=total, errors=0)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()
        return False

    def advance(self, record: dict) -> None:
        if record["status"] == "error":
            self.errors += 1
        self.progress.update(self.task, advance=1, errors=self.errors)


def make_progress(total: int, stream: TextIO | None = None, *, mode: str = "auto"):
    stream = stream or sys.stderr
    if mode == "rich" or (mode == "auto" and _interactive(stream)):
        return RichProgress(total, stream)
    return PlainProgress(total, stream)
