#!/usr/bin/env python3
"""Benchmark: wall time of `mbskills --help` and `mbskills validate .` (median of N runs).

Run: .venv/bin/python tests/benchmarks/cli_startup.py [--runs 15]
docs/architecture.md quotes its output; targets live here, not in timed tests.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGETS = {"--help": 0.3, "validate .": 2.0}  # seconds, median


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=REPO, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    failed = False
    for label, target in TARGETS.items():
        samples = sorted(timed(label.split()) for _ in range(args.runs))
        median = statistics.median(samples)
        ok = median <= target
        failed |= not ok
        print(f"mbskills {label:<11} median {median * 1000:7.1f} ms  min {samples[0] * 1000:7.1f} ms  max {samples[-1] * 1000:7.1f} ms  target <= {target * 1000:.0f} ms  {'ok' if ok else 'SLOW'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
