"""run.sh's setup step: a clear message, and exit 2, where no Python 3.12 can be found."""

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
