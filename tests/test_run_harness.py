"""The harness under bad servers and bad input, through the CLI and the real SDK clients:
every scripted fault and malformed reply ends in a named cause and an exit code, never a
traceback; a run that cannot work stops early; a refused folder is left as it was."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from conftest import REPO
from model_server import ModelServer
from runner.cli import main
from runner.load import Bundle, bundle_cases

CASES = bundle_cases(Bundle(REPO))
FORMATS = {
    "chat": lambda s: ["--model", "openai:{m}", "--base-url", s.openai_url],
    "responses": lambda s: ["--model", "openai:{m}", "--base-url", s.openai_url, "--api", "responses"],
    "anthropic": lambda s: ["--model", "anthropic:{m}", "--base-url", s.anthropic_url],
}


pytestmark = pytest.mark.usefixtures("sentinel_keys")  # a sentinel key: no file may hold it


@pytest.fixture
def server(repo_server):  # the scripted models, under the short name the tests use
    return repo_server


def evaluate(out: Path, model_args: list[str], *extra: str) -> int:
    return main(["eval", "--bundle", str(REPO), *model_args, "--out", str(out), "--no-cache", "--progress", "plain", "--max-retries", "0", *extra])


def args_for(server: ModelServer, fmt: str = "chat", model: str = "skilled") -> list[str]:
    return [a.replace("{m}", model) for a in FORMATS[fmt](server)]


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()] if (out / "records.jsonl").exists() else []


FAULTS = ["429", "429-no-header", "500", "503", "401", "401-echo", "reset", "truncated", "badargs", "objargs", "nousage", "html", "sse", "400-model", "404-text"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("fault", FAULTS)
def test_no_scripted_fault_or_malformed_reply_gives_a_traceback(tmp_path, server, capsys, fmt, fault):
    server.failures[:] = [fault] * 400
    code = evaluate(tmp_path / "run", args_for(server, fmt), "--conditions", "skills", "--limit", "4", "--timeout", "2", "--rate-limit-rounds", "0")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "Task exception was never retrieved" not in err
    assert code in (0, 1, 2)
    if code == 2:
        assert err.strip().splitlines()[-1].startswith("mbskills: error: ") and len(err.strip().splitlines()[-1]) < 1200
    for record in records(tmp_path / "run"):
        assert record["status"] in ("ok", "error", "turn_limit")
        if record["status"] == "error":
            assert record["error"]["kind"] and record["error"]["message"]
    if code != 2:
        assert main(["grade", str(tmp_path / "run"), "--allow-incomplete", "--resamples", "100"]) in (0, 1)
        assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_tool_call_arguments_sent_as_a_json_object_are_accepted(tmp_path, server, fmt):
    server.failures[:] = ["objargs"] * 100
    assert evaluate(tmp_path / "run", args_for(server, fmt), "--conditions", "skills", "--limit", "3") == 0
    for record in records(tmp_path / "run"):
        assert record["status"] == "ok" and record["activated_skills"] == [record["expected_skill"]]
        call = record["messages"][1]["tool_calls"][0]
        assert json.loads(call["arguments"]) == {"name": record["expected_skill"]}
    # the rerun (all from the run directory) is as quiet
    assert evaluate(tmp_path / "run", args_for(server, fmt), "--conditions", "skills", "--limit", "3") == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("model, base", [("openai:m", "http://127.0.0.1:{port}/v1"), ("anthropic:m", "http://127.0.0.1:{port}")])
def test_a_refused_connection_is_named_and_stops_the_run(tmp_path, capsys, model, base):
    url = base.format(port=free_port())
    out = tmp_path / "run"
    assert evaluate(out, ["--model", model, "--base-url", url], "--conditions", "baseline", "--limit", "6", "-j", "1") == 2
    err = capsys.readouterr().err
    assert f"connection refused to {url}" in err and "the first 3 records all failed the same way" in err and "timeout" not in err.lower()
    assert len(records(out)) == 3  # the other three were never sent


def test_a_200_with_html_is_named_as_such_and_stops_the_run(tmp_path, server, capsys):
    server.failures[:] = ["html"] * 100
    out = tmp_path / "run"
    assert evaluate(out, args_for(server), "--conditions", "baseline", "--limit", "6", "-j", "1") == 2
    err = capsys.readouterr().err
    assert "server returned text/html, not JSON: '<!DOCTYPE html><html><head><title>Model gateway</title>" in err
    assert "AttributeError" not in err and server.count() == 3  # the first three run alone; nothing else is sent


def test_a_gateway_400_for_every_first_request_stops_the_run_with_its_body(tmp_path, server, capsys):
    server.failures[:] = ["400-model"] * 100
    out = tmp_path / "run"
    assert evaluate(out, args_for(server), "--conditions", "baseline", "--limit", "8", "-j", "2") == 2
    err = capsys.readouterr().err
    assert "Invalid model name passed in model=nope" in err and "rerun the same command" in err
    assert server.count() == 3  # the first three records run alone, as a probe


def test_requests_are_counted_including_the_failed_ones(tmp_path, server, capsys):
    server.failures[:] = ["500"] * 2
    out = tmp_path / "run"
    assert evaluate(out, args_for(server), "--conditions", "baseline", "--limit", "4", "-j", "1") == 1
    err = capsys.readouterr().err
    assert f"; {server.count()} requests, 0 from cache" in err and server.count() == 4
    assert sum(r["requests"] for r in records(out)) == 4


def test_a_run_whose_requests_all_failed_accepts_a_corrected_base_url(tmp_path, server, capsys):
    out = tmp_path / "run"
    wrong = ["--model", "openai:skilled", "--base-url", server.openai_url.removesuffix("/v1")]  # no /v1: every route is a 404
    assert evaluate(out, wrong, "--conditions", "baseline", "--limit", "2") == 2
    err = capsys.readouterr().err
    assert "404" in err and "/chat/completions" in err
    assert evaluate(out, args_for(server), "--conditions", "baseline", "--limit", "2") == 0
    assert len(records(out)) == 2 and all(r["status"] == "ok" for r in records(out))
    # a run holding finished records still refuses another command, and says what to delete
    assert evaluate(out, args_for(server, model="plain"), "--conditions", "baseline", "--limit", "2", "--temperature", "0.5") == 2
    assert f"delete {out} to start over" in capsys.readouterr().err


def test_a_refused_out_folder_is_left_as_it_was(tmp_path, server, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    assert evaluate(mine, args_for(server), "--limit", "1") == 2
    assert "not empty and not a run directory" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_case_options_accumulate(tmp_path, server):
    out = tmp_path / "run"
    assert evaluate(out, args_for(server), "--conditions", "baseline", "--case", "fsdp-minimal-override", "--case", "overlap-env-vars") == 0
    assert sorted(r["case_id"] for r in records(out)) == ["fsdp-minimal-override", "overlap-env-vars"]


def test_a_record_out_of_turns_has_its_own_status_and_counts_as_a_failure(tmp_path, server, capsys):
    out = tmp_path / "run"
    assert evaluate(out, args_for(server), "--conditions", "skills", "--case", "fsdp-minimal-override", "--max-turns", "1") == 0
    err = capsys.readouterr().err
    assert "0 errors, 1 out of turns" in err
    (record,) = records(out)
    assert record["status"] == "turn_limit" and record["answer"] == ""
    assert main(["grade", str(out), "--resamples", "100"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["health"]["turn_limits"] == 1 and report["overall"]["conditions"]["skills"]["passes"] == 0
    assert report["overall"]["conditions"]["skills"]["records"] == 1  # counted, as a failure
    assert "ran out of turns without an answer" in (out / "junit.xml").read_text()
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert "1 records, 0 errors, 1 out of turns" in capsys.readouterr().out


def test_errors_name_the_option_the_user_typed(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["eval", "--bundle", str(REPO), "--model", f"replay:{REPO / 'evals' / 'calibration'}", "--limit", "1", "--out", str(run), "--progress", "plain"]) == 0
    capsys.readouterr()
    assert main(["grade", str(run), "--judge", "gpt-4.1"]) == 2
    assert "--judge 'gpt-4.1': expected openai:MODEL" in capsys.readouterr().err
    assert main(["grade", str(run), "--judge", "replay:x", "--judge-base-url", "http://127.0.0.1:1"]) == 2
    assert "--judge-base-url and --judge-api do not apply" in capsys.readouterr().err
    assert main(["eval", "--model", "gpt-4.1", "--out", str(tmp_path / "o")]) == 2
    assert "--model 'gpt-4.1'" in capsys.readouterr().err


def test_servers_behind_a_base_url_are_not_priced_at_list_price():
    from runner.providers import PriceTable, open_provider, price_for

    env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    table = PriceTable()
    assert price_for(open_provider("anthropic:claude-sonnet-4-5", env=env), table) is not None
    assert price_for(open_provider("anthropic:claude-sonnet-4-5", base_url="http://127.0.0.1:9", env=env), table) is None
    assert price_for(open_provider("openai:gpt-4.1", base_url="http://127.0.0.1:9/v1", env=env), table) is None


# -- 9. a case's files -------------------------------------------------------------------


def agentskills_bundle(root: Path, files: list[str], skill_name: str = "demo-skill") -> Path:
    import shutil

    from conftest import GOOD_BUNDLE

    bundle = root / "bundle"
    shutil.copytree(GOOD_BUNDLE, bundle)
    (bundle / "evals" / "files").mkdir(parents=True, exist_ok=True)
    (bundle / "evals" / "files" / "train.py").write_text("cfg.ddp.use_megatron_fsdp = True  # MARKER-IN-FILE\n")
    (bundle / "evals" / "with-files.json").write_text(json.dumps({
        "skill_name": skill_name,
        "evals": [{"id": "file-case", "prompt": "What does my script enable?", "expected_output": "Megatron FSDP.", "files": files,
                   "assertions": ["Names Megatron FSDP.", "Quotes the flag.", "Says nothing else.", "Answers briefly."]}],
    }))
    return bundle


def test_a_cases_files_reach_the_model_under_every_condition(tmp_path, server):
    bundle = agentskills_bundle(tmp_path, ["evals/files/train.py"])
    out = tmp_path / "run"
    assert main(["eval", "--bundle", str(bundle), "--model", "openai:plain", "--base-url", server.openai_url, "--case", "with-files/*",
                 "--conditions", "baseline,skills,inline", "--out", str(out), "--no-cache", "--progress", "plain"]) == 0
    assert len(server.requests) == 3
    for request in server.requests:
        user = next(m for m in request["body"]["messages"] if m["role"] == "user")["content"]
        assert user.startswith("What does my script enable?") and '<file name="evals/files/train.py">' in user and "MARKER-IN-FILE" in user


@pytest.mark.parametrize(
    "files, writes, message",
    [
        (["evals/files/absent.py"], {}, "does not exist"),
        (["evals/files/blob.bin"], {"evals/files/blob.bin": b"\x00\x01\x02"}, "is binary"),
        (["evals/files/big.txt"], {"evals/files/big.txt": b"x" * (256 * 1024 + 1)}, "case files over 262144 bytes are refused"),
        (["../outside.txt"], {}, "is outside"),
    ],
)
def test_validate_refuses_a_missing_binary_oversized_or_outside_file(tmp_path, capsys, files, writes, message):
    bundle = agentskills_bundle(tmp_path, files)
    for name, data in writes.items():
        (bundle / name).write_bytes(data)
    (tmp_path / "outside.txt").write_text("x")
    assert main(["validate", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "with-files.json" in out and "evals/missing-file" in out and message in out


def test_validate_refuses_an_unknown_skill_name_in_a_bundle_level_file(tmp_path, capsys):
    bundle = agentskills_bundle(tmp_path, [], skill_name="no-such-skill")
    assert main(["validate", str(bundle)]) == 1
    assert "evals/unknown-skill: skill_name 'no-such-skill' is not a skill of this bundle" in capsys.readouterr().out
