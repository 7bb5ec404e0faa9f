"""Generated, not listed (issue 22): Hypothesis builds malformed run directories, records,
evals files, checks sidecars, labelled answers and model-server replies, and drives
`validate`, `eval`, `grade`, `show` and `calibrate` (which writes the reports) through the
CLI in a subprocess (tests/fuzz_cli.py). Whatever the input, the outcome is exit 0, 1, 2
or 3 with no traceback, and an exit 2 says why in one line.

The `ci` profile (default) is derandomized, so every run tries the same inputs; set
HYPOTHESIS_PROFILE=long for ten times as many."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import GOOD_BUNDLE, REPO, SENTINEL_KEY
from fuzz_cli import Runner

settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)
settings.register_profile("long", deadline=None, suppress_health_check=list(HealthCheck), database=None, max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1
RUNS: dict[str, int] = {}  # CLI runs per test, reported at the end of the module


def examples(n: int):
    return settings(max_examples=n * SCALE)


# -- values of every shape ----------------------------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
HUGE = st.sampled_from(["x" * 50_000, 10**400, -1, [[[[[]]]]], {"": {"": {"": None}}}])
JSON = st.recursive(SCALARS | HUGE, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
RAW = st.binary(max_size=300) | st.just(b"\xef\xbb\xbf{}") | st.just(b"\xff\xfe\x00") | st.just(b'{"key": "a\xff"}\n')


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    runner = Runner(sys.executable, str(REPO))
    yield runner
    runner.close()
    total = sum(RUNS.values())
    print(f"\nfuzz: {total} CLI runs ({', '.join(f'{k} {v}' for k, v in sorted(RUNS.items()))})")


def env(home: Path) -> dict:
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "OPENAI_API_KEY": SENTINEL_KEY, "LANG": "C.UTF-8"}


def call(cli: Runner, name: str, argv: list[str], cwd: Path, home: Path, *, allowed=(0, 1, 2, 3)) -> dict:
    result = cli.run(argv, str(cwd), env(home))
    RUNS[name] = RUNS.get(name, 0) + 1
    err = result["stderr"]
    assert "Traceback" not in err, f"mbskills {' '.join(argv)}\n{err[-3000:]}"
    assert result["code"] in allowed, f"mbskills {' '.join(argv)} -> {result['code']}\n{err[-2000:]}"
    if result["code"] == 2:
        assert err.strip().splitlines()[-1].startswith("mbskills: error: "), err[-2000:]
    assert SENTINEL_KEY not in result["stdout"] + err
    return result


# -- run directories ------------------------------------------------------------------------

RUN_FIELDS = ["format", "model", "max_turns", "bundle", "bundle_fingerprint", "bundle_files", "conditions", "trials", "cases", "command", "zzz"]
RECORD_FIELDS = ["key", "case", "owner", "case_id", "condition", "trial", "status", "error", "finish", "expected_skill", "expected_script", "model", "inlined_skill",
                 "tools_offered", "messages", "answer", "activated_skills", "files_read", "turns", "requests", "cached_responses", "usage", "cost_usd", "live_cost_usd", "zzz"]
NESTED = [("usage", "input_tokens"), ("usage", "unreported"), ("error", "message"), ("model", "model"), ("turns", 0)]


@pytest.fixture(scope="module")
def run_template(tmp_path_factory) -> Path:
    from runner.cli import main

    out = tmp_path_factory.mktemp("template") / "run"
    code = main(["eval", "--bundle", str(REPO), "--model", f"replay:{REPO / 'evals' / 'calibration'}", "--conditions", "baseline,skills",
                 "--case", "fsdp-minimal-override", "--case", "route-none-hf-conversion", "--out", str(out), "--progress", "plain"])
    assert code == 0
    return out


def _set(data: dict, field, value, delete: bool) -> None:
    if isinstance(field, tuple):
        outer = data.get(field[0])
        if isinstance(outer, (dict, list)) and (isinstance(outer, dict) or (outer and isinstance(field[1], int))):
            if delete and isinstance(outer, dict):
                outer.pop(field[1], None)
            elif isinstance(outer, dict):
                outer[field[1]] = value
            else:
                outer[field[1]] = value
        return
    if delete:
        data.pop(field, None)
    else:
        data[field] = value


RUN_DAMAGE = st.one_of(
    st.tuples(st.just("run-field"), st.sampled_from(RUN_FIELDS), JSON, st.booleans()),
    st.tuples(st.just("run-whole"), JSON | RAW),
    st.tuples(st.just("run-bom")),
    st.tuples(st.just("record-field"), st.integers(0, 3), st.sampled_from(RECORD_FIELDS + NESTED), JSON, st.booleans()),
    st.tuples(st.just("record-whole"), st.integers(0, 3), JSON | RAW),
    st.tuples(st.just("record-duplicate"), st.integers(0, 3)),
    st.tuples(st.just("record-drop"), st.integers(0, 3)),
)
RUN_COMMANDS = st.sampled_from([["grade", "{run}"], ["grade", "{run}", "--allow-incomplete", "--fail-under-pass", "0.5"], ["show", "{run}"], ["show", "{run}", "--json"], ["show", "{run}", "--case", "*"]])


def damage_run(run: Path, damage: tuple) -> None:
    kind = damage[0]
    run_file, records_file = run / "run.json", run / "records.jsonl"
    lines = records_file.read_bytes().splitlines()
    if kind == "run-field":
        data = json.loads(run_file.read_text())
        _set(data, damage[1], damage[2], damage[3])
        run_file.write_text(json.dumps(data))
    elif kind == "run-whole":
        run_file.write_bytes(damage[1] if isinstance(damage[1], bytes) else json.dumps(damage[1]).encode())
    elif kind == "run-bom":
        run_file.write_bytes(b"\xef\xbb\xbf" + run_file.read_bytes())
    else:
        index = damage[1] % len(lines)
        if kind == "record-field":
            record = json.loads(lines[index])
            _set(record, damage[2], damage[3], damage[4])
            lines[index] = json.dumps(record).encode()
        elif kind == "record-whole":
            lines[index] = damage[2] if isinstance(damage[2], bytes) else json.dumps(damage[2]).encode()
        elif kind == "record-duplicate":
            lines.append(lines[index])
        else:
            del lines[index]
        records_file.write_bytes(b"\n".join(lines) + b"\n")


@examples(1000)
@given(damage=RUN_DAMAGE, command=RUN_COMMANDS)
def test_damaged_run_directories(cli, run_template, tmp_path_factory, damage, command):
    work = tmp_path_factory.mktemp("run")
    run = work / "run"
    shutil.copytree(run_template, run)
    damage_run(run, damage)
    call(cli, "run-dir", [part.format(run=run) for part in command] + (["--bundle", str(REPO)] if command[0] == "grade" else []), work, work)


# -- evals files, checks sidecars and labelled answers in a bundle ----------------------------

CASE_FIELDS = ["id", "question", "expected_skill", "expected_script", "ground_truth", "expected_behavior", "files", "zzz"]
# YAML-looking text: its punctuation, indentation and the sidecar's own words, in any order
YAMLISH = st.lists(st.sampled_from(list("ab: -[]{}'\"\n#&*!|>%@`,?0.") + ["  ", "must", "must_not", "behaviour", "demo-1"]), max_size=60).map("".join)


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("answers") / "demo-skill"
    folder.mkdir()
    for index in range(1, 13):
        (folder / f"demo-{index}.md").write_text("Set `cfg.widget.enabled = True`; it turns the widget on.\n")
    routing = folder.parent / "routing"
    routing.mkdir()
    for case in json.loads((GOOD_BUNDLE / "evals" / "routing.json").read_text())["evals"]:
        (routing / f"{case['id']}.md").write_text("Not this bundle's topic.\n")
    return folder.parent


def bundle_copy(work: Path) -> Path:
    bundle = work / "bundle"
    shutil.copytree(GOOD_BUNDLE, bundle)
    return bundle


EVALS_DAMAGE = st.one_of(
    st.tuples(st.just("whole"), JSON | RAW),
    st.tuples(st.just("case-field"), st.integers(0, 5), st.sampled_from(CASE_FIELDS), JSON, st.booleans()),
    st.tuples(st.just("cases"), st.lists(st.dictionaries(st.sampled_from(CASE_FIELDS), JSON, max_size=6), max_size=3)),
)


@examples(300)
@given(damage=EVALS_DAMAGE, command=st.sampled_from(["validate", "eval"]))
def test_malformed_evals_files(cli, answers, tmp_path_factory, damage, command):
    work = tmp_path_factory.mktemp("evals")
    bundle = bundle_copy(work)
    path = bundle / "skills" / "demo-skill" / "evals" / "evals.json"
    if damage[0] == "whole":
        path.write_bytes(damage[1] if isinstance(damage[1], bytes) else json.dumps(damage[1]).encode())
    elif damage[0] == "case-field":
        cases = json.loads(path.read_text())
        _set(cases[damage[1] % len(cases)], damage[2], damage[3], damage[4])
        path.write_text(json.dumps(cases))
    else:
        path.write_text(json.dumps(damage[1]))
    if command == "validate":
        call(cli, "evals", ["validate", str(bundle)], work, work)
        call(cli, "evals", ["validate", str(path)], work, work)
    else:
        run = work / "run"
        result = call(cli, "evals", ["eval", "--bundle", str(bundle), "--model", f"replay:{answers}", "--conditions", "baseline,skills", "--out", str(run), "--progress", "plain"], work, work)
        if result["code"] in (0, 1):
            call(cli, "evals", ["grade", str(run), "--bundle", str(bundle), "--allow-incomplete"], work, work)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, answers) -> Path:
    from runner.cli import main

    work = tmp_path_factory.mktemp("good-run")
    bundle = bundle_copy(work)
    run = work / "run"
    assert main(["eval", "--bundle", str(bundle), "--model", f"replay:{answers}", "--conditions", "baseline,skills", "--limit", "3", "--out", str(run), "--progress", "plain"]) == 0
    return work


SIDECAR = st.one_of(
    YAMLISH,
    st.builds(lambda data: json.dumps(data), JSON),
    st.builds(
        lambda case, behaviour, must, must_not: json.dumps({case: [{"behaviour": behaviour, "must": must, "must_not": must_not}]}),
        st.sampled_from(["demo-1", "demo-2", "nope"]),
        st.sampled_from(["Sets cfg.widget.enabled = True.", "Does not invent other settings.", "x"]),
        st.lists(st.text(max_size=12), max_size=3),
        st.lists(st.text(max_size=12), max_size=3),
    ),
)


@examples(300)
@given(text=SIDECAR, command=st.sampled_from(["validate", "grade"]))
def test_malformed_checks_sidecars(cli, good_run, tmp_path_factory, text, command):
    work = tmp_path_factory.mktemp("sidecar")
    shutil.copytree(good_run / "bundle", work / "bundle")
    shutil.copytree(good_run / "run", work / "run")
    (work / "bundle" / "skills" / "demo-skill" / "evals" / "checks.yaml").write_text(text)
    if command == "validate":
        call(cli, "sidecar", ["validate", str(work / "bundle")], work, work)
    else:
        call(cli, "sidecar", ["grade", str(work / "run"), "--bundle", str(work / "bundle"), "--allow-changed-bundle"], work, work)


LABELS = st.one_of(
    st.builds(lambda fails, correct, body: f"---\nfails: {json.dumps(fails)}\ncorrect: {json.dumps(correct)}\n---\n{body}", JSON, JSON, st.text(max_size=40)),
    st.text(max_size=80),
    st.builds(lambda body: "---\n" + body, YAMLISH),
)


@examples(200)
@given(text=LABELS | RAW, name=st.sampled_from(["demo-1.md", "demo-1.bad-1.md", "demo-2.held-1.md", "nope.md"]))
def test_malformed_labelled_answers(cli, tmp_path_factory, text, name):
    work = tmp_path_factory.mktemp("labelled")
    bundle = bundle_copy(work)
    folder = work / "answers" / "demo-skill"
    folder.mkdir(parents=True)
    (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    call(cli, "labelled", ["calibrate", "--bundle", str(bundle), "--answers", str(work / "answers")], work, work)
    call(cli, "labelled", ["validate", str(bundle)], work, work)


# -- model-server replies -------------------------------------------------------------------------


class Replies:
    """A server on 127.0.0.1 that answers each POST with the next queued (status, type, body)."""

    def __init__(self):
        self.queue: list[tuple[int, str, bytes]] = []
        self.lock = threading.Lock()
        replies = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with replies.lock:
                    status, kind, body = replies.queue.pop(0) if replies.queue else (500, "application/json", b'{"error": {"message": "queue empty"}}')
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture(scope="module")
def replies():
    served = Replies()
    yield served
    served.server.shutdown()


def chat(content, **overrides) -> dict:
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    body.update(overrides)
    return body


REPLY = st.one_of(
    st.builds(lambda content: (200, "application/json", json.dumps(chat(content)).encode()), JSON | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]), "text": JSON}), max_size=3)),
    st.builds(lambda field, value: (200, "application/json", json.dumps(chat("Set cfg.widget.enabled = True.", **{field: value})).encode()), st.sampled_from(["choices", "usage", "id", "model", "object"]), JSON),
    st.builds(lambda finish, usage: (200, "application/json", json.dumps(chat("ok answer", usage=usage) | {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish}]}).encode()), JSON, JSON),
    st.builds(lambda status, kind, body: (status, kind, body), st.sampled_from([200, 400, 401, 404, 429, 500]), st.sampled_from(["application/json", "text/plain", "text/html", "text/event-stream"]), RAW),
    st.builds(lambda data: (200, "application/json", json.dumps(data).encode()), JSON),
)


@examples(150)
@given(model_reply=REPLY, judge_reply=REPLY)
def test_malformed_server_replies_to_eval_and_the_judge(cli, replies, tmp_path_factory, model_reply, judge_reply):
    work = tmp_path_factory.mktemp("reply")
    bundle = bundle_copy(work)
    run = work / "run"
    replies.queue[:] = [model_reply]
    result = call(cli, "server", ["eval", "--bundle", str(bundle), "--model", "openai:m", "--base-url", replies.url, "--conditions", "baseline", "--case", "demo-2",
                                  "--max-retries", "0", "--rate-limit-rounds", "0", "--timeout", "5", "--no-cache", "--out", str(run), "--progress", "plain"], work, work)
    if result["code"] in (0, 1):
        call(cli, "server", ["show", str(run), "--case", "*"], work, work)
        replies.queue[:] = [judge_reply]
        call(cli, "server", ["grade", str(run), "--allow-incomplete", "--judge", "openai:j", "--judge-base-url", replies.url, "--max-retries", "0", "--timeout", "5", "--no-cache"], work, work)
