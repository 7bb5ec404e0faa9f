"""The GPU tier's launcher (gpu/validate.sh runs it): find the GPUs, install the prepared
wheels, run every GPU check under torchrun, write one results file.

    gpu/validate.sh [--out FILE] [--nproc N] [--only SKILL|CHECK] [--wheels DIR] [--timeout S]

Standard library only: it runs before anything is installed, on the GPU machine's own
Python. Steps, each stopping with one line on stderr when it cannot go on:
1. arguments (exit 2 on a bad one);
2. a CUDA GPU: `nvidia-smi` on PATH and answering, and torch.cuda.is_available() in this
   Python (exit 3 without one, before anything is installed);
3. the wheels pinned in gpu/wheels.txt, from .whl/ (gitignored, filled by
   gpu/prepare_wheels.sh) or --wheels, into a --target folder put first on PYTHONPATH
   (exit 4 when a pinned wheel is missing or pip fails);
4. per check, `torchrun --standalone --nproc_per_node=N gpu/smoke.py --check NAME` under a
   timeout; each rank writes its result entry; a check that needs more than this machine
   has (2+ GPUs, Transformer Engine) is recorded as skipped with what it needs, never run;
5. the results file (runner/core/schemas/gpu-results.schema.json; default $OUT/gpu-results.json
   when $OUT is set, else out/gpu/gpu-results.json), a table, and exit 0 when no check
   failed or crashed, 1 otherwise.
Logs of each check go to gpu-logs/ beside the results file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runner.claims.gpu import discover  # noqa: E402 - stdlib only at import

# Every GPU check the skills of this bundle carry (skills/<skill>/checks/, stdlib at import).
CHECKS = discover(REPO)

PROG = "gpu/validate.sh"
PINS = REPO / "gpu" / "wheels.txt"
FORMAT = "mbskills-gpu-results/1"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU, EXIT_SETUP = 0, 1, 2, 3, 4
DEFAULT_TIMEOUT = 240
RESULT_KEYS = ("skill", "claim", "check", "status", "reason", "losses", "seconds", "details")
VERSION_DISTRIBUTIONS = {
    "torch": "torch",
    "megatron-core": "megatron-core",
    "megatron-bridge": "megatron-bridge",
    "transformers": "transformers",
    "transformer-engine": "transformer-engine",
    "nvidia-resiliency-ext": "nvidia-resiliency-ext",
    "nvidia-modelopt": "nvidia-modelopt",
}


class Stop(Exception):
    """Ends the run with one line on stderr and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# --- 1. arguments ---------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise Stop(EXIT_USAGE, f"error: {message} (see {PROG} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run the GPU checks of every skill (a tiny GPT through Megatron-Bridge's pretrain() with each SKILL.md's enablement block) and write one results file for `mbskills check --gpu-results`.")
    parser.add_argument("--out", help="results file (default: $OUT/gpu-results.json when $OUT is set, else out/gpu/gpu-results.json)")
    parser.add_argument("--nproc", help="processes per check, one per GPU (default: every GPU present)")
    parser.add_argument("--only", choices=sorted({c.skill for c in CHECKS.values()} | set(CHECKS)), metavar="SKILL|CHECK", help="only this skill's checks, or only this check")
    parser.add_argument("--wheels", help="folder of prepared wheels (default: .whl/ at the repository root, when present)")
    parser.add_argument("--timeout", default=str(DEFAULT_TIMEOUT), help=f"seconds per check before it is stopped (default: {DEFAULT_TIMEOUT})")
    return parser


@dataclass
class Options:
    out: Path
    nproc: int | None
    only: str | None
    wheels: Path
    timeout: float


