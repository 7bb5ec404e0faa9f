"""A real LiteLLM proxy on 127.0.0.1 for tests, offline: every model answers from its
`mock_response` (and, on Chat Completions, `mock_tool_calls`), so no upstream provider
is ever called.

The proxy runs from its own virtualenv, .venv-gateway (pinned in
requirements/gateway.in and requirements/gateway-lock.txt; it is large and conflicts
with nothing in .venv only because it is kept apart). Build it with:

    python3.12 -m venv .venv-gateway
    .venv-gateway/bin/pip install -r requirements/gateway-lock.txt

Without that virtualenv, `start_gateway` skips the calling test.

    gw = start_gateway(tmp_path, {"mock-good": "the answer"})
    base_url, master_key, stop = gw      # base_url ends in /v1
    ...
    stop()                               # kills the proxy's whole process group

or `with gateway(tmp_path, models) as gw: ...`.

A model's value is its mock text, or a dict of extra `litellm_params` (say
`{"mock_response": "...", "mock_tool_calls": [...]}`).

What this LiteLLM version answers (no database, so only the master key is a valid key):
  known model, master key    200, the mock text, usage {prompt 10, completion 20}
  any other key              400 {"error": {"message": "No connected db.", "type": "no_db_connection", "code": "400"}}
  no key at all              500, body "Internal Server Error" (plain text)
  unknown model              400 {"error": {"message": "/chat/completions: Invalid model name passed in model=...", "type": "invalid_request_error", "code": "400"}}
  /v1/responses              served; mock text as output_text, but mock_tool_calls are dropped
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
GATEWAY_VENV = REPO / ".venv-gateway"
LITELLM = GATEWAY_VENV / "bin" / "litellm"
MASTER_KEY = "sk-gateway-test-master-0123456789"
START_TIMEOUT_S = 90.0  # about 6 s on a 2-core machine; a cold page cache is slower
STOP_TIMEOUT_S = 10.0

# Everything LiteLLM would otherwise fetch or send at start-up or later is kept local:
# the model cost map, Anthropic beta headers, auto-router presets, policy templates and
# blog posts load from the copies it ships; its telemetry is vetoed (it is also off
# without a database); no OpenTelemetry SDK export.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_TELEMETRY_DISABLED": "True",
    "OTEL_SDK_DISABLED": "true",
    "NO_PROXY": "*",
    "PYTHONUNBUFFERED": "1",
}
# Inherited variables that could point the proxy at a database, a real provider or a proxy.
DROPPED_ENV_PREFIXES = ("LITELLM_", "OPENAI_", "ANTHROPIC_", "AZURE_", "OTEL_", "DATABASE_", "DIRECT_URL")
DROPPED_ENV = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy", "REDIS_URL", "REDIS_HOST"}
# Where a model would go if a mock ever failed to short-circuit: the discard port on
# loopback (refused), never a provider.
NOWHERE = "http://127.0.0.1:9/v1"


class Gateway:
    """A running proxy. Unpacks as (base_url, master_key, stop)."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path, config: Path):
        self.proc = proc
        self.port = port
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = self.root + "/v1"
        self.master_key = MASTER_KEY
        self.log = log
        self.config = config

    def __iter__(self):
        return iter((self.base_url, self.master_key, self.stop))

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the proxy's process group, SIGKILL if it outstays STOP_TIMEOUT_S."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        # Workers it forked may outlive the leader: sweep the group either way.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_TIMEOUT_S)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(models: dict[str, str | dict]) -> dict:
    model_list = []
    for name, spec in models.items():
        params = {"model": f"openai/{name}", "api_key": "sk-mock-unused", "api_base": NOWHERE}
        params.update({"mock_response": spec} if isinstance(spec, str) else spec)
        if "mock_response" not in params and "mock_tool_calls" not in params:
            raise ValueError(f"model {name!r}: no mock_response or mock_tool_calls, it would call out")
        model_list.append({"model_name": name, "litellm_params": params})
    return {
        "model_list": model_list,
        "litellm_settings": {"num_retries": 0, "request_timeout": 30},
        "general_settings": {"master_key": MASTER_KEY},
    }


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and not k.startswith(DROPPED_ENV_PREFIXES)}
    env.update(OFFLINE_ENV)
    return env


def _alive(root: str) -> bool:
    try:
        with urllib.request.urlopen(root + "/health/liveliness", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_gateway(tmp_path: Path, models: dict[str, str | dict], timeout: float = START_TIMEOUT_S) -> Gateway:
    """Write a config for `models`, start the proxy on a free 127.0.0.1 port and wait
    until it answers /health/liveliness. Skips the test without .venv-gateway."""
    if not LITELLM.exists():
        pytest.skip(f"no LiteLLM proxy: {LITELLM} is missing (build .venv-gateway from requirements/gateway-lock.txt)")
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "litellm-config.json"  # JSON is YAML: no PyYAML needed here
    config.write_text(json.dumps(_config(models), indent=2))
    last_error = ""
    for attempt in range(3):  # the port can be taken between choosing it and binding it
        port = _free_port()
        log = tmp_path / f"litellm-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=tmp_path,
                start_new_session=True,  # its own process group, killed whole by stop()
            )
        gw = Gateway(proc, port, log, config)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if _alive(gw.root):
                    return gw
                time.sleep(0.1)
        except BaseException:
            gw.stop()
            raise
        exited = proc.poll()
        gw.stop()
        last_error = f"LiteLLM proxy exited with {exited}" if exited is not None else f"LiteLLM proxy not ready after {timeout:.0f} s"
        if "address already in use" not in gw.log_tail().lower():
            break
    raise RuntimeError(f"{last_error}; last lines of {log}:\n{gw.log_tail()}")


@contextlib.contextmanager
def gateway(tmp_path: Path, models: dict[str, str | dict], timeout: float = START_TIMEOUT_S) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path, models, timeout)
    try:
        yield gw
    finally:
        gw.stop()

