#!/usr/bin/env python3
"""Benchmark of the execute grader: `mbskills grade` of the main job's offline replay (the
known-bad recorded answers under baseline, the known-good ones under skills and inline),
one worker importing Megatron-Bridge once. For timing only, the replay runs against a
scratch copy of the bundle whose admissions admit every written field and execute grader
(whatever the rounds decided), so that every execute behaviour is run.

Run: .venv/bin/python bench/execute.py [--repeat N] [--json FILE]
Measures each grade as a whole process (wall and CPU seconds, wait4), counts the verdicts
each grader gave from grades.jsonl, and exits 1 when the median wall time is over the
target (30 s on the 2-core CI machine, the import included)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MBSKILLS = Path(sys.executable).parent / "mbskills"
TARGET_S = 30.0


def timed(cmd: list[str]) -> tuple[float, float, int, str]:
    start = time.monotonic()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    _, _, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    out = (process.stdout.read() if process.stdout else "") + (process.stderr.read() if process.stderr else "")
    return wall, usage.ru_utime + usage.ru_stime, process.returncode if process.returncode is not None else 0, out


def admit_everything(root: Path) -> Path:
    """A scratch copy of the bundle whose admissions name every written grader (timing only)."""
    import shutil

    sys.path.insert(0, str(REPO))
    from runner.load import Bundle, bundle_cases, load_checks

    shutil.copytree(REPO / "skills", root / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "evals", root / "evals")
    shutil.copyfile(REPO / "card.yaml", root / "card.yaml")
    checks = load_checks(bundle_cases(Bundle(root)))
    every = sorted(c.fingerprint(key) for key, found in checks.items() for c in found if c.grader != "check")
    # figures that clear the bar, so that the scratch admission holds (timing only, never shipped)
    cleared = {"passes": 20, "fails": 20, "pass_precision": 1.0, "fail_precision": 1.0, "admissible": True}
    entry = {"figures": {"field": cleared, "execute": cleared}, "admitted_kinds": ["execute", "field"], "admitted": every}
    (root / "evals" / "admissions.yaml").write_text(json.dumps({"rounds": {"bench": entry}}))
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="grades to time (default 3; the median counts)")
    parser.add_argument("--json", default=str(REPO / "out" / "bench" / "execute.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mbskills-bench-execute-") as scratch:
        bundle = admit_everything(Path(scratch) / "bundle")
        run = Path(scratch) / "replay"
        model = f"replay:{bundle / 'evals' / 'calibration'}?baseline=bad-1"
        made = subprocess.run([str(MBSKILLS), "eval", "--model", model, "--bundle", str(bundle), "--conditions", "baseline,skills,inline", "--out", str(run), "--progress", "plain"], capture_output=True, text=True, cwd=REPO)
        if made.returncode != 0:
            print(made.stderr, file=sys.stderr)
            return 2
        rounds = []
        for _ in range(max(1, args.repeat)):
            wall, cpu, _, out = timed([str(MBSKILLS), "grade", str(run)])
            rounds.append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
        graders: Counter = Counter()
        records = 0
        for line in (run / "grades.jsonl").read_text().splitlines():
            grade = json.loads(line)
            records += 1
            for behaviour in grade["behaviours"]:
                if behaviour.get("grader") and behaviour.get("check_kind"):
                    graders[behaviour["grader"]] += 1
        headline = next((l for l in out.splitlines() if l.startswith("graded ")), "")
    wall = statistics.median(r["wall_s"] for r in rounds)
    figures = {"records": records, "cores": os.cpu_count(), "rounds": rounds, "median_wall_s": wall, "verdicts_by_grader": dict(graders), "target_s": TARGET_S, "headline": headline}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    print(f"grade of {records} replay records on {os.cpu_count()} cores: median {wall:.1f} s wall ({', '.join(f'{r['wall_s']:.1f} s / {r['cpu_s']:.1f} s CPU' for r in rounds)})")
    print("verdicts by grader: " + ", ".join(f"{g} {n}" for g, n in sorted(graders.items())))
    print(headline)
    ok = wall <= TARGET_S and graders.get("execute", 0) > 0
    print(f"{'ok' if ok else 'MISSED'}: target {TARGET_S:.0f} s with execute verdicts present (wrote {args.json})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
