"""The benchmark's model server, in a process of its own so it never shares the client's CPU
time slice: the tests' scripted model API (aiohttp, asyncio) with a fixed latency.

Run: python bench/server.py --latency 0.1   (prints `port N` when it listens; stops on
SIGTERM or when stdin closes). Besides the model API it answers:
  GET  /bench/count     {"requests": N} model requests served since the last reset
  POST /bench/reset     forget the requests served so far
  GET  /bench/requests  the Chat Completions bodies served since the last reset, as JSON
                        lines (the bare loop and inspect_ai replay exactly these)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from model_server import CaseInfo, ModelServer  # noqa: E402  (the tests' scripted models)
from runner.load import bundle_cases  # noqa: E402
from runner.load import Bundle  # noqa: E402

# A line unique to each SKILL.md body: the scripted answers say which skills reached the model.
MARKERS = {
    "nemo-mbridge-perf-megatron-fsdp": "# Megatron FSDP in Megatron-Bridge",
    "nemo-mbridge-perf-tp-dp-comm-overlap": "# TP, DP and PP communication overlap in Megatron-Bridge",
}


class BenchServer(ModelServer):
    def app(self) -> web.Application:
        app = super().app()

        async def count(request):
            return web.json_response({"requests": len(self.requests)})

        async def reset(request):
            with self._lock:
                self.requests.clear()
            return web.json_response({"requests": 0})

        async def bodies(request):
            with self._lock:
                lines = [json.dumps(r["body"]) for r in self.requests if r["kind"] == "chat"]
            return web.Response(text="\n".join(lines) + "\n" if lines else "", content_type="application/x-ndjson")

        app.router.add_get("/bench/count", count)
        app.router.add_post("/bench/reset", reset)
        app.router.add_get("/bench/requests", bodies)
        return app


def main() -> int:
    parser = argparse.ArgumentParser(description="scripted model API with a fixed latency, for bench/perf.py")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds added to every model request (default: 0.1)")
    parser.add_argument("--bundle", default=str(REPO), help="bundle whose cases the scripted models know")
    args = parser.parse_args()
    cases = bundle_cases(Bundle(Path(args.bundle)))
    server = BenchServer({c.prompt: CaseInfo(c.key, c.expected_skill, c.expected_script) for c in cases}, MARKERS, latency_s=args.latency).start()
    print(f"port {server.port}", flush=True)
    try:
        sys.stdin.read()  # the parent closes our stdin (or dies) when it is done
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
