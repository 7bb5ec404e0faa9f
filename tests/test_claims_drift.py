"""`mbskills drift` (runner.claims.drift): the claim x release matrix.

The unit tests download nothing: a fake `python` stands in for pip and for the claim
run, driven by a JSON file. One slow test layers a real release from PyPI (cached under
~/.cache/mbskills/drift); MBSKILLS_SKIP_DRIFT=1 skips it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from conftest import GOOD_BUNDLE, REPO
from runner.claims import drift
from runner.claims.drift import Note, ReleaseRun, load_notes, note_for, run_drift
from runner.claims.status import OK_RESULTS
from runner.core import MbskillsError, UsageError

FAKE_PYTHON = r'''#!{python}
"""A stand-in interpreter: `-m pip install --target`, the version probe and the claim run."""
import json, os, subprocess, sys, time

cfg = json.load(open(os.environ["FAKE_PY_CONFIG"]))
args = sys.argv[1:]


def record(*entry):
    with open(os.environ["FAKE_PY_LOG"], "a") as log:
        log.write(json.dumps(entry) + "\n")


def linger():
    # A child in the same process group: a timeout must kill it too.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(cfg["pidfile"], "w").write(str(child.pid))
    time.sleep(120)


if args[:2] == ["-m", "pip"]:
    target, release = args[args.index("--target") + 1], args[-1].split("==")[1]
    record("install", release, target)
    mode = cfg.get("install", {}).get(release, "ok")
    bridge = os.path.join(target, "megatron", "bridge")
    os.makedirs(bridge)
    if mode == "crash":  # half a download, then the process dies
        open(os.path.join(bridge, "partial.py"), "w").write("")
        os.kill(os.getpid(), 9)
    if mode == "missing":
        print("ERROR: No matching distribution found for megatron-bridge==" + release, file=sys.stderr)
        sys.exit(1)
    if mode == "sleep":
        linger()
    if mode == "namespace-package":
        open(os.path.join(target, "megatron", "__init__.py"), "w").write("")
    open(os.path.join(bridge, "__init__.py"), "w").write(release)
    sys.exit(0)

assert args[0] == "-P" and args[1] == "-c", args
code, rest = args[2], args[3:]
pinned = cfg.get("pinned", "0.6.2")
if "runner.cli" not in code:  # the version probe
    if pinned is None:
        sys.exit("importlib.metadata.PackageNotFoundError: No package metadata was found for megatron-bridge")
    print(pinned)
    sys.exit(0)
bundle, out = rest
first = os.environ["PYTHONPATH"].split(os.pathsep)[0]
init = os.path.join(first, "megatron", "bridge", "__init__.py")
release = open(init).read() if os.path.isfile(init) else pinned
record("check", release, os.environ["PYTHONPATH"], os.getcwd())
mode = cfg.get("check", {}).get(release, "ok")
if mode == "sleep":
    linger()
if mode == "import-fails":
    print("Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'transformer_engine'", file=sys.stderr)
    print("mbskills: error: cannot import the pinned Megatron-Bridge (No module named 'transformer_engine'); set up the environment with `bash run.sh`", file=sys.stderr)
    sys.exit(2)
if mode == "crash":
    print("Traceback (most recent call last):\nRuntimeError: boom", file=sys.stderr)
    sys.exit(1)
if mode == "import-crash":
    print("Traceback (most recent call last):\nModuleNotFoundError: No module named 'transformer_engine_torch'", file=sys.stderr)
    sys.exit(1)
found = pinned if mode == "no-shadow" else release
imported = init if os.path.isfile(init) and mode not in ("no-shadow", "elsewhere") else "/site-packages/megatron/bridge/__init__.py"
results = [{"skill": "demo", "claim": c, "statement": "", "status": s, "seconds": 0.0, "message": m, "tier": "cpu"} for c, s, m in cfg["results"].get(release, cfg["results"]["*"])]
json.dump({"schema": "mbskills-claims/1", "tier": "cpu", "versions": {"megatron-bridge": found, "megatron-core": "0.19.2", "torch": "2.14.1"}, "seconds": 0.1, "results": results}, open(os.path.join(out, "claims.json"), "w"))
json.dump({"megatron.bridge": imported}, open(os.path.join(out, "imported.json"), "w"))
sys.exit(0 if all(r["status"] in ("passed", "needs-gpu") for r in results) else 1)
'''

PASSING = [["claim-a", "passed", ""], ["claim-b", "passed", ""], ["claim-gpu", "needs-gpu", "needs a GPU"]]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake python and its config; returns (python, configure, calls)."""
    script = tmp_path / "fake-python"
    script.write_text(FAKE_PYTHON.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    config, log = tmp_path / "fake.json", tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_PY_CONFIG", str(config))
    monkeypatch.setenv("FAKE_PY_LOG", str(log))

    def configure(**values):
        values.setdefault("results", {"*": PASSING})
        values.setdefault("pidfile", str(tmp_path / "child.pid"))
        config.write_text(json.dumps(values))

    def calls(kind: str) -> list[list]:
        if not log.is_file():
            return []
        return [entry[1:] for entry in map(json.loads, log.read_text().splitlines()) if entry[0] == kind]

    configure()
    return str(script), configure, calls


@pytest.fixture
def notes_file(tmp_path) -> Path:
    path = tmp_path / "notes.yaml"
    path.write_text("notes:\n  - claims: claim-b\n    releases: ['0.5.*']\n    note: claim-b needs cfg.env_vars, added in 0.6.0\n")
    return path


def drift_run(fake, tmp_path, releases, notes, **kwargs):
    python, _, _ = fake
    return run_drift(GOOD_BUNDLE, releases, out=tmp_path / "out", cache=tmp_path / "cache", python=python, notes=notes, **kwargs)


# --- the reports, from results built here ---------------------------------------------------


def _results(*rows):
    return [{"skill": "demo", "claim": c, "status": s, "message": m} for c, s, m in rows]


def test_table_markdown_and_json_from_fake_results(tmp_path):
    pinned = ReleaseRun("0.6.2", True, "ok", versions={"megatron-bridge": "0.6.2", "megatron-core": "0.19.2"}, results=_results(("claim-a", "passed", ""), ("claim-b", "passed", ""), ("claim-gpu", "needs-gpu", "")))
    older = ReleaseRun("0.6.0", False, "ok", versions={"megatron-bridge": "0.6.0"}, results=_results(("claim-a", "failed", "lost a | field"), ("claim-b", "error", "AttributeError: x"), ("claim-gpu", "needs-gpu", "")))
    broken = ReleaseRun("0.5.0", False, "error", message="import failed: cannot import the pinned Megatron-Bridge (No module named 'transformer_engine')")
    notes = [Note(("claim-a",), ("0.6.0",), "field renamed in 0.6.0 (config.py)", 3)]
    run = drift._finish([pinned, older, broken], "0.6.2", notes, tmp_path)

    assert run.ok and run.pinned == "0.6.2"
    assert [(c.release, c.claim, c.status, c.note) for c in run.cells] == [("0.6.0", "claim-a", "failed", "field renamed in 0.6.0 (config.py)"), ("0.6.0", "claim-b", "error", None)]
    assert [c.claim for c in run.unexplained] == ["claim-b"]
    lines = run.table.splitlines()
    assert lines[0].split() == ["claim", "0.6.2", "(pinned)", "0.6.0", "0.5.0"]
    assert lines[2].split() == ["claim-a", "pass", "FAIL", "error"]
    assert lines[3].split() == ["claim-b", "pass", "error", "error"]
    assert lines[4].split() == ["claim-gpu", "gpu", "gpu", "error"]
    assert "0.5.0: import failed: cannot import the pinned Megatron-Bridge (No module named 'transformer_engine')" in lines
    assert "  note: field renamed in 0.6.0 (config.py)" in lines and f"  {drift.NO_NOTE}" in lines

    md = run.md_path.read_text()
    assert "| claim | 0.6.2 (pinned) | 0.6.0 | 0.5.0 |" in md and "| claim-a | pass | FAIL | error |" in md
    assert "lost a \\| field" in md and "field renamed in 0.6.0 (config.py)" in md and f"**{drift.NO_NOTE}**" in md
    assert "- **0.5.0**: import failed:" in md and "megatron-core 0.19.2" in md

    payload = json.loads(run.json_path.read_text())
    assert payload["schema"] == "mbskills-drift/1" and payload["pinned"] == "0.6.2" and payload["ok"] is True
    by_release = {r["release"]: r for r in payload["releases"]}
    assert by_release["0.5.0"]["status"] == "error" and by_release["0.5.0"]["claims"] == []
    assert by_release["0.6.0"]["versions"] == {"megatron-bridge": "0.6.0"}
    assert by_release["0.6.0"]["claims"][0] == {"skill": "demo", "claim": "claim-a", "status": "failed", "message": "lost a | field", "note": "field renamed in 0.6.0 (config.py)"}
    assert by_release["0.6.0"]["claims"][1]["note"] is None  # drifted, not explained yet
    assert "note" not in by_release["0.6.0"]["claims"][2] and "note" not in by_release["0.6.2"]["claims"][0]
    assert [(u["release"], u["claim"]) for u in payload["unexplained"]] == [("0.6.0", "claim-b")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drift.json", "drift.md"]  # no temporaries left


def test_a_claim_failing_on_the_pinned_release_is_not_drift(tmp_path):
    pinned = ReleaseRun("0.6.2", True, "ok", results=_results(("claim-a", "failed", "broken check")))
    older = ReleaseRun("0.6.0", False, "ok", results=_results(("claim-a", "failed", "broken check")))
    run = drift._finish([pinned, older], "0.6.2", [], tmp_path)
    assert not run.ok and run.cells == [] and run.unexplained == []
    assert "0.6.2 (pinned) claim-a: failed: broken check" in run.table
    assert "Failing on the pinned release 0.6.2" in run.md_path.read_text()


def test_the_pinned_release_that_did_not_run_is_not_ok(tmp_path):
    run = drift._finish([ReleaseRun("0.6.2", True, "error", message="import failed: x")], "0.6.2", [], tmp_path)
    assert not run.ok


# --- notes ----------------------------------------------------------------------------------


def test_notes_match_by_claim_glob_and_release(tmp_path):
    path = tmp_path / "notes.yaml"
    path.write_text("notes:\n  - claims: [overlap-*, fsdp-ckpt-format]\n    releases: 0.5.1\n    note: >\n      folded\n      text\n  - claims: '*'\n    releases: ['0.4.*', '0.3.0']\n    note: everything\n")
    notes = load_notes(path)
    assert notes[0] == Note(("overlap-*", "fsdp-ckpt-format"), ("0.5.1",), "folded text", 2, path)
    assert note_for(notes, "overlap-env-vars", "0.5.1") is notes[0]
    assert note_for(notes, "fsdp-ckpt-format", "0.5.1") is notes[0]
    assert note_for(notes, "overlap-env-vars", "0.5.0") is None
    assert note_for(notes, "fsdp-x", "0.4.2") is notes[1] and note_for(notes, "fsdp-x", "0.3.0") is notes[1]
    assert note_for(notes, "fsdp-x", "0.3.1") is None


@pytest.mark.parametrize(
    "text, where",
    [
        ("notes: {}\n", ":1: expected a mapping with a 'notes' list"),
        ("notes:\n  - claims: a\n    note: x\n", ":2: notes[0] needs exactly 'claims', 'releases' and 'note'"),
        ("notes:\n  - claims: a\n    releases: 0.5.0\n    note: x\n  - claims: [1]\n    releases: 0.5.0\n    note: x\n", ":5: notes[1]: 'claims' and 'releases'"),
        ("notes:\n  - claims: a\n    releases: 0.5.0\n    note: '  '\n", ":2: notes[0]:"),
    ],
)
def test_a_bad_notes_file_is_one_line_naming_file_and_line(tmp_path, text, where):
    path = tmp_path / "notes.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as error:
        load_notes(path)
    assert str(error.value).startswith(f"{path}{where}") and "\n" not in str(error.value)


def test_a_skills_notes_explain_its_own_claims_only(tmp_path):
    path = tmp_path / "notes.yaml"
    path.write_text("notes:\n  - claims: '*-release'\n    releases: 0.5.1\n    note: range moved\n")
    notes = load_notes(path, skill="skill-a")
    assert note_for(notes, "a-release", "0.5.1", "skill-a") is notes[0]
    assert note_for(notes, "b-release", "0.5.1", "skill-b") is None  # another skill's cell stays unexplained


def test_the_shipped_notes_name_a_release_and_an_upstream_change():
    notes = drift.skill_notes(REPO)
    assert {n.skill for n in notes} >= {"nemo-mbridge-perf-megatron-fsdp", "nemo-mbridge-perf-tp-dp-comm-overlap"}, "each skill's checks/drift-notes.yaml"
    for note in notes:
        assert note.path == REPO / "skills" / note.skill / "checks" / "drift-notes.yaml"
        assert all(drift._RELEASE.match(r) for r in note.releases), f"line {note.line}: list releases one by one, as reviewed"
        assert ("megatron/bridge/" in note.text or "runner/claims/" in note.text) and any(r in note.text for r in ("0.5", "0.6")), f"line {note.line}: name the file and the release of the change"


# --- runs through the fake python ----------------------------------------------------------


def test_each_release_runs_in_its_own_layer_first_on_the_path(fake, tmp_path, notes_file):
    python, configure, calls = fake
    configure(results={"*": PASSING, "0.5.1": [["claim-a", "passed", ""], ["claim-b", "failed", "no env_vars"], ["claim-gpu", "needs-gpu", ""]]})
    lines = []
    run = drift_run(fake, tmp_path, ["0.6.0", "0.5.1"], notes_file, progress=lines.append)
    assert [r.release for r in run.releases] == ["0.6.2", "0.6.0", "0.5.1"]  # the pinned release runs first even unasked
    assert [r.status for r in run.releases] == ["ok", "ok", "ok"] and run.ok
    assert [(c.release, c.claim, c.note) for c in run.cells] == [("0.5.1", "claim-b", "claim-b needs cfg.env_vars, added in 0.6.0")]
    assert run.unexplained == [] and len(lines) == 3 and lines[2].startswith("megatron-bridge 0.5.1: 3 claims in")
    checks = calls("check")
    assert [c[0] for c in checks] == ["0.6.2", "0.6.0", "0.5.1"]
    cache = (tmp_path / "cache").resolve()
    for release, pythonpath, cwd in checks:
        entries = pythonpath.split(os.pathsep)
        if release == "0.6.2":
            assert entries[0] == str(drift.RUNNER_ROOT)  # no layer for the pinned release
        else:
            assert Path(entries[0]).resolve() == cache / release and entries[1] == str(drift.RUNNER_ROOT)
        assert cwd == str(GOOD_BUNDLE)
    assert [c[0] for c in calls("install")] == ["0.6.0", "0.5.1"]
    assert (cache / "0.6.0" / drift.COMPLETE).is_file() and sorted(p.name for p in cache.iterdir()) == ["0.5.1", "0.6.0"]
    drift_run(fake, tmp_path, ["0.6.0", "0.5.1"], notes_file)
    assert len(calls("install")) == 2, "a completed layer is installed again"


def test_a_failing_cell_without_a_note_is_flagged(fake, tmp_path, notes_file):
    _, configure, _ = fake
    configure(results={"*": PASSING, "0.6.0": [["claim-a", "failed", "gone"], ["claim-b", "passed", ""], ["claim-gpu", "needs-gpu", ""]]})
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0", "0.5.1"], notes_file)
    assert [(c.release, c.claim) for c in run.unexplained] == [("0.6.0", "claim-a")]
    assert f"0.6.0 claim-a: FAIL: gone\n  {drift.NO_NOTE}" in run.table
    assert [n.claims for n in run.stale_notes] == [("claim-b",)]  # its release ran, nothing failed
    assert "matches no failing cell" in run.table and run.ok


@pytest.mark.parametrize("mode, says", [("no-shadow", "versions mismatch: the claims ran against megatron-bridge 0.6.2, not 0.6.0; the layer did not shadow"), ("elsewhere", "versions mismatch: megatron.bridge came from /site-packages/")])
def test_a_layer_that_did_not_shadow_is_an_error_not_a_pass(fake, tmp_path, notes_file, mode, says):
    _, configure, _ = fake
    configure(check={"0.6.0": mode})
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file)
    older = run.releases[1]
    assert older.status == "error" and older.message.startswith(says) and older.results == []
    assert run.table.splitlines()[2].split()[-1] == "error"
    assert run.ok  # the pinned row is still fine


def test_versions_are_checked_for_the_pinned_release_too():
    with pytest.raises(MbskillsError, match="versions mismatch: the claims ran against megatron-bridge 0.6.1, not 0.6.2$"):
        drift._verify("0.6.2", None, {"megatron-bridge": "0.6.1"}, "/x/megatron/bridge/__init__.py")


def test_a_release_whose_checker_cannot_import_is_reported_in_its_column(fake, tmp_path, notes_file):
    _, configure, _ = fake
    configure(check={"0.5.0": "import-fails", "0.5.1": "crash", "0.4.0": "import-crash"})
    run = drift_run(fake, tmp_path, ["0.6.2", "0.5.1", "0.5.0", "0.4.0"], notes_file)
    by = {r.release: r for r in run.releases}
    assert by["0.4.0"].message == "import failed: ModuleNotFoundError: No module named 'transformer_engine_torch'"
    assert by["0.5.0"].message == "import failed: cannot import the pinned Megatron-Bridge (No module named 'transformer_engine'); set up the environment with `bash run.sh`"
    assert by["0.5.1"].message == "checker exited 1: RuntimeError: boom"
    assert "0.5.0: import failed: cannot import" in run.table and run.ok and run.cells == []


def test_a_release_pip_cannot_find_is_an_error_in_its_column(fake, tmp_path, notes_file):
    _, configure, _ = fake
    configure(install={"9.9.9": "missing"})
    run = drift_run(fake, tmp_path, ["0.6.2", "9.9.9"], notes_file)
    assert run.releases[1].message == "install failed (pip exit 1): ERROR: No matching distribution found for megatron-bridge==9.9.9"
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_release_shipping_megatron_init_is_refused(fake, tmp_path, notes_file):
    _, configure, _ = fake
    configure(install={"0.6.0": "namespace-package"})
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file)
    assert "ships megatron/__init__.py" in run.releases[1].message


