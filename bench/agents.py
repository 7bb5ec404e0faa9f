#!/usr/bin/env python3
"""Benchmark of `mbskills eval --agent`: the runner's overhead over invoking the same client
bare, on the same instant model server (bench/server.py, latency 0, the `plain` model that
answers at once), with the same concurrency.

Run: bash run.sh bench-agents                 (after `bash run.sh test` installed the clients)
     .venv/bin/python bench/agents.py [--client NAME ...] [--records N] [-j 4] [--repeat 3]

Per client and round, each a process tree of its own:
 1. runner  mbskills eval --agent CLIENT over N records (cases x baseline,skills), -j J
 2. bare    the very command lines the runner builds, in workspaces prepared beforehand
            (git project, HOME, config; the bundle installed for the skills records; not
            timed), J at a time from a thread pool: the floor
Each client's figure is the per-record ratio: the mean seconds a record takes in the runner
(its latency_s: workspace, install, the client, reading its stream, cleaning up) over the
mean seconds of the same client command bare (target: at most 1.2). The whole-command
ratio, which adds the runner's one-time start-up (imports, the bundle's validation), is
printed beside it. Peak memory is the
largest sum of resident memory over the whole process tree (runner or pool, every client
and its children), sampled every 50 ms. Rounds interleave; the table shows medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.agents import AGENT_CLIENTS, Endpoint  # noqa: E402
from runner.agents.process import base_env  # noqa: E402
from runner.agents.session import GIT, PINNED_BIN  # noqa: E402
from runner.install import destination, install  # noqa: E402
from runner.load import Bundle, bundle_cases  # noqa: E402
from runner.run.agent import user_message  # noqa: E402

TARGET = 1.2  # runner wall / bare wall, at most
MODELS = {"openai": "plain", "anthropic": "plain", "gemini": "plain"}
KEY = "sk-bench-offline-key"


class TreeMemory:
    """The largest total RSS of a process and all its descendants, sampled."""

    def __init__(self, root_pid: int):
        self.root, self.peak_kb, self._stop = root_pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _children() -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    parent = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                kids.setdefault(parent, []).append(int(entry))
        return kids

    def _sample(self) -> int:
        kids, total, todo = self._children(), 0, [self.root]
        while todo:
            pid = todo.pop()
            todo += kids.get(pid, [])
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, self._sample())
            self._stop.wait(0.05)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "server.py"), "--latency", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("port "):
        sys.exit("agents.py: the bench server did not start")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def base_url(provider: str, server: str) -> str:
    return f"{server}/v1" if provider == "openai" else server


def run_runner(client: str, server: str, n_cases: int, jobs: int, scratch: Path) -> dict:
    spec = AGENT_CLIENTS[client]
    out = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    shutil.rmtree(out)
    env = {**os.environ, "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "GEMINI_API_KEY": KEY}
    cmd = [str(Path(sys.executable).parent / "mbskills"), "eval", "--agent", client, "--model", f"{spec.provider}:{MODELS[spec.provider]}", "--base-url", base_url(spec.provider, server),
           "--conditions", "baseline,skills", "--limit", str(n_cases), "-j", str(jobs), "--out", str(out), "--progress", "plain"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    memory = TreeMemory(proc.pid)
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    peak = memory.stop()
    if proc.returncode != 0:
        sys.exit(f"agents.py: mbskills eval --agent {client} exited {proc.returncode}: {err.strip().splitlines()[-3:]}")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {"wall_s": wall, "peak_mb": peak, "records": len(records), "record_s": statistics.fmean(r["latency_s"] for r in records)}


def prepare(client: str, server: str, n_cases: int, scratch: Path) -> list[tuple[list[str], Path, dict]]:
    """The runner's own command lines and environments, in workspaces made up front."""
    spec = AGENT_CLIENTS[client]
    binary = PINNED_BIN / spec.binary
    bundle = Bundle(REPO)
    endpoint = Endpoint(spec.provider, MODELS[spec.provider], base_url(spec.provider, server), KEY)
    jobs = []
    for i, case in enumerate(bundle_cases(bundle)[:n_cases]):
        for condition in ("baseline", "skills"):
            root = scratch / f"bare-{i}-{condition}"
            project, home = root / "project", root / "home"
            project.mkdir(parents=True)
            home.mkdir()
            subprocess.run([*GIT, "init", "-q"], cwd=project, check=True)
            subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "bench"], cwd=project, check=True)
            if condition == "skills":
                install(bundle, destination(client, user=False, project=project, home=home))
            env = {**base_env(home, binary), **spec.configure(endpoint, home, project)}
            jobs.append((spec.command(binary, endpoint, user_message(case)), project, env))
    return jobs