def parse_args(argv: list[str], environ: dict[str, str] | None = None) -> Options:
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    nproc = None
    if args.nproc is not None:
        if not re.fullmatch(r"[0-9]+", args.nproc) or int(args.nproc) < 1:
            raise Stop(EXIT_USAGE, f"error: --nproc must be a whole number of at least 1, not {args.nproc!r} (see {PROG} --help)")
        nproc = int(args.nproc)
    try:
        timeout = float(args.timeout)
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise Stop(EXIT_USAGE, f"error: --timeout must be a positive number of seconds, not {args.timeout!r} (see {PROG} --help)")
    if args.wheels is not None:
        wheels = Path(args.wheels)
        if not wheels.is_dir():
            raise Stop(EXIT_USAGE, f"error: --wheels {args.wheels}: no such folder (gpu/prepare_wheels.sh fills .whl/)")
    else:
        wheels = REPO / ".whl"
    if args.out:
        out = Path(args.out)
    elif environ.get("OUT"):
        out = Path(environ["OUT"]) / "gpu-results.json"
    else:
        out = REPO / "out" / "gpu" / "gpu-results.json"
    if out.is_dir():
        raise Stop(EXIT_USAGE, f"error: --out {out} is a folder; give the results file's path")
    return Options(out, nproc, args.only, wheels, timeout)


# --- 2. the GPUs ----------------------------------------------------------------------


@dataclass
class Host:
    gpu_model: str
    gpu_count: int
    driver: str
    cuda: str | None


def detect_gpus(python: str, environ: dict[str, str]) -> Host:
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi is None:
        raise Stop(EXIT_NO_GPU, "no CUDA GPU found (nvidia-smi is not on PATH); run this on a machine with an NVIDIA GPU and its driver")
    try:
        query = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=60, env=environ)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Stop(EXIT_NO_GPU, f"no CUDA GPU found (nvidia-smi did not answer: {error})") from None
    rows = [[cell.strip() for cell in line.split(",")] for line in query.stdout.splitlines() if line.strip()]
    if query.returncode != 0 or not rows or len(rows[0]) < 2:
        detail = " ".join((query.stderr or query.stdout).split())[:200] or f"exit status {query.returncode}"
        raise Stop(EXIT_NO_GPU, f"no CUDA GPU found (nvidia-smi lists none: {detail})")
    probe = "import json, torch; print(json.dumps([torch.cuda.is_available(), torch.cuda.device_count() if torch.cuda.is_available() else 0, torch.version.cuda]))"
    try:
        answer = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300, env=environ)
        available, count, cuda = json.loads(answer.stdout.strip().splitlines()[-1])
    except Exception:  # no torch, a torch that crashes, garbage on stdout
        available, count, cuda = False, 0, None
    if not available or count < 1:
        raise Stop(EXIT_NO_GPU, f"no CUDA GPU found (torch.cuda.is_available() is False in {python}, although nvidia-smi lists {rows[0][0]})")
    return Host(rows[0][0], int(count), rows[0][1], cuda)


# --- 3. the wheels --------------------------------------------------------------------


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    install_if_not: str | None  # a specifier the machine's own copy may already satisfy


def read_pins(path: Path = PINS) -> list[Pin]:
    pins = []
    for line in path.read_text("utf-8").splitlines():
        requirement, _, comment = line.partition("#")
        requirement = requirement.strip()
        if not requirement:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", requirement)
        if not match:
            raise ValueError(f"{path}: {requirement!r} is not NAME==VERSION")
        condition = re.search(r"install-if-not:\s*(\S+)", comment)
        pins.append(Pin(match.group(1), match.group(2), condition.group(1) if condition else None))
    return pins


def wheel_key(filename: str) -> tuple[str, str]:
    name, version = Path(filename).name.split("-")[:2]
    return _normalise(name), version


def _already_satisfied(pin: Pin) -> str | None:
    """The machine's own version when it satisfies the pin's install-if-not specifier."""
    if pin.install_if_not is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version

        from packaging.requirements import Requirement
    except ImportError:
        return None
    try:
        have = version(pin.name)
    except PackageNotFoundError:
        return None
    return have if Requirement(pin.install_if_not).specifier.contains(have, prereleases=True) else None


def plan_wheels(folder: Path, pins: list[Pin]) -> tuple[list[Path], list[str]]:
    """(wheels to install, notes on pins the machine already satisfies); Stop when one is missing."""
    available = {wheel_key(p.name): p for p in folder.glob("*.whl")}
    chosen, notes, missing = [], [], []
    for pin in pins:
        kept = _already_satisfied(pin)
        if kept is not None:
            notes.append(f"{pin.name}: keeping the machine's {kept} ({pin.install_if_not})")
            continue
        wheel = available.get((_normalise(pin.name), pin.version))
        if wheel is None:
            missing.append(f"{pin.name}=={pin.version}")
        else:
            chosen.append(wheel)
    if missing:
        raise Stop(EXIT_SETUP, f"{folder}: no wheel for {', '.join(missing)}; run gpu/prepare_wheels.sh on a machine with PyPI")
    return chosen, notes


