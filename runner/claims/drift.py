"""`mbskills drift`: every claim check run against several Megatron-Bridge releases, as a
claim x release matrix, with a reviewed note for each cell that fails on an older release.

Each release runs in its own interpreter: the pinned venv with only megatron-bridge
swapped, by a `pip install --no-deps --target` layer first on PYTHONPATH. `megatron` is a
namespace package and `megatron/bridge` a regular one, so the layer's copy shadows the
pinned one while megatron-core, torch and the rest stay the pinned ones. The versions the
run reports are compared with the release asked for, so a layer that did not shadow is an
error, never a silent pass.

Standard library only at import: torch and megatron load in the subprocesses alone.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..core import MbskillsError, UsageError, defaults, write_atomic
from .status import ERROR, FAILED, MISSING, NEEDS_GPU, OK_RESULTS, PASSED

SCHEMA = "mbskills-drift/1"
CLAIMS_SCHEMA = "mbskills-claims/1"
PACKAGE = "megatron-bridge"
COMPLETE = ".complete"  # written last into a layer; a layer without it is not used
RUNNER_ROOT = Path(__file__).resolve().parents[2]  # the folder holding this `runner` package
CELLS = {PASSED: "pass", FAILED: "FAIL", NEEDS_GPU: "gpu", ERROR: "error", MISSING: "no-check"}
NO_NOTE = "no note: explain this drift"
# A release is a version string and nothing that pip could read as an option or a path.
_IMPORT_CRASH = re.compile(r"(ModuleNotFoundError|ImportError)\b")
_RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9.]+)?$")

# What the subprocesses run. -P keeps the working directory off sys.path: `runner` and
# `megatron` come from PYTHONPATH and the venv only.
_VERSION_PROBE = "import importlib.metadata as m; print(m.version('megatron-bridge'))"
_CHECK = """\
import json, os, sys
from runner.cli import main
code = main(["check", "--bundle", sys.argv[1], "--out", sys.argv[2]])
bridge = sys.modules.get("megatron.bridge")
with open(os.path.join(sys.argv[2], "imported.json"), "w") as f:
    json.dump({"megatron.bridge": getattr(bridge, "__file__", None)}, f)