def run_bare(jobs: list[tuple[list[str], Path, dict]], concurrency: int) -> dict:
    def one(job) -> float:
        argv, cwd, env = job
        began = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, start_new_session=True)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}")
        return time.perf_counter() - began

    memory = TreeMemory(os.getpid())
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        each = list(pool.map(one, jobs))
    wall = time.perf_counter() - start
    return {"wall_s": wall, "peak_mb": memory.stop(), "record_s": statistics.fmean(each)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", action="append", choices=list(AGENT_CLIENTS), help="client to measure (repeatable; default: all five)")
    parser.add_argument("--records", type=int, default=16, help="records per client and round: cases x (baseline, skills) (default: 16)")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="clients in flight (default: 4)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table shows medians (default: 3)")
    parser.add_argument("--json", default=str(REPO / "out" / "bench" / "agents.json"), help="write the figures here")
    args = parser.parse_args()
    clients = args.client or list(AGENT_CLIENTS)
    missing = [c for c in clients if not (PINNED_BIN / AGENT_CLIENTS[c].binary).exists()]
    if missing:
        sys.exit(f"agents.py: {', '.join(missing)} not installed in tests/clients; `bash run.sh test` installs the pinned clients")
    n_cases = max(1, args.records // 2)
    proc, server = start_server()
    results: dict[str, dict] = {}
    try:
        for client in clients:
            rounds = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="mbskills-bench-agents-") as scratch:
                    scratch = Path(scratch)
                    runner = run_runner(client, server, n_cases, args.jobs, scratch)
                    jobs = prepare(client, server, n_cases, scratch)
                    bare = run_bare(jobs, args.jobs)
                rounds.append({"runner": runner, "bare": bare, "ratio": runner["record_s"] / bare["record_s"], "whole_ratio": runner["wall_s"] / bare["wall_s"]})
            middle = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]
            results[client] = {"median": middle, "rounds": rounds, "ratio": middle["ratio"], "met": middle["ratio"] <= TARGET}
    finally:
        proc.stdin.close()
        proc.wait(10)
    print(f"eval --agent overhead, {n_cases * 2} records per client (cases x baseline,skills), -j {args.jobs}, {os.cpu_count()} CPUs, median of {args.repeat} rounds")
    print(f"{'client':<12} {'record s':>9} {'bare s':>7} {'ratio':>6}  {'command s':>9} {'bare s':>7} {'ratio':>6}  {'peak MB':>8} {'bare MB':>8}  per-record ratio <= {TARGET}")
    for client, r in results.items():
        m = r["median"]
        print(f"{client:<12} {m['runner']['record_s']:>9.3f} {m['bare']['record_s']:>7.3f} {r['ratio']:>6.2f}  {m['runner']['wall_s']:>9.2f} {m['bare']['wall_s']:>7.2f} {m['whole_ratio']:>6.2f}  {m['runner']['peak_mb']:>8.0f} {m['bare']['peak_mb']:>8.0f}  {'met' if r['met'] else 'MISSED'}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"records": n_cases * 2, "jobs": args.jobs, "cpus": os.cpu_count(), "target": TARGET, "clients": results}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["met"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