def install(python: str, wheels: list[Path], site: Path, environ: dict[str, str]) -> None:
    command = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)]
    done = subprocess.run(command, capture_output=True, text=True, env=environ)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip() and not line.startswith("WARNING:")]
        detail = " ".join((lines or ["exit status " + str(done.returncode)])[-1].split())
        if "is not a supported wheel on this platform" in detail:  # e.g. nvidia-resiliency-ext 0.6.0 is manylinux_2_39 only
            try:
                detail += f" (this machine: {os.confstr('CS_GNU_LIBC_VERSION')})"
            except (ValueError, OSError):
                pass
        raise Stop(EXIT_SETUP, f"installing {len(wheels)} wheels into {site} failed: {detail}")


def probe_versions(python: str, environ: dict[str, str]) -> dict[str, str | None]:
    names = json.dumps(VERSION_DISTRIBUTIONS)
    probe = (
        "import json, platform\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        f"names = json.loads({names!r})\n"
        "out = {'python': platform.python_version()}\n"
        "for key, name in names.items():\n"
        "    try:\n"
        "        out[key] = version(name)\n"
        "    except PackageNotFoundError:\n"
        "        out[key] = None\n"
        "if out['transformer-engine'] is None:\n"
        "    import importlib.util\n"
        "    if importlib.util.find_spec('transformer_engine') is not None:\n"
        "        out['transformer-engine'] = 'unknown'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=environ, timeout=120)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("torch", "megatron-core", "megatron-bridge", "transformers"):
        found[key] = found.get(key) or "absent"
    return found


# --- 4. the checks --------------------------------------------------------------------


def selected_checks(only: str | None) -> list[str]:
    return [name for name, check in CHECKS.items() if only is None or only in (name, check.skill)]


def skip_reason(name: str, nproc: int, te_version: str | None) -> str | None:
    """Why this machine cannot run the check, in the words the results keep; None: it can."""
    check = CHECKS[name]
    needs = []
    if nproc < check.min_gpus:
        needs.append(f"at least {check.min_gpus} GPUs (this run has {nproc})")
    elif nproc % check.divisible_by:
        needs.append(f"a GPU count divisible by {check.divisible_by} (this run has {nproc})")
    if check.needs_te and te_version is None:
        needs.append("Transformer Engine (not installed here)")
    return f"needs {' and '.join(needs)}" if needs else None


def _entry(name: str, status: str, reason: str, seconds: float = 0.0, losses: list | None = None, details: dict | None = None) -> dict:
    check = CHECKS[name]
    entry = {"skill": check.skill, "claim": check.claim, "check": name, "status": status, "reason": reason, "losses": losses or [], "seconds": round(seconds, 3)}
    if details:
        entry["details"] = details
    return entry


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    useful = [line.strip() for line in text if line.strip()]
    return " | ".join(useful[-lines:])[-400:]


def collect(name: str, fragments: Path, nproc: int) -> dict | None:
    """Rank 0's entry, else the first rank's that reports a crash."""
    entries = []
    for rank in range(nproc):
        path = fragments / f"{name}.rank{rank}.json"
        try:
            entries.append(json.loads(path.read_text("utf-8")))
        except (OSError, ValueError):
            continue
    if not entries:
        return None
    crashed = [e for e in entries if e.get("status") == "error"]
    rank0 = next((e for e in entries if e.get("rank", 0) == 0), None)
    chosen = rank0 if rank0 is not None and (rank0.get("status") != "error" or not crashed) else (crashed[0] if crashed else entries[0])
    if chosen.get("status") == "error" and chosen.get("rank", 0) != 0:
        chosen["reason"] = f"rank {chosen['rank']}: {chosen['reason']}"
    return {k: chosen[k] for k in RESULT_KEYS if k in chosen}


def run_check(name: str, python: str, nproc: int, options: Options, env: dict[str, str], logs: Path, fragments: Path, scratch: Path) -> dict:
    workdir = scratch / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    for stale in fragments.glob(f"{name}.rank*.json"):
        stale.unlink()
    check_env = dict(env)
    check_env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)  # none inherited: FSDP rejects 1
    check_env.update(CHECKS[name].env)  # what the skill's check asks to be launched with
    command = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(REPO / "gpu" / "smoke.py"), "--check", name, "--out-dir", str(fragments), "--workdir", str(workdir)]
    log = logs / f"{name}.log"
    say(f"{name}: torchrun --standalone --nproc_per_node={nproc} gpu/smoke.py --check {name} (log: {log})")
    start = time.perf_counter()
    timed_out = False
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=check_env, cwd=REPO, start_new_session=True)
        try:
            code = process.wait(timeout=options.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                code = process.wait()
    seconds = time.perf_counter() - start
    entry = collect(name, fragments, nproc)
    if timed_out:
        losses = entry["losses"] if entry else []
        return _entry(name, "error", f"timed out after {options.timeout:g} s (see {log.name}): {_tail(log)}", seconds, losses)
    if entry is None:
        return _entry(name, "error", f"torchrun exited with status {code} and no rank wrote a result (see {log.name}): {_tail(log)}", seconds)
    entry["seconds"] = round(seconds, 3)  # wall time, imports and start-up included
    return entry


# --- 5. results ---------------------------------------------------------------------------


def format_table(results: list[dict]) -> str:
    rows = [("check", "claim", "status", "seconds", "final loss")]
    for r in results:
        final = r["losses"][-1] if r["losses"] else None
        rows.append((r.get("check", ""), r["claim"], r["status"], f"{r['seconds']:.1f}", "-" if final is None else f"{final:.4f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(widths[i]) if i >= 3 else cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r["status"] != "passed":
            lines.append(f"{r.get('check', r['claim'])}: {r['status']}: {r['reason']}")
    return "\n".join(lines)


def write_results(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n", "utf-8")
    os.replace(temporary, path)


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    python = environ.get("MBSKILLS_GPU_PYTHON") or sys.executable  # runs pip, the torch probes and torchrun
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv, environ)
        host = detect_gpus(python, environ)
        nproc = options.nproc or host.gpu_count
        if nproc > host.gpu_count:
            raise Stop(EXIT_USAGE, f"error: --nproc {nproc} is more than the {host.gpu_count} GPUs present")
        started = time.perf_counter()
        env = dict(environ)
        if options.wheels.is_dir():
            site = Path(environ.get("MBSKILLS_GPU_SITE", "/tmp/mbskills-gpu-site"))
            wheels, notes = plan_wheels(options.wheels, read_pins())
            for note in notes:
                say(note)
            say(f"installing {len(wheels)} wheels from {options.wheels} into {site}")
            install(python, wheels, site, environ)
            env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)] + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []))
        else:
            say(f"no wheels folder at {options.wheels}: using what this Python has (gpu/prepare_wheels.sh fills .whl/)")
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []))
        env["PYTHONNOUSERSITE"] = "1"
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        env.setdefault("MEGATRON_SUPPRESS_FUSION_WARNINGS", "1")
        versions = probe_versions(python, env)
    except Stop as stop:
        say(str(stop))
        return stop.code

    logs = options.out.parent / "gpu-logs"
    fragments = logs / "fragments"
    fragments.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="mbskills-gpu-"))
    results = []
    try:
        for name in selected_checks(options.only):
            reason = skip_reason(name, nproc, versions.get("transformer-engine"))
            if reason is not None:
                say(f"{name}: {reason}")
                results.append(_entry(name, "skipped", reason))
                continue
            results.append(run_check(name, python, nproc, options, env, logs, fragments, scratch))
            say(f"{name}: {results[-1]['status']} in {results[-1]['seconds']:.1f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    payload = {
        "format": FORMAT,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "host": {"gpu_model": host.gpu_model, "gpu_count": host.gpu_count, "driver": host.driver, "cuda": host.cuda},
        "versions": versions,
        "nproc": nproc,
        "seconds": round(time.perf_counter() - started, 3),
        "checks": results,
    }
    write_results(options.out, payload)
    print(format_table(results))
    counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "skipped", "error")}
    say(f"wrote {options.out}: {counts['passed']} passed, {counts['failed'] + counts['error']} failed, {counts['skipped']} skipped in {payload['seconds']:.0f} s on {nproc} x {host.gpu_model}")
    return EXIT_FAILED if counts["failed"] or counts["error"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
