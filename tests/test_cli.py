"""The mbskills command: exit codes, output formats, and a start-up free of torch/megatron."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, place_bad_file
from runner.cli import build_parser, main
from runner.core import defaults
from runner.grade import JudgeOptions
from runner.providers import Transport
from runner.run import EvalRequest


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
    # the fixture's body also differs from the good skill's reviewed framing sentences
    assert payload["count"] == len(payload["findings"]) and {f["rule"] for f in payload["findings"]} == {"skill/license", "skill/unreviewed-sentence", "skill/stale-framing"}
    assert [f["line"] for f in payload["findings"] if f["rule"] == "skill/license"] == [2]


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
    assert "copied 3 skills" in result.stdout
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


# -- wiring: whole option names, shared options, defaults from one place, errors mapped once


@pytest.mark.parametrize(
    "argv, unknown",
    [
        (["install", "--for", "/tmp/x"], "--for"),
        (["eval", "--model", "replay:x", "--out", "o", "--condition", "baseline"], "--condition"),
        (["grade", "run", "--judge-temp", "0"], "--judge-temp"),
        (["check", "--write"], "--write"),
    ],
)
def test_abbreviated_options_are_refused(argv, unknown, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unrecognized arguments: {unknown}" in err


def test_every_parser_refuses_abbreviations():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert parser.allow_abbrev is False
    assert {name: p.allow_abbrev for name, p in subparsers.choices.items()} == {name: False for name in subparsers.choices}


def test_defaults_come_from_one_place_and_the_help_shows_them(capsys):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    ev, gr, ca = (subparsers[n].parse_args(a) for n, a in (("eval", ["--model", "m", "--out", "o"]), ("grade", ["r"]), ("calibrate", [])))
    assert (ev.timeout, ev.max_retries, ev.rate_limit_rounds, ev.jobs, ev.trials, ev.max_turns) == (defaults.TIMEOUT_S, defaults.MAX_RETRIES, defaults.RATE_LIMIT_ROUNDS, defaults.JOBS, defaults.TRIALS, defaults.MAX_TURNS)
    assert (gr.timeout, gr.max_retries, gr.jobs, gr.resamples, gr.seed, ca.judge_max_tokens) == (defaults.TIMEOUT_S, defaults.MAX_RETRIES, defaults.JOBS, defaults.RESAMPLES, defaults.SEED, defaults.JUDGE_MAX_TOKENS)
    # the library's own defaults are the same constants
    assert Transport() == Transport(defaults.TIMEOUT_S, defaults.MAX_RETRIES, defaults.RATE_LIMIT_ROUNDS)
    assert (EvalRequest("m", Path("o")).jobs, JudgeOptions().jobs, JudgeOptions().temperature) == (defaults.JOBS, defaults.JOBS, defaults.JUDGE_TEMPERATURE)
    for command, shown in (("eval", ["--timeout", "--max-retries", "--jobs", "--trials", "--max-turns", "--rate-limit-rounds"]), ("grade", ["--timeout", "--max-retries", "--jobs", "--resamples"])):
        assert main([command, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split()).split(" options: ", 1)[1]
        for option in shown:
            value = {"--timeout": defaults.TIMEOUT_S, "--max-retries": defaults.MAX_RETRIES, "--jobs": defaults.JOBS, "--trials": defaults.TRIALS, "--max-turns": defaults.MAX_TURNS,
                     "--rate-limit-rounds": defaults.RATE_LIMIT_ROUNDS, "--resamples": defaults.RESAMPLES}[option]
            after = text.split(f"{option} ", 1)[1]
            assert f"(default: {value})" in after[:200], f"{command} {option}: {after[:200]}"


def test_a_command_that_needs_a_bundle_and_finds_none_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    import runner.load.bundle as bundle_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bundle_module, "SOURCE_CHECKOUT", tmp_path / "site-packages")  # as when installed from a wheel
    for argv in (["install"], ["check"], ["calibrate"], ["eval", "--model", "replay:x", "--out", "o"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"no bundle at or above {tmp_path}" in err and "--bundle DIR" in err, err
    assert not (tmp_path / ".agents").exists() and not (tmp_path / "o").exists()


def test_package_errors_map_to_their_exit_codes(tmp_path, monkeypatch, capsys):
    from runner import cli
    from runner.core import HarnessError, LoadError

    for error, code, text in ((HarnessError("the judge failed"), 3, "the judge failed"), (LoadError(tmp_path / "f.yaml", 7, "yaml/syntax", "bad\nthing"), 2, "f.yaml:7: yaml/syntax: bad thing")):
        def boom(args, error=error):
            raise error

        monkeypatch.setattr(cli, "cmd_verify", boom)
        assert main(["verify", str(tmp_path)]) == code
        err = capsys.readouterr().err
        assert err.startswith("mbskills: error: ") and text in err and err.count("\n") == 1
