"""run.sh's setup steps: a clear message, and exit 2, where no Python 3.12 can be found, or
no Node.js >= 20 and npm for the agent-client tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

SYSTEM_312 = [p for p in ("/usr/bin/python3.12", "/usr/local/bin/python3.12") if os.path.exists(p)]


@pytest.mark.skipif(bool(SYSTEM_312), reason=f"a system Python 3.12 exists here ({SYSTEM_312}), so it cannot be hidden")
def test_missing_python_312_is_a_clear_error(tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MBSKILLS_VENV": str(tmp_path / "venv")}
    result = subprocess.run(["bash", str(REPO / "run.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "Python 3.12 not found" in result.stderr and "MBSKILLS_PYTHON" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_unknown_command_exits_2(tmp_path: Path):
    env = dict(os.environ, MBSKILLS_VENV=str(REPO / ".venv"))
    result = subprocess.run(["bash", str(REPO / "run.sh"), "nonsense"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and "unknown command 'nonsense'" in result.stderr


def _path_without(tmp_path: Path, *hidden: str) -> str:
    """A PATH with every program of /usr/bin and /bin but `hidden`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/bin", "/bin"):
        for name in os.listdir(folder):
            if name not in hidden and not (bin_dir / name).exists():
                os.symlink(os.path.join(folder, name), bin_dir / name)
    return str(bin_dir)


def _client_setup(tmp_path: Path, path: str) -> subprocess.CompletedProcess:
    env = {"PATH": path, "HOME": str(tmp_path), "MBSKILLS_VENV": str(REPO / ".venv"), "MBSKILLS_SKIP_GATEWAY": "1"}
    # `--co -q tests/test_setup_script.py` never gets this far when the client step stops it.
    return subprocess.run(["bash", str(REPO / "run.sh"), "test", "--co", "-q", "tests/test_setup_script.py"], capture_output=True, text=True, env=env, timeout=120)


def test_missing_node_is_one_line_naming_what_to_install(tmp_path: Path):
    result = _client_setup(tmp_path, _path_without(tmp_path, "node", "nodejs", "npm", "npx"))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("run.sh:")]
    assert lines[-1] == "run.sh: the agent-client tests need Node.js >= 20 and npm (e.g. 'apt-get install nodejs npm', or from nodejs.org); MBSKILLS_SKIP_CLIENTS=1 skips them"
    assert "test_setup_script" not in result.stdout  # pytest never started


def test_node_older_than_20_is_refused(tmp_path: Path):
    path = _path_without(tmp_path, "node")
    fake = Path(path) / "node"
    fake.write_text('#!/bin/sh\ncase "$1" in -p) echo 18 ;; *) echo v18.19.0 ;; esac\n')
    fake.chmod(0o755)
    result = _client_setup(tmp_path, path)
    assert result.returncode == 2, result.stderr
    assert "run.sh: the agent-client tests need Node.js >= 20; this is v18.19.0 (MBSKILLS_SKIP_CLIENTS=1 skips them)" in result.stderr