# --- the cache ------------------------------------------------------------------------------


def test_an_install_killed_halfway_leaves_no_layer(fake, tmp_path, notes_file):
    _, configure, calls = fake
    configure(install={"0.6.0": "crash"})
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file)
    assert run.releases[1].status == "error" and run.releases[1].message.startswith("install failed (pip exit -9)")
    assert list((tmp_path / "cache").iterdir()) == []  # neither a layer nor its staging folder
    configure()
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file)
    assert run.releases[1].status == "ok" and len(calls("install")) == 2
    assert (tmp_path / "cache" / "0.6.0" / drift.COMPLETE).is_file()


def test_an_interrupted_install_leaves_no_complete_marker(tmp_path, monkeypatch):
    staged = []

    def interrupted(command, **kwargs):
        target = Path(command[command.index("--target") + 1])
        (target / "megatron" / "bridge").mkdir(parents=True)
        (target / "megatron" / "bridge" / "__init__.py").write_text("")
        staged.append(target)
        raise KeyboardInterrupt

    monkeypatch.setattr(drift, "_call", interrupted)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        drift.layer_for("0.6.0", cache, sys.executable, {}, 10)
    assert staged and staged[0].parent == cache and not staged[0].exists()
    assert list(cache.iterdir()) == []


def test_a_layer_without_its_marker_is_installed_again(fake, tmp_path, notes_file):
    _, _, calls = fake
    stale = tmp_path / "cache" / "0.6.0" / "megatron" / "bridge"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("0.5.0")  # an older, unfinished attempt
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file)
    assert len(calls("install")) == 1 and run.releases[1].status == "ok" and run.releases[1].versions["megatron-bridge"] == "0.6.0"


