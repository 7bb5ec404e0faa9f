"""The mbskills command: exit codes, output formats, and a start-up free of torch/megatron."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, place_bad_file
from runner.cli import main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, cwd=cwd or REPO)


def test_validate_clean_repo_exits_0():
    result = run("validate", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "" and "0 findings" in result.stderr


def test_validate_findings_exit_1_with_one_line_each(tmp_path: Path):
    target = place_bad_file("skill-evals-trailing-comma.json", tmp_path)
    result = run("validate", str(target))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "evals.json:3: json/syntax: invalid JSON: Expecting property name enclosed in double quotes (column 20)" in lines[0]
    assert "Traceback" not in result.stderr


def test_validate_json_format(tmp_path: Path):
    target = place_bad_file("skill-md-missing-license.md", tmp_path)
    result = run("validate", str(target), "--format", "json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["count"] == 1 and payload["findings"][0]["rule"] == "skill/license"
    assert payload["findings"][0]["line"] == 2


def test_unusable_input_exits_2(tmp_path: Path):
    result = run("validate", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.startswith("mbskills: error: ") and "Traceback" not in result.stderr
    assert run("verify", str(tmp_path)).returncode == 2
    assert run("nonsense").returncode == 2  # argparse usage error


def test_install_then_verify_via_cli(tmp_path: Path):
    dest = tmp_path / ".agents" / "skills"
    result = run("install", str(dest))
    assert result.returncode == 0, result.stderr
    assert "copied 2 skills" in result.stdout
    assert run("verify", str(dest)).returncode == 0
    (dest / "nemo-mbridge-perf-megatron-fsdp" / "SKILL.md").write_text("x")
    result = run("verify", str(dest))
    assert result.returncode == 1 and result.stdout.strip() == "changed: nemo-mbridge-perf-megatron-fsdp/SKILL.md"


def test_install_default_dest_is_agents_skills(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    result = run("install", "--bundle", str(REPO), cwd=project)
    assert result.returncode == 0, result.stderr
    assert (project / ".agents/skills/nemo-mbridge-perf-tp-dp-comm-overlap/SKILL.md").is_file()


def test_help_imports_neither_torch_nor_megatron_nor_the_sdks():
    code = (
        "import sys, runner.cli\n"
        "try:\n    runner.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "from runner.validate import validate_path\n"
        "from runner.install import install\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'openai', 'anthropic', 'aiohttp', 'rich'))\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


def test_main_returns_codes_in_process(tmp_path: Path, capsys):
    assert main(["validate", str(REPO)]) == 0
    assert main(["validate", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