sys.stdout.flush(); sys.stderr.flush()
os._exit(code)  # skip torch's teardown; everything is written
"""


@dataclass
class ReleaseRun:
    release: str
    pinned: bool
    status: str  # "ok": the claims ran against this release; "error": they could not (message says why)
    message: str = ""
    versions: dict = field(default_factory=dict)
    seconds: float = 0.0
    results: list[dict] = field(default_factory=list)  # claims.json results: skill, claim, status, message, ...


@dataclass(frozen=True)
class Note:
    claims: tuple[str, ...]  # ids or globs
    releases: tuple[str, ...]  # versions or globs
    text: str
    line: int  # in the notes file
    path: Path | None = None
    skill: str | None = None  # a skill's own notes explain its claims only; None: any skill's

    def matches(self, claim: str, release: str, skill: str | None = None) -> bool:
        if self.skill is not None and skill is not None and skill != self.skill:
            return False
        return any(fnmatch.fnmatchcase(claim, c) for c in self.claims) and any(fnmatch.fnmatchcase(release, r) for r in self.releases)


@dataclass
class Cell:
    """A claim that holds on the pinned release and fails (FAIL or error) on another."""

    release: str
    skill: str
    claim: str
    status: str
    message: str
    note: str | None  # None: nobody has explained it yet


@dataclass
class DriftRun:
    table: str  # the claim x release table, failing cells and their notes below it
    json_path: Path
    md_path: Path
    ok: bool  # the pinned release ran and every claim passed there or needs a GPU
    pinned: str
    releases: list[ReleaseRun]
    cells: list[Cell]  # every drifted cell (holds on the pinned release, fails here), noted or not
    unexplained: list[Cell]  # those of `cells` no note explains
    stale_notes: list[Note] = field(default_factory=list)  # notes for releases that ran that match no failing cell


def default_cache() -> Path:
    return defaults.cache_home() / "drift"


def run_drift(
    bundle_root: Path,
    releases: list[str],
    out: Path = Path("out/drift"),
    cache: Path | None = None,
    python: str = sys.executable,
    timeout: float = 600,
    *,
    notes: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> DriftRun:
    """Run the claims of `bundle_root` once per release, write drift.json and drift.md into
    `out`. The pinned release (the one `python` has installed) always runs: it is what the
    other columns are compared with, and comes first. `cache`: the layers (default ~/.cache/mbskills/drift,
    under $XDG_CACHE_HOME when set); `timeout`: seconds for each install and for each
    release's claim run; `notes`: one notes file for every skill (default: each skill's own
    checks/drift-notes.yaml);
    `progress` gets one line as each release finishes."""
    bundle_root = Path(bundle_root).resolve()
    if not (bundle_root / "skills").is_dir():
        raise UsageError(f"{bundle_root}: not a bundle (no skills/ folder)")
    if not timeout > 0:
        raise UsageError(f"timeout {timeout!r}: must be a positive number of seconds")
    wanted = _parse_releases(releases)
    loaded = load_notes(Path(notes)) if notes is not None else skill_notes(bundle_root)
    cache = Path(cache) if cache is not None else default_cache()
    env = _base_env()
    pinned = _pinned_release(python, env, timeout)
    wanted = [pinned] + [r for r in wanted if r != pinned]  # the baseline, first column
    runs = []
    for release in wanted:
        runs.append(_run_release(bundle_root, release, release == pinned, cache, python, env, timeout))
        if progress is not None:
            done = runs[-1]
            progress(f"{PACKAGE} {release}: {len(done.results)} claims in {done.seconds:.1f} s" if done.status == "ok" else f"{PACKAGE} {release}: {done.message}")
    return _finish(runs, pinned, loaded, Path(out))


def _parse_releases(releases: list[str]) -> list[str]:
    wanted: list[str] = []
    for release in releases:
        release = release.strip()
        if not _RELEASE.match(release):
            raise UsageError(f"release {release!r}: not a version such as 0.6.0")
        if release not in wanted:
            wanted.append(release)
    if not wanted:
        raise UsageError("no release to check: name at least one, e.g. 0.6.2,0.6.0")
    return wanted


# --- subprocesses ---------------------------------------------------------------------------


def _base_env() -> dict[str, str]:
    """The environment every subprocess starts from: this `runner` importable, whatever the
    working directory, ahead of what PYTHONPATH held."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(RUNNER_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class _Done:
    code: int | None  # None: timed out, its process group killed
    stdout: str
    stderr: str


