"""`pip install .` gives a working package: every stage package and data file is in the
wheel (packages are found, not listed), and the installed copy, run away from any
checkout, works and says in one line when it finds no bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

DATA = {"runner/core/schemas/skill-card.schema.json", "runner/core/schemas/gpu-results.schema.json", "runner/providers/data/pricing.yaml", "runner/report/templates/report.html.j2"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "runner", source / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (found,) = out.glob("mbskills-*.whl")
    return found


def test_the_wheel_holds_every_module_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "runner").rglob("*.py") if "__pycache__" not in p.parts}
    assert modules - names == set()
    assert DATA - names == set()
    assert not any(n.startswith(("tests/", "skills/", "bench/")) for n in names)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # The dependencies come from this environment; `runner` must come from the install.
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("MBSKILLS_CACHE", None)
    return {"target": target, "env": env, "cwd": tmp_path_factory.mktemp("elsewhere")}


def mbskills(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, cwd=installed["cwd"], env=installed["env"], timeout=300)


def test_installed_copy_runs_from_its_own_files(installed):
    done = subprocess.run([sys.executable, "-c", "import runner; print(runner.__file__)"], capture_output=True, text=True, cwd=installed["cwd"], env=installed["env"])
    assert done.stdout.strip() == str(installed["target"] / "runner" / "__init__.py")
    help_ = mbskills(installed, "--help")
    assert help_.returncode == 0 and "validate" in help_.stdout and "eval" in help_.stdout
    assert (installed["target"] / "bin" / "mbskills").is_file()


def test_installed_copy_without_a_bundle_says_so_in_one_line(installed):
    for args in (("install",), ("calibrate",), ("check",)):
        done = mbskills(installed, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "no bundle at or above" in done.stderr and "--bundle DIR" in done.stderr, done.stderr
    assert not (installed["cwd"] / ".agents").exists()


def test_installed_copy_reads_its_data_files(installed, tmp_path):
    # schemas (validate), the price table (eval) and the HTML template (grade), all from the wheel
    assert mbskills(installed, "validate", str(REPO)).returncode == 0
    run = tmp_path / "run"
    done = mbskills(installed, "eval", "--bundle", str(REPO), "--model", f"replay:{REPO / 'evals' / 'calibration'}", "--case", "fsdp-minimal-override", "--out", str(run), "--progress", "plain")
    assert done.returncode == 0, done.stderr
    done = mbskills(installed, "grade", str(run))
    assert done.returncode == 0, done.stderr
    assert "<html" in (run / "report.html").read_text() and json.loads((run / "report.json").read_text())["run"]["records"] == 2
