"""The performance benchmark (bench/perf.py) and the speed-related behaviour it relies on.

The figures themselves are not asserted here (they depend on the machine): the benchmark
prints them and the README quotes them. These tests check that the benchmark measures what
it says, and that the runner's fast paths keep their promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "tests"))
from model_server import CaseInfo, ModelServer  # noqa: E402

from runner.load import bundle_cases  # noqa: E402
from runner.load import Bundle  # noqa: E402

BENCH_VENV = REPO / ".venv-bench"


def test_small_benchmark_run_is_self_consistent(tmp_path):
    out = tmp_path / "perf.json"
    done = subprocess.run(
        [sys.executable, "bench/perf.py", "--records", "40", "--latency", "0.02", "--repeat", "2", "--skip-claims", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a target missed on this tiny workload
    f = json.loads(out.read_text())
    # One case x condition x trial per record, enough trials for the asked-for records.
    w = f["workload"]
    assert f["cold"]["records"] == w["cases"] * 3 * w["trials"] >= 40
    assert w["cases"] * 3 * (w["trials"] - 1) < 40
    # The tool loop makes more requests than records (skills condition: activate, read, answer).
    assert f["cold"]["requests"] > f["cold"]["records"]
    # The bare loops replay exactly the requests the server saw from the cold run.
    assert f["bare"]["requests"] == f["bare_fast"]["requests"] == f["cold"]["requests"]
    # The warm rerun writes every record again, from the cache alone.
    assert f["warm"]["requests"] == 0 and f["warm"]["records"] == f["cold"]["records"]
    assert f["cold"]["ideal_s"] == pytest.approx(f["cold"]["requests"] * 0.02 / 64)
    assert f["ratios"]["vs_bare"] == pytest.approx(f["cold"]["wall_s"] / f["bare"]["wall_s"])
    assert f["targets"]["warm_s"]["met"] is (f["warm"]["wall_s"] <= 2.0)
    # Two rounds each; the table shows the lower middle (here: the faster) one.
    for name in ("cold", "warm", "bare", "bare_fast"):
        assert len(f[name]["rounds_wall_s"]) == 2 and f[name]["wall_s"] == min(f[name]["rounds_wall_s"])
    assert f["targets"]["vs_inspect"]["met"] is None  # not measured: stated, not passed
    assert "| mbskills eval, cold |" in done.stdout and "| target | limit | actual | met |" in done.stdout


def test_benchmark_refuses_a_missing_inspect_environment(tmp_path):
    done = subprocess.run([sys.executable, "bench/perf.py", "--inspect-python", str(tmp_path / "python")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2
    assert "no `inspect` command beside it" in done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr


@pytest.fixture
def server():
    cases = bundle_cases(Bundle(REPO))
    served = ModelServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in cases}, {}).start()
    yield served
    served.stop()


PROBE = """
import sys
from runner.cli import main
code = main(sys.argv[1:])
print("SDK-IMPORTED" if any(m == "openai" or m.startswith("openai.") for m in sys.modules) else "SDK-NOT-IMPORTED")
sys.exit(code)
"""


def _eval(server, out: Path, cache: Path) -> subprocess.CompletedProcess:
    args = ["eval", "--model", "openai:skilled", "--base-url", server.openai_url, "--conditions", "baseline,skills", "--limit", "4", "--out", str(out), "--cache", str(cache), "--progress", "plain"]
    env = {**os.environ, "OPENAI_API_KEY": "test-key"}
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def test_a_run_answered_from_the_cache_never_imports_the_sdk(server, tmp_path):
    cold = _eval(server, tmp_path / "cold", tmp_path / "cache.sqlite")
    assert cold.returncode == 0, cold.stderr
    assert "SDK-IMPORTED" in cold.stdout
    sent = server.count()
    assert sent > 0
    warm = _eval(server, tmp_path / "warm", tmp_path / "cache.sqlite")
    assert warm.returncode == 0, warm.stderr
    assert "SDK-NOT-IMPORTED" in warm.stdout
    assert server.count() == sent
    cold_records = [json.loads(line) for line in (tmp_path / "cold" / "records.jsonl").read_text().splitlines()]
    warm_records = [json.loads(line) for line in (tmp_path / "warm" / "records.jsonl").read_text().splitlines()]
    assert sorted((r["key"], r["answer"]) for r in warm_records) == sorted((r["key"], r["answer"]) for r in cold_records)


def test_live_providers_send_through_the_aiohttp_transport(server):
    import asyncio

    from runner.providers import Settings, Situation, open_provider

    async def one(spec, base_url):
        provider = open_provider(spec, Settings(max_tokens=64), base_url=base_url, env={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
        assert provider._client is None  # nothing built before the first request
        case = bundle_cases(Bundle(REPO))[0]
        reply = await provider.complete("", [{"role": "user", "content": case.prompt}], [], Situation(case.key, "baseline", 0))
        transport = type(provider.client._client).__mro__
        await provider.aclose()
        return reply, transport

    for spec, url in (("openai:plain", server.openai_url), ("anthropic:plain", server.anthropic_url)):
        reply, mro = asyncio.run(one(spec, url))
        assert reply.text.startswith("[plain] answer to ")
        assert any("Aiohttp" in cls.__name__ for cls in mro), [cls.__name__ for cls in mro]


@pytest.mark.skipif(not (BENCH_VENV / "bin" / "inspect").exists(), reason="no .venv-bench (built by `bash run.sh bench`)")
def test_inspect_task_replays_the_runners_requests(server, tmp_path):
    """inspect_ai's side gets one sample per request, with that request's messages and tools."""
    bodies = tmp_path / "bodies.jsonl"
    ran = _eval(server, tmp_path / "cold", tmp_path / "cache.sqlite")
    assert ran.returncode == 0, ran.stderr
    chat = [r["body"] for r in server.requests if r["kind"] == "chat"]
    bodies.write_text("".join(json.dumps(b) + "\n" for b in chat))
    server.requests.clear()
    env = {**os.environ, "BENCH_BODIES": str(bodies), "BENCH_API_KEY": "k", "BENCH_BASE_URL": server.openai_url, "INSPECT_LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run(
        [str(BENCH_VENV / "bin" / "inspect"), "eval", "bench/inspect_task.py", "--model", "openai-api/bench/skilled", "--max-connections", "8", "--display", "none", "--no-log-samples"],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    replayed = [r["body"] for r in server.requests]
    assert len(replayed) == len(chat)
    # Same conversations (roles and texts) and the same tools offered, request for request.
    shape = lambda b: (tuple((m["role"], m.get("content") or "") for m in b["messages"]), tuple(sorted(t["function"]["name"] for t in b.get("tools") or ())))  # noqa: E731
    assert sorted(map(shape, replayed)) == sorted(map(shape, chat))