def test_the_default_cache_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert drift.default_cache() == tmp_path / "mbskills" / "drift"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert drift.default_cache() == Path.home() / ".cache" / "mbskills" / "drift"


# --- timeouts and bad input -------------------------------------------------------------------


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":  # killed, only not yet reaped by its new parent
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("step", ["check", "install"])
def test_a_timeout_is_reported_and_kills_the_process_group(fake, tmp_path, notes_file, step):
    _, configure, _ = fake
    configure(**{step: {"0.6.0": "sleep"}})
    start = time.monotonic()
    run = drift_run(fake, tmp_path, ["0.6.2", "0.6.0"], notes_file, timeout=3)
    assert time.monotonic() - start < 60
    what = "claims" if step == "check" else "install"
    assert run.releases[1].status == "error" and run.releases[1].message == f"{what} timed out after 3 s (process group killed)"
    child = int((tmp_path / "child.pid").read_text())
    assert _gone(child), f"pid {child}, started by the timed-out step, is still running"
    assert run.ok and run.releases[0].status == "ok"
    if step == "install":
        assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("releases, says", [(["--index-url=http://x"], "release '--index-url=http://x': not a version"), (["0.6.0; rm"], "not a version"), ([], "no release to check"), ([" "], "not a version")])
def test_bad_releases_are_a_usage_error(fake, tmp_path, notes_file, releases, says):
    with pytest.raises(UsageError, match=says):
        drift_run(fake, tmp_path, releases, notes_file)


