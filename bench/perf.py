#!/usr/bin/env python3
"""Performance benchmark: `mbskills eval` against the ideal, a bare SDK loop and inspect_ai,
on one asyncio model server with a fixed latency, in one invocation.

Run: bash run.sh bench            (builds .venv and .venv-bench, then runs this)
     .venv/bin/python bench/perf.py --inspect-python .venv-bench/bin/python [options]

Steps, each a process of its own, measured with wait4 (wall, CPU seconds, peak RSS):
 1. cold   mbskills eval, every case x baseline/skills/inline x --trials, -j 64, fresh cache
 2. warm   the same command into a new run dir with the same cache (must send 0 requests)
 3. bare   bench/bare_loop.py: the very requests of step 1, replayed by a bare asyncio loop
           of create() calls (the floor the targets use), and again the way the runner
           sends them (aiohttp transport, raw post(): the floor of that path)
    Steps 1-3 run --repeat times, interleaved; the table shows each one's median round.
 4. inspect_ai: the same requests as inspect samples, generate() + includes(), --max-connections 64
 5. grade  mbskills grade of the cold run (transcript + deterministic checks, no judge)
 6. check  mbskills check (claims against the pinned Megatron-Bridge; --skip-claims skips it)
 7. help   mbskills --help, median of 9
Prints a table, writes JSON (--json), exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TARGETS = {  # (what, limit); each is checked against the figure of the same name
    "vs_bare": 1.10,  # our wall / bare loop wall, at most
    "vs_inspect": 0.30,  # our wall / inspect_ai wall, at most
    "warm_s": 2.0,  # warm rerun wall seconds, at most (and 0 requests)
    "peak_mb": 250.0,  # peak RSS of the eval process, MB, at most
    "help_s": 0.3,  # mbskills --help median seconds, at most
}


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    peak_mb: float
    rc: int
    stdout: str
    stderr: str

    def figures(self) -> dict:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "peak_mb": self.peak_mb}


def measure(cmd: list[str], env: dict | None = None, cwd: Path = REPO) -> Measured:
    """Run one process to completion; its own CPU time and peak RSS come from wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def count_lines(path: Path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def median_round(rounds: list[dict]) -> dict:
    """The round with the median wall time (the lower middle one for an even count)."""
    return sorted(rounds, key=lambda r: r["wall_s"])[(len(rounds) - 1) // 2]


def must(step: str, m: Measured) -> Measured:
    if m.rc != 0:
        tail = (m.stderr.strip() or m.stdout.strip()).splitlines()[-5:]
        sys.exit(f"perf.py: {step} exited {m.rc}:\n  " + "\n  ".join(tail))
    return m


class Server:
    def __init__(self, latency: float):
        self.proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "server.py"), "--latency", str(latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            sys.exit("perf.py: the bench server did not start")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def get(self, path: str, method: str = "GET") -> bytes:
        request = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()

    def count(self) -> int:
        return json.loads(self.get("/bench/count"))["requests"]

    def reset(self) -> None:
        self.get("/bench/reset", "POST")

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def mbskills(*args: str) -> list[str]:
    return [str(BIN / "mbskills"), *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="at least this many records (and requests) in the cold run (default: 2000)")
    parser.add_argument("--latency", type=float, default=0.1, help="server latency per request, seconds (default: 0.1)")
    parser.add_argument("-j", "--jobs", type=int, default=64, help="requests in flight, for all three (default: 64)")
    parser.add_argument("--inspect-python", help="python of the venv with inspect_ai (default: skip inspect_ai)")
    parser.add_argument("--skip-claims", action="store_true", help="do not time `mbskills check` (it imports Megatron-Bridge: ~30 s)")
    parser.add_argument("--json", default=str(REPO / "out" / "bench" / "perf.json"), help="write the figures here (default: out/bench/perf.json)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of cold/warm/bare runs; the table shows medians (default: 1)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (run dirs, cache, bodies) and print its path")
    args = parser.parse_args()
    if args.records < 1 or args.jobs < 1 or args.repeat < 1 or args.latency < 0:
        parser.error("--records, -j and --repeat must be positive, --latency not negative")
    if args.inspect_python and not (Path(args.inspect_python).parent / "inspect").is_file():
        parser.error(f"--inspect-python {args.inspect_python}: no `inspect` command beside it (build .venv-bench with `bash run.sh bench`)")

    scratch = Path(tempfile.mkdtemp(prefix="mbskills-bench-"))
    base_env = {**os.environ, "OPENAI_API_KEY": "bench"}
    env = {**base_env, "MBSKILLS_CACHE": str(scratch / "cache-0.sqlite")}
    conditions = ("baseline", "skills", "inline")
    cases = json.loads(must("count cases", measure([sys.executable, "-c", "import json,sys; sys.path.insert(0,'.'); from runner.load import bundle_cases; from runner.load import Bundle; from pathlib import Path; print(len(bundle_cases(Bundle(Path('.')))))"])).stdout)
    trials = math.ceil(args.records / (cases * len(conditions)))
    server = Server(args.latency)
    figures: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "workload": {"cases": cases, "conditions": list(conditions), "trials": trials, "jobs": args.jobs, "latency_s": args.latency}}
    try:
        eval_args = ["eval", "--model", "openai:skilled", "--base-url", server.url + "/v1", "--conditions", ",".join(conditions), "--trials", str(trials), "-j", str(args.jobs), "--progress", "plain", "--bundle", str(REPO)]
        print(f"workload: {cases} cases x {len(conditions)} conditions x {trials} trials at -j {args.jobs}, {args.latency * 1000:.0f} ms latency, {args.repeat} round(s)", file=sys.stderr)
        bare_cmd = [sys.executable, str(REPO / "bench" / "bare_loop.py"), str(scratch / "bodies.jsonl"), "--base-url", server.url + "/v1", "-j", str(args.jobs)]
        samples: dict[str, list[dict]] = {"cold": [], "warm": [], "bare": [], "bare_fast": []}
        # Rounds interleave the contenders, so that a noisy moment on the machine does not
        # fall on one of them alone; the table shows each one's median round.
        for round_ in range(args.repeat):
            print(f"round {round_ + 1}: cold eval, warm eval (from the cache), bare loop, bare aiohttp+post loop", file=sys.stderr)
            env = {**base_env, "MBSKILLS_CACHE": str(scratch / f"cache-{round_}.sqlite")}
            server.reset()
            cold = must("cold eval", measure(mbskills(*eval_args, "--out", str(scratch / f"cold-{round_}")), env))
            requests = server.count()
            records = count_lines(scratch / f"cold-{round_}" / "records.jsonl")
            samples["cold"].append({"records": records, "requests": requests, **cold.figures(), "ideal_s": requests * args.latency / args.jobs, "cpu_ms_per_request": 1000 * cold.cpu_s / requests})
            if round_ == 0:
                (scratch / "bodies.jsonl").write_bytes(server.get("/bench/requests"))
            server.reset()
            warm = must("warm eval", measure(mbskills(*eval_args, "--out", str(scratch / f"warm-{round_}")), env))
            samples["warm"].append({"records": count_lines(scratch / f"warm-{round_}" / "records.jsonl"), "requests": server.count(), **warm.figures()})
            for name, extra in (("bare", []), ("bare_fast", ["--fast"])):
                server.reset()
                bare = must(f"bare loop {' '.join(extra)}", measure(bare_cmd + extra))
                samples[name].append({"requests": server.count(), "loop_s": json.loads(bare.stdout)["loop_s"], **bare.figures()})
        for name, rounds in samples.items():
            figures[name] = {**median_round(rounds), "rounds_wall_s": [r["wall_s"] for r in rounds]}
        ideal = figures["cold"]["ideal_s"]
        records = figures["cold"]["records"]

        if args.inspect_python:
            print("inspect_ai: the same requests as samples", file=sys.stderr)
            server.reset()
            inspect_env = {**os.environ, "BENCH_BODIES": str(scratch / "bodies.jsonl"), "BENCH_API_KEY": "bench", "BENCH_BASE_URL": server.url + "/v1", "INSPECT_LOG_DIR": str(scratch / "inspect-logs")}
            inspect_cmd = [str(Path(args.inspect_python).parent / "inspect"), "eval", "bench/inspect_task.py", "--model", "openai-api/bench/skilled", "--max-connections", str(args.jobs), "--no-log-samples", "--display", "none", "--log-level", "error"]
            done = must("inspect eval", measure(inspect_cmd, inspect_env))
            figures["inspect_ai"] = {"requests": server.count(), **done.figures()}
    finally:
        server.close()

    print("grade: transcript and deterministic checks", file=sys.stderr)
    env = {**base_env, "MBSKILLS_CACHE": str(scratch / "cache-0.sqlite")}
    graded = measure(mbskills("grade", str(scratch / "cold-0")), env)
    if graded.rc not in (0, 1):  # 1 is a quality gate, not a harness failure
        must("grade", graded)
    figures["grade"] = {"records": records, "wall_s": graded.wall_s, "records_per_s": records / graded.wall_s, "peak_mb": graded.peak_mb}

    if not args.skip_claims:
        print("check: claims against the pinned Megatron-Bridge", file=sys.stderr)
        checked = measure(mbskills("check", "--out", str(scratch / "claims")), env)
        figures["claims"] = {"rc": checked.rc, **checked.figures()}

    helps = sorted(must("--help", measure(mbskills("--help"))).wall_s for _ in range(9))
    figures["help"] = {"median_s": statistics.median(helps), "min_s": helps[0], "max_s": helps[-1]}

    figures["ratios"] = {
        "vs_ideal": figures["cold"]["wall_s"] / ideal,
        "vs_bare": figures["cold"]["wall_s"] / figures["bare"]["wall_s"],
        "vs_bare_fast": figures["cold"]["wall_s"] / figures["bare_fast"]["wall_s"],
    }
    if "inspect_ai" in figures:
        figures["ratios"]["vs_inspect"] = figures["cold"]["wall_s"] / figures["inspect_ai"]["wall_s"]
    figures["targets"] = check_targets(figures)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(table(figures))
    print(f"\nJSON: {out}")
    if args.keep:
        print(f"scratch: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if all(t["met"] for t in figures["targets"].values() if t["met"] is not None) else 1


def check_targets(f: dict) -> dict:
    actual = {
        "vs_bare": f["ratios"]["vs_bare"],
        "vs_inspect": f["ratios"].get("vs_inspect"),
        "warm_s": f["warm"]["wall_s"] if f["warm"]["requests"] == 0 else math.inf,
        "peak_mb": f["cold"]["peak_mb"],
        "help_s": f["help"]["median_s"],
    }
    return {k: {"limit": limit, "actual": actual[k], "met": None if actual[k] is None else actual[k] <= limit} for k, limit in TARGETS.items()}


def table(f: dict) -> str:
    c, w, b = f["cold"], f["warm"], f["bare"]
    rows = [
        ("ideal (requests x latency / jobs)", f"{c['ideal_s']:.2f}", "", "", f"{c['requests']}"),
        ("mbskills eval, cold", f"{c['wall_s']:.2f}", f"{c['cpu_s']:.2f}", f"{c['peak_mb']:.0f}", f"{c['requests']} ({c['records']} records)"),
        ("bare AsyncOpenAI loop, same requests", f"{b['wall_s']:.2f}", f"{b['cpu_s']:.2f}", f"{b['peak_mb']:.0f}", f"{b['requests']}"),
        ("bare loop, aiohttp + raw post()", f"{f['bare_fast']['wall_s']:.2f}", f"{f['bare_fast']['cpu_s']:.2f}", f"{f['bare_fast']['peak_mb']:.0f}", f"{f['bare_fast']['requests']}"),
    ]
    if "inspect_ai" in f:
        i = f["inspect_ai"]
        rows.append(("inspect_ai 0.3.285, same requests", f"{i['wall_s']:.2f}", f"{i['cpu_s']:.2f}", f"{i['peak_mb']:.0f}", f"{i['requests']}"))
    rows.append(("mbskills eval, warm (all cached)", f"{w['wall_s']:.2f}", f"{w['cpu_s']:.2f}", f"{w['peak_mb']:.0f}", f"{w['requests']} ({w['records']} records)"))
    g = f["grade"]
    rows.append((f"mbskills grade, no judge ({g['records_per_s']:.0f} records/s)", f"{g['wall_s']:.2f}", "", f"{g['peak_mb']:.0f}", "0"))
    if "claims" in f:
        rows.append(("mbskills check (claims, CPU)", f"{f['claims']['wall_s']:.2f}", f"{f['claims']['cpu_s']:.2f}", f"{f['claims']['peak_mb']:.0f}", ""))
    rows.append(("mbskills --help (median of 9)", f"{f['help']['median_s']:.3f}", "", "", ""))
    lines = ["| step | wall s | CPU s | peak MB | requests |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    r = f["ratios"]
    lines += ["", f"mbskills eval cold / ideal {r['vs_ideal']:.2f}x, / bare loop {r['vs_bare']:.2f}x, / bare aiohttp+post loop {r['vs_bare_fast']:.2f}x" + (f", / inspect_ai {r['vs_inspect']:.2f}x" if "vs_inspect" in r else "")]
    lines += ["", "| target | limit | actual | met |", "|---|---:|---:|---|"]
    for name, t in f["targets"].items():
        actual = "n/a" if t["actual"] is None else f"{t['actual']:.3f}"
        lines.append(f"| {name} | {t['limit']} | {actual} | {'-' if t['met'] is None else 'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