def _call(command: list[str], *, env: dict[str, str], timeout: float, cwd: Path | None = None) -> _Done:
    """Run in a process group of its own, so a timeout kills whatever it started too."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace", start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return _Done(None, *_kill_group(process))
    except BaseException:  # Ctrl-C: nothing it started may outlive us either
        _kill_group(process)
        raise
    return _Done(process.returncode, stdout, stderr)


def _kill_group(process: subprocess.Popen) -> tuple[str, str]:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:  # bounded: a grandchild that left the group could hold the pipes open
        return process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        return "", ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no output"
    # The CLI reports its error last; a crash ends in the exception line.
    line = lines[-1]
    return line.removeprefix("mbskills: error: ")


def _pinned_release(python: str, env: dict[str, str], timeout: float) -> str:
    done = _call([python, "-P", "-c", _VERSION_PROBE], env=env, timeout=timeout)
    if done.code is None:
        raise UsageError(f"{python}: asking it for its {PACKAGE} version timed out after {timeout:g} s")
    version = done.stdout.strip()
    if done.code != 0 or not _RELEASE.match(version):
        raise UsageError(f"{python}: no {PACKAGE} installed there ({_last_line(done.stderr)}); set up the environment with `bash run.sh`")
    return version


def layer_for(release: str, cache: Path, python: str, env: dict[str, str], timeout: float) -> Path:
    """`cache/<release>`, installed once: pip writes into a temporary folder beside it,
    which is renamed into place only after the install finished and `.complete` is written,
    so an interrupted download never leaves a layer that looks usable."""
    layer = cache / release
    if (layer / COMPLETE).is_file():
        return layer
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release}.tmp-", dir=cache))
    try:
        done = _call([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target", str(staging), f"{PACKAGE}=={release}"], env=env, timeout=timeout)
        if done.code is None:
            raise _ReleaseError(f"install timed out after {timeout:g} s (process group killed)")
        if done.code != 0:
            raise _ReleaseError(f"install failed (pip exit {done.code}): {_last_line(done.stderr)}")
        if not (staging / "megatron" / "bridge" / "__init__.py").is_file():
            raise _ReleaseError(f"install failed: pip put no megatron/bridge into {staging}")
        if (staging / "megatron" / "__init__.py").exists():  # would turn the namespace into a package and hide megatron-core
            raise _ReleaseError(f"{PACKAGE} {release} ships megatron/__init__.py: a layer of it would hide megatron-core")
        (staging / COMPLETE).write_text(f"{PACKAGE}=={release}\n", "utf-8")
        if layer.exists():  # left by an older, unfinished attempt
            shutil.rmtree(layer)
        try:
            os.rename(staging, layer)
        except OSError:
            if not (layer / COMPLETE).is_file():  # not just another run that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return layer


class _ReleaseError(MbskillsError):
    """Ends one release's run with its one-line reason; caught in _run_release, so one
    release that cannot run is a column that says why, not a crash."""


def _run_release(bundle_root: Path, release: str, pinned: bool, cache: Path, python: str, env: dict[str, str], timeout: float) -> ReleaseRun:
    start = time.perf_counter()
    run = ReleaseRun(release, pinned, ERROR)
    try:
        layer = None if pinned else layer_for(release, cache, python, env, timeout)
        run.versions, run.results = _check(bundle_root, release, layer, python, env, timeout)
        run.status = "ok"
    except _ReleaseError as error:
        run.message = str(error)
    run.seconds = round(time.perf_counter() - start, 3)
    return run


def _check(bundle_root: Path, release: str, layer: Path | None, python: str, env: dict[str, str], timeout: float) -> tuple[dict, list[dict]]:
    env = dict(env)
    if layer is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(layer), env["PYTHONPATH"]))
    with tempfile.TemporaryDirectory(prefix=f"mbskills-drift-{release}-") as scratch:
        done = _call([python, "-P", "-c", _CHECK, str(bundle_root), scratch], env=env, timeout=timeout, cwd=bundle_root)
        if done.code is None:
            raise _ReleaseError(f"claims timed out after {timeout:g} s (process group killed)")
        report = Path(scratch) / "claims.json"
        if done.code not in (0, 1) or not report.is_file():
            line = _last_line(done.stderr)
            # The CLI's exit 2 for a Bridge it cannot import, or an import crash before it ran.
            raise _ReleaseError(f"import failed: {line}" if "cannot import" in line or _IMPORT_CRASH.match(line) else f"checker exited {done.code}: {line}")
        try:
            payload = json.loads(report.read_text("utf-8"))
            imported = json.loads((Path(scratch) / "imported.json").read_text("utf-8")).get("megatron.bridge")
        except (OSError, ValueError, AttributeError) as error:
            raise _ReleaseError(f"unreadable claims report: {error}") from None
    if not isinstance(payload, dict) or payload.get("schema") != CLAIMS_SCHEMA or not isinstance(payload.get("results"), list):
        raise _ReleaseError(f"claims report is not {CLAIMS_SCHEMA}")
    versions = payload.get("versions") or {}
    _verify(release, layer, versions, imported)
    return versions, payload["results"]


def _verify(release: str, layer: Path | None, versions: dict, imported: str | None) -> None:
    """The run must have used the release asked for: by its metadata and by where
    megatron.bridge was imported from."""
    found = versions.get(PACKAGE)
    if found != release:
        raise _ReleaseError(f"versions mismatch: the claims ran against {PACKAGE} {found}, not {release}" + ("; the layer did not shadow the pinned package" if layer else ""))
    if layer is not None and (imported is None or not Path(imported).resolve().is_relative_to(layer.resolve())):
        raise _ReleaseError(f"versions mismatch: megatron.bridge came from {imported or 'nowhere (never imported)'}, not from the layer {layer}")


# --- notes ----------------------------------------------------------------------------------


def skill_notes(bundle_root: Path) -> list[Note]:
    """Every skill's reviewed notes (skills/<skill>/checks/drift-notes.yaml), each for that
    skill's claims only."""
    from .plugins import DRIFT_NOTES, checks_dir, skill_roots

    notes = []
    for root in skill_roots(bundle_root):
        path = checks_dir(root) / DRIFT_NOTES
        if path.is_file():
            notes += load_notes(path, skill=root.name)
    return notes