def test_duplicate_releases_run_once(fake, tmp_path, notes_file):
    run = drift_run(fake, tmp_path, ["0.6.0", "0.6.0", "0.6.2"], notes_file)
    assert [r.release for r in run.releases] == ["0.6.2", "0.6.0"]


def test_not_a_bundle_and_no_megatron_are_usage_errors(tmp_path, fake, notes_file):
    python, configure, _ = fake
    with pytest.raises(UsageError, match="not a bundle"):
        run_drift(tmp_path, ["0.6.0"], out=tmp_path / "out", python=python, notes=notes_file)
    configure(pinned=None)
    with pytest.raises(UsageError, match=r"fake-python: no megatron-bridge installed there \(importlib.metadata.PackageNotFoundError: No package metadata was found for megatron-bridge\)"):
        drift_run(fake, tmp_path, ["0.6.0"], notes_file)


def test_importing_drift_costs_the_standard_library_alone():
    import subprocess

    probe = "import sys, runner.claims.drift; print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'megatron', 'yaml', 'jsonschema'}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


# --- the real thing -------------------------------------------------------------------------


@pytest.mark.skipif(os.environ.get("MBSKILLS_SKIP_DRIFT") == "1", reason="MBSKILLS_SKIP_DRIFT=1: no PyPI download, no release layered")
def test_claims_on_a_real_older_release(tmp_path):
    """Layers megatron-bridge 0.6.0 from PyPI (cached) over the pinned venv and runs every
    claim there: each one holds, or a reviewed note explains why not."""
    run = run_drift(REPO, ["0.6.0"], out=tmp_path / "out")
    pinned, older = run.releases
    assert pinned.pinned and pinned.status == "ok", pinned.message
    assert older.release == "0.6.0" and older.status == "ok", older.message
    assert older.versions["megatron-bridge"] == "0.6.0" and older.versions["megatron-core"] == pinned.versions["megatron-core"]
    assert run.ok, run.table
    notes = drift.skill_notes(REPO)
    unexplained = [r for r in older.results if r["status"] not in OK_RESULTS and note_for(notes, r["claim"], "0.6.0", r.get("skill")) is None]
    assert unexplained == [] and run.unexplained == [], run.table
    assert (drift.default_cache() / "0.6.0" / drift.COMPLETE).is_file()
