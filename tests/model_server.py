"""A model API server on 127.0.0.1 for tests: OpenAI Chat Completions (/v1/chat/completions),
OpenAI Responses (/v1/responses), Anthropic Messages (/v1/messages) and the Gemini API
(/v1beta/models/M:generateContent and :streamGenerateContent), tool calls included, each
also streamed as the real APIs stream it (tests/model_streams.py) when the request asks,
on aiohttp (asyncio, so that it is never the bottleneck of a concurrent run). It listens
on a TCP port, or on a Unix socket for clients jailed in their own network namespace
(tests/clients/harness.py).

It plays scripted models, chosen by the request's model name:
  skilled     activates the case's expected skill, reads its expected script, then answers
  plain       never uses a tool
  wrong       activates a skill other than the expected one, then answers
  judge       a judge (requests that ask for structured output): a behaviour is YES when
              one of its identifiers (names with `_` or `.`) appears in the answer, or it
              has none; `correct` likewise for the reference answer's identifiers.
              Every verdict is kept in `verdicts`.
              Its evidence is the identifier it found, or (with none) the answer's first words.
  judge-liar  a judge that says YES to everything, quoting words that are not in the answer
  judge-trivial a judge that says YES to everything, quoting markup or a word that is in
              every answer (`**`, a backtick, `e`, `.`, `the`)
  judge-text  a judge that replies in prose instead of JSON
  prober      an adversarial model: one read_skill_file call per turn for each path in
              `probe_paths`, then an answer
With `script` set, that callable decides every turn instead: script(kind, body, seen)
returns (text, tool calls); the agent-client tests drive the real CLIs this way.
Answers say which SKILL.md bodies reached the model (`saw-skill:<name>`, found by a line
unique to each body), so tests can tell what was in context. `failures` is a queue of
faults served to the next requests in order: "429" (retry-after-ms: 10),
"429-no-header", "429-slow" (retry-after: 1), "500", "503", "401", "200-echo" (a 200 whose plain-text body echoes the
key, as a debugging proxy does), "hang" (answers after `hang_s`), "reset" (the
connection is dropped), "truncated" (a 200 whose JSON body is cut in half), "badargs"
(a tool call whose arguments are not JSON), "objargs" (tool-call arguments sent as a
JSON object, as some OpenAI-compatible servers do), "length" (an empty reply that the
output limit cut off: finish_reason length, stop_reason max_tokens, status incomplete),
"content-parts" / "content-int" / "content-dict" (Chat's message.content as a list of
text parts, an int or an object), "nousage" (a reply without token
counts), "html" and "sse" (a 200 whose body is an HTML page or an event stream),
"400-model" (a gateway's 400 for an unknown model, with its error body) and "404-text"
(a plain-text 404, as for a base URL without /v1). With `fault_rate` > 0, each request
draws a fault from `fault_kinds` with that probability instead (seeded, reproducible).
Response and tool-call ids derive from the request body, so a rerun gets the same ids.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable

from aiohttp import web

import model_streams

ACTIVATE, READ = "activate_skill", "read_skill_file"


@dataclass
class Seen:
    """A request reduced to what the scripts decide on."""

    system: str
    prompt: str
    tools: list[str]
    calls: list[str]  # names of tool calls the model made so far
    results: list[str]  # tool results returned so far


@dataclass
class CaseInfo:
    key: str
    expected_skill: str | None
    expected_script: str | None


@dataclass
class ModelServer:
    cases: dict[str, CaseInfo]  # by prompt text
    markers: dict[str, str]  # skill name -> a line unique to its SKILL.md body
    latency_s: float = 0.0
    hang_s: float = 3.0
    failures: list[str] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    fault_rate: float = 0.0
    fault_kinds: tuple[str, ...] = ("429", "429-no-header", "500", "503", "hang", "reset", "truncated")
    seed: int = 0
    faults_served: dict[str, int] = field(default_factory=dict)
    probe_paths: list[str] = field(default_factory=list)
    port: int = 0
    script: Callable[[str, dict, "Seen"], tuple[str, list[tuple[str, dict]]]] | None = None
    unix_path: str | None = None  # listen here instead of on a TCP port

    def __post_init__(self):
        self._lock = threading.Lock()
        self._random = random.Random(self.seed)

    # -- scripts -------------------------------------------------------------------------
    def decide(self, model: str, seen: Seen) -> tuple[str, list[tuple[str, dict]]]:
        """(answer text, tool calls) for this turn."""
        case = self.cases.get(seen.prompt)
        if case is None:
            return f"[{model}] no such case", []
        can_use = ACTIVATE in seen.tools
        if can_use and model == "skilled" and case.expected_skill:
            if ACTIVATE not in seen.calls:
                return "", [(ACTIVATE, {"name": case.expected_skill})]
            if case.expected_script and READ not in seen.calls:
                return "", [(READ, {"name": case.expected_skill, "path": case.expected_script})]
        if can_use and model == "prober":
            tried = seen.calls.count(READ)
            if tried < len(self.probe_paths):
                return "", [(READ, {"name": sorted(self.markers)[0], "path": self.probe_paths[tried]})]
        if can_use and model == "wrong" and ACTIVATE not in seen.calls:
            other = next(s for s in sorted(self.markers) if s != case.expected_skill)
            return "Let me look at a skill first.", [(ACTIVATE, {"name": other})]
        saw = [s for s, marker in sorted(self.markers.items()) if marker in seen.system or any(marker in r for r in seen.results)]
        return f"[{model}] answer to {case.key}; " + " ".join(f"saw-skill:{s}" for s in saw or ["none"]), []

    IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[A-Za-z0-9]+_[A-Za-z0-9_]+")

    def judge(self, model: str, prompt: str) -> str:
        if model == "judge-text":
            return "The answer looks mostly right to me; I would give it a pass."
        answer = re.search(r"<(answer-[0-9a-f]+)>\n(.*)\n</\1>", prompt, re.S).group(2)
        reference = re.search(r"<reference_answer>\n(.*?)\n</reference_answer>", prompt, re.S).group(1)
        block = re.search(r"<behaviours>\n(.*?)\n</behaviours>", prompt, re.S).group(1)
        behaviours = [line.split(". ", 1)[1] for line in block.splitlines() if re.match(r"\d+\. ", line)]

        def decide(text: str) -> tuple[bool, str]:
            if model == "judge-liar":
                return True, "the answer sets every flag exactly as the reference requires"
            if model == "judge-trivial":
                decide.n = getattr(decide, "n", 0) + 1
                return True, ("**", "`", "e", ".", "the")[decide.n % 5]
            names = self.IDENT.findall(text)
            hit = next((n for n in names if n in answer), None)
            return (hit is not None or not names), hit or " ".join(answer.split()[:4])

        graded = [decide(text) for text in behaviours]
        correct = decide(reference)
        self.verdicts.append({"answer": answer, "behaviours": [v for v, _ in graded], "correct": correct[0]})
        return json.dumps({
            "behaviours": [{"id": i, "verdict": "YES" if v else "NO", "evidence": e if v else ""} for i, (v, e) in enumerate(graded, 1)],
            "correct": {"verdict": "YES" if correct[0] else "NO", "evidence": correct[1]},
        })

    # -- wire formats --------------------------------------------------------------------
    @staticmethod
    def _text(content) -> str:
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") if isinstance(part.get("text", ""), str) else "" for part in content or () if isinstance(part, dict))

    def _seen_chat(self, body: dict) -> Seen:
        system, prompt, calls, results = "", "", [], []
        for m in body["messages"]:
            if m["role"] == "system":
                system += self._text(m["content"])
            elif m["role"] == "user" and not prompt:
                prompt = self._text(m["content"])
            elif m["role"] == "assistant":
                calls += [c["function"]["name"] for c in m.get("tool_calls") or ()]
            elif m["role"] == "tool":
                results.append(self._text(m["content"]))
        return Seen(system, prompt, [t["function"]["name"] for t in body.get("tools") or ()], calls, results)

    def _seen_responses(self, body: dict) -> Seen:
        prompt, calls, results = "", [], []
        for item in body["input"]:
            if item.get("type") == "function_call":
                calls.append(item["name"])
            elif item.get("type") == "function_call_output":
                results.append(item["output"])
            elif item.get("role") == "user" and not prompt:
                prompt = self._text(item["content"])
        return Seen(body.get("instructions") or "", prompt, [t.get("name") or t.get("type", "") for t in body.get("tools") or ()], calls, results)  # built-in tools (web_search) have only a type

    def _seen_anthropic(self, body: dict) -> Seen:
        prompt, calls, results = "", [], []
        for m in body["messages"]:
            blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
            for b in blocks:
                if b["type"] == "text" and m["role"] == "user" and not prompt:
                    prompt = b["text"]
                elif b["type"] == "tool_use":
                    calls.append(b["name"])
                elif b["type"] == "tool_result":
                    results.append(self._text(b["content"]))
        system = body.get("system") or ""
        return Seen(self._text(system), prompt, [t["name"] for t in body.get("tools") or ()], calls, results)

    def _seen_gemini(self, body: dict) -> Seen:
        prompt, calls, results = "", [], []
        for c in body.get("contents") or ():
            for part in c.get("parts") or ():
                if "text" in part and c.get("role", "user") == "user" and not prompt:
                    prompt = part["text"]
                elif "functionCall" in part:
                    calls.append(part["functionCall"]["name"])
                elif "functionResponse" in part:
                    results.append(json.dumps(part["functionResponse"].get("response")))
        system = "".join(p.get("text", "") for p in (body.get("systemInstruction") or {}).get("parts") or ())
        tools = [d["name"] for t in body.get("tools") or () for d in t.get("functionDeclarations") or ()]
        return Seen(system, prompt, tools, calls, results)

    @staticmethod
    def _id(body: dict) -> str:
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]

    def _usage(self, body: dict, text: str) -> tuple[int, int]:
        return len(json.dumps(body)) // 4, max(1, len(text) // 4)

    def _chat(self, body, text, calls):
        n = self._id(body)
        tin, tout = self._usage(body, text)
        message = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [{"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}} for i, (name, args) in enumerate(calls)]
        return {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout, "prompt_tokens_details": {"cached_tokens": 0}},
        }

    def _responses(self, body, text, calls):
        n = self._id(body)
        tin, tout = self._usage(body, text)
        output = [{"type": "function_call", "id": f"fc_{n}_{i}", "call_id": f"call_{n}_{i}", "name": name, "arguments": json.dumps(args), "status": "completed"} for i, (name, args) in enumerate(calls)]
        if text:
            output.insert(0, {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
        return {
            "id": f"resp_{n}", "object": "response", "created_at": 0, "model": body["model"], "status": "completed",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
            "incomplete_details": None, "error": None, "instructions": body.get("instructions"),
            "usage": {"input_tokens": tin, "output_tokens": tout, "total_tokens": tin + tout, "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        }

    def _anthropic(self, body, text, calls):
        n = self._id(body)
        tin, tout = self._usage(body, text)
        content = ([{"type": "text", "text": text}] if text else []) + [{"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args} for i, (name, args) in enumerate(calls)]
        return {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": body["model"], "content": content,
            "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": tin, "output_tokens": tout, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        }

    def _gemini(self, body, text, calls):
        n = self._id(body)
        tin, tout = self._usage(body, text)
        parts = ([{"text": text}] if text else []) + [{"functionCall": {"id": f"call_{n}_{i}", "name": name, "args": args}} for i, (name, args) in enumerate(calls)]
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": tin, "candidatesTokenCount": tout, "totalTokenCount": tin + tout},
            "modelVersion": body.get("model", ""), "responseId": f"resp_{n}",
        }

    # -- HTTP ----------------------------------------------------------------------------
    def _next_fault(self) -> str | None:
        with self._lock:
            if self.failures:
                fault = self.failures.pop(0)
            elif self.fault_rate and self._random.random() < self.fault_rate:
                fault = self._random.choice(self.fault_kinds)
            else:
                return None
            self.faults_served[fault] = self.faults_served.get(fault, 0) + 1
            return fault

    async def _fault(self, fault: str | None, request: web.Request) -> web.StreamResponse | None:
        if fault is None or fault in ("truncated", "badargs", "objargs", "nousage", "length", "content-parts", "content-int", "content-dict"):
            return None
        if fault == "html":
            return web.Response(text="<!DOCTYPE html><html><head><title>Model gateway</title></head><body>Sign in</body></html>", content_type="text/html")
        if fault == "sse":
            return web.Response(text='data: {"id": "x", "choices": []}\n\ndata: [DONE]\n\n', content_type="text/event-stream")
        if fault == "400-model":
            return web.json_response({"error": {"message": "litellm.BadRequestError: Invalid model name passed in model=nope", "type": "invalid_request_error", "code": "400"}}, status=400)
        if fault == "404-text":
            return web.Response(text="404: Not Found", status=404, content_type="text/plain")
        if fault == "reset":
            request.transport.abort()
            raise ConnectionResetError("scripted reset")
        if fault == "hang":
            await asyncio.sleep(self.hang_s)
            return None
        if fault == "429":
            return web.json_response({"error": {"type": "rate_limit_error", "message": "slow down"}}, status=429, headers={"retry-after-ms": "10"})
        if fault == "200-echo":  # a debugging proxy: a 200 whose body is not JSON and echoes the request's key
            key = request.headers.get("Authorization", "").removeprefix("Bearer ") or request.headers.get("X-Api-Key", "")
            encoded = base64.b64encode(f"user:{key}".encode()).decode()
            return web.Response(text=f"proxy debug: Authorization: Bearer {key}; basic {encoded}; url key={urllib.parse.quote(key, safe='')}", content_type="text/plain",
                                headers={"X-Debug-Authorization": f"Bearer {key}", "X-Debug-Basic": encoded})
        if fault == "401-echo":  # like a real API, quote (part of) the key back
            key = request.headers.get("Authorization", "").removeprefix("Bearer ") or request.headers.get("X-Api-Key", "")
            return web.json_response({"error": {"type": "invalid_api_key", "message": f"Incorrect API key provided: {key}"}}, status=401)
        if fault == "429-slow":  # asks for a whole second
            return web.json_response({"error": {"type": "rate_limit_error", "message": "slow down"}}, status=429, headers={"retry-after": "1"})
        if fault == "429-no-header":
            return web.json_response({"error": {"type": "rate_limit_error", "message": "slow down"}}, status=429)
        status = int(fault)
        return web.json_response({"error": {"type": "server_error", "message": f"scripted {status}"}}, status=status)

    def _handler(self, kind: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            stream = bool(body.get("stream"))
            if kind == "gemini":  # the model and the streaming are in the path
                model, _, method = request.match_info["call"].partition(":")
                body = {**body, "model": model}
                stream = method == "streamGenerateContent"
            with self._lock:
                self.requests.append({"path": request.path, "kind": kind, "body": body, "headers": dict(request.headers), "stream": stream})
            fault = self._next_fault()
            failed = await self._fault(fault, request)
            if failed is not None:
                return failed
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            seen = {"chat": self._seen_chat, "responses": self._seen_responses, "anthropic": self._seen_anthropic, "gemini": self._seen_gemini}[kind](body)
            structured = body.get("response_format") or (body.get("text") or {}).get("format") or (body.get("output_config") or {}).get("format")
            if self.script is not None:
                text, calls = self.script(kind, body, seen)
            elif structured:
                text, calls = self.judge(body["model"], seen.prompt), []
            else:
                text, calls = self.decide(body["model"], seen)
            payload = {"chat": self._chat, "responses": self._responses, "anthropic": self._anthropic, "gemini": self._gemini}[kind](body, text, calls)
            if fault == "badargs":
                payload = json.loads(json.dumps(payload).replace('"arguments": "{', '"arguments": "{oops '))  # Anthropic inputs are objects: no such fault there
            if fault == "objargs":
                for item in [c["function"] for ch in payload.get("choices", ()) for c in ch["message"].get("tool_calls") or ()] + [o for o in payload.get("output", ()) if o.get("type") == "function_call"]:
                    item["arguments"] = json.loads(item["arguments"])
            if fault == "nousage":
                payload.pop("usage", None)
            if fault in ("content-parts", "content-int", "content-dict") and kind == "chat":  # shapes some OpenAI-compatible servers send
                message = payload["choices"][0]["message"]
                message["content"] = {"content-parts": [{"type": "text", "text": text[: len(text) // 2]}, {"type": "text", "text": text[len(text) // 2 :]}], "content-int": 42, "content-dict": {"text": text}}[fault]
            if fault == "length":  # the output limit cut the reply off before any text
                payload = {"chat": self._chat, "responses": self._responses, "anthropic": self._anthropic, "gemini": self._gemini}[kind](body, "", [])
                if kind == "chat":
                    payload["choices"][0]["finish_reason"] = "length"
                elif kind == "anthropic":
                    payload["stop_reason"] = "max_tokens"
                elif kind == "responses":
                    payload["status"], payload["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
                else:
                    payload["candidates"][0]["finishReason"] = "MAX_TOKENS"
            if fault == "truncated":
                raw = json.dumps(payload).encode()
                return web.Response(body=raw[: len(raw) // 2], content_type="application/json")
            if stream:
                return await self._stream(request, kind, body, payload)
            return web.json_response(payload)

        return handle

    async def _stream(self, request: web.Request, kind: str, body: dict, payload: dict) -> web.StreamResponse:
        events = model_streams.ENCODERS[kind](payload, body)
        if kind == "gemini" and request.query.get("alt") != "sse":  # without alt=sse Gemini streams one JSON array
            return web.json_response([data for _, data in events])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event, data in events:
            head = f"event: {event}\n" if event else ""
            await response.write(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response

    async def _other(self, request: web.Request) -> web.Response:
        """Anything else a client asks (model lists, token counts, telemetry): recorded, and a 404."""
        with self._lock:
            self.requests.append({"path": request.path, "kind": "other", "method": request.method, "body": None, "headers": dict(request.headers), "stream": False})
        return web.json_response({"error": {"type": "not_found_error", "message": f"no route {request.method} {request.path} on the scripted server"}}, status=404)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handler("chat"))
        app.router.add_post("/v1/responses", self._handler("responses"))
        app.router.add_post("/v1/messages", self._handler("anthropic"))
        app.router.add_post("/v1beta/models/{call}", self._handler("gemini"))
        app.router.add_route("*", "/{tail:.*}", self._other)
        return app

    # -- lifecycle: a thread with its own event loop --------------------------------------
    def start(self) -> "ModelServer":
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve():
            self._runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None)
            await self._runner.setup()
            if self.unix_path:
                await web.UnixSite(self._runner, self.unix_path).start()
            else:
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]
            ready.set()

        def run():
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, kind: str | None = None) -> int:
        return sum(1 for r in self.requests if (kind is None and r["kind"] != "other") or r["kind"] == kind)