def load_notes(path: Path, skill: str | None = None) -> list[Note]:
    """The reviewed notes: `notes:` a list of {claims, releases, note}; claims and releases
    are an id/version or a glob, or a list of them."""
    from ..load import load_yaml  # pyyaml: only when drift runs

    located = load_yaml(path)
    entries = located.data.get("notes") if isinstance(located.data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{path}:{located.line()}: expected a mapping with a 'notes' list")
    notes = []
    for index, entry in enumerate(entries):
        line = located.line(("notes", index))
        if not isinstance(entry, dict) or set(entry) != {"claims", "releases", "note"}:
            raise UsageError(f"{path}:{line}: notes[{index}] needs exactly 'claims', 'releases' and 'note'")
        claims, releases, text = _strings(entry["claims"]), _strings(entry["releases"]), entry["note"]
        if not claims or not releases or not isinstance(text, str) or not text.strip():
            raise UsageError(f"{path}:{line}: notes[{index}]: 'claims' and 'releases' are a string or a list of strings, 'note' a non-empty string")
        notes.append(Note(tuple(claims), tuple(releases), " ".join(text.split()), line, path, skill))
    return notes


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return []


def note_for(notes: list[Note], claim: str, release: str, skill: str | None = None) -> Note | None:
    return next((n for n in notes if n.matches(claim, release, skill)), None)


# --- the reports ----------------------------------------------------------------------------


def _finish(runs: list[ReleaseRun], pinned: str, notes: list[Note], out: Path) -> DriftRun:
    base = next(r for r in runs if r.pinned)
    # Drift is a claim that holds on the pinned release and not on another; one that fails
    # on the pinned release too is no upstream change (the pinned row reports it).
    broken_at_pin = {(r.get("skill", ""), r["claim"]) for r in base.results if r.get("status") not in OK_RESULTS}
    cells, used = [], set()
    for run in runs:
        if run.pinned or run.status != "ok":
            continue
        for result in run.results:
            if result.get("status") in (FAILED, ERROR) and (result.get("skill", ""), result["claim"]) not in broken_at_pin:
                note = note_for(notes, result["claim"], run.release, result.get("skill") or None)
                if note is not None:
                    used.add(note)
                cells.append(Cell(run.release, result.get("skill", ""), result["claim"], result["status"], result.get("message", ""), note.text if note else None))
    ran = [r.release for r in runs if not r.pinned and r.status == "ok"]
    stale = [n for n in notes if n not in used and any(fnmatch.fnmatchcase(r, g) for r in ran for g in n.releases)]
    ok = base.status == "ok" and bool(base.results) and all(r.get("status") in OK_RESULTS for r in base.results)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "drift.json", out / "drift.md"
    write_atomic(json_path, json.dumps(build_json(runs, pinned, cells, ok), indent=2) + "\n")
    write_atomic(md_path, build_markdown(runs, pinned, cells))
    unexplained = [c for c in cells if c.note is None]
    return DriftRun(format_table(runs, cells, stale), json_path, md_path, ok, pinned, runs, cells, unexplained, stale)


def _claims(runs: list[ReleaseRun]) -> list[tuple[str, str]]:
    """Every (skill, claim) any release reported, the pinned release's order first."""
    order: list[tuple[str, str]] = []
    for run in sorted(runs, key=lambda r: not r.pinned):
        for result in run.results:
            key = (result.get("skill", ""), result["claim"])
            if key not in order:
                order.append(key)
    return order


def _cell(run: ReleaseRun, key: tuple[str, str]) -> str:
    if run.status != "ok":
        return "error"
    found = next((r for r in run.results if (r.get("skill", ""), r["claim"]) == key), None)
    return "-" if found is None else CELLS.get(found.get("status"), found.get("status", "?"))


def _header(run: ReleaseRun) -> str:
    return f"{run.release} (pinned)" if run.pinned else run.release


def _grouped(cells: list[Cell]) -> list[tuple[Cell, list[str]]]:
    """Cells with the same claim, status, message and note, once, with their releases."""
    groups: dict[tuple, tuple[Cell, list[str]]] = {}
    for cell in cells:
        key = (cell.skill, cell.claim, cell.status, cell.message, cell.note)
        groups.setdefault(key, (cell, []))[1].append(cell.release)
    return list(groups.values())


def format_table(runs: list[ReleaseRun], cells: list[Cell], stale: list[Note] = ()) -> str:
    rows = [["claim", *(_header(r) for r in runs)]] + [[claim, *(_cell(r, (skill, claim)) for r in runs)] for skill, claim in _claims(runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for run in runs:
        if run.status != "ok":
            lines.append(f"{run.release}: {run.message}")
    base = next((r for r in runs if r.pinned), None)
    for result in base.results if base else ():
        if result.get("status") not in OK_RESULTS:
            lines.append(f"{base.release} (pinned) {result['claim']}: {result.get('status')}: {result.get('message', '')}")
    for cell, releases in _grouped(cells):
        lines.append(f"{', '.join(releases)} {cell.claim}: {CELLS.get(cell.status, cell.status)}: {cell.message}")
        lines.append(f"  note: {cell.note}" if cell.note else f"  {NO_NOTE}")
    for note in stale:
        lines.append(f"{note.path}:{note.line}: note for {', '.join(note.claims)} on {', '.join(note.releases)} matches no failing cell (stale?)")
    unexplained = sum(c.note is None for c in cells)
    pinned = base.release if base else "the pinned release"
    lines.append(f"{len(cells)} cells drifted (the claim holds on {pinned}, not there), {unexplained} without a note" if cells else f"no drift: no claim that holds on {pinned} fails on another release that ran")
    return "\n".join(lines)


def build_json(runs: list[ReleaseRun], pinned: str, cells: list[Cell], ok: bool) -> dict:
    notes = {(c.release, c.skill, c.claim): c.note for c in cells}
    releases = []
    for run in runs:
        claims = [
            {"skill": r.get("skill", ""), "claim": r["claim"], "status": r.get("status"), "message": r.get("message", ""), **({"note": notes[key]} if (key := (run.release, r.get("skill", ""), r["claim"])) in notes else {})}
            for r in run.results
        ]
        releases.append({"release": run.release, "pinned": run.pinned, "status": run.status, "message": run.message, "versions": run.versions, "seconds": run.seconds, "claims": claims})
    return {"schema": SCHEMA, "pinned": pinned, "ok": ok, "releases": releases, "unexplained": [asdict(c) for c in cells if c.note is None]}


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def build_markdown(runs: list[ReleaseRun], pinned: str, cells: list[Cell]) -> str:
    base = next((r for r in runs if r.pinned), None)
    others = ", ".join(f"{name} {version}" for name, version in (base.versions if base else {}).items() if name != PACKAGE)
    lines = [
        "# Claim drift across Megatron-Bridge releases",
        "",
        f"Each column runs every claim check against one {PACKAGE} release; everything else is the pinned environment's ({others or 'versions unknown'}). Pinned: {pinned}.",
        "",
        "| claim | " + " | ".join(_header(r) for r in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    lines += ["| " + " | ".join([_md(claim), *(_cell(r, (skill, claim)) for r in runs)]) + " |" for skill, claim in _claims(runs)]
    errors = [r for r in runs if r.status != "ok"]
    if errors:
        lines += ["", "## Releases that did not run", ""] + [f"- **{r.release}**: {_md(r.message)}" for r in errors]
    broken = [r for r in base.results if r.get("status") not in OK_RESULTS] if base else []
    if broken:
        lines += ["", f"## Failing on the pinned release {pinned} (not drift: fix the check or the skill)", ""]
        lines += [f"- **{_md(r['claim'])}**: {CELLS.get(r.get('status'), r.get('status'))}: {_md(r.get('message', ''))}" for r in broken]
    if cells:
        lines += ["", "## Why claims fail on other releases", ""]
        for cell, releases in _grouped(cells):
            lines.append(f"- **{_md(cell.claim)}** on {', '.join(releases)}: {CELLS.get(cell.status, cell.status)}: {_md(cell.message)}")
            lines.append(f"  - {_md(cell.note)}" if cell.note else f"  - **{NO_NOTE}**")
    return "\n".join(lines) + "\n"
