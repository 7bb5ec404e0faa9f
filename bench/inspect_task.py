"""inspect_ai's side of the benchmark: one sample per request the runner made, carrying that
request's messages and tools, answered by one `generate()` each and scored with `includes()`.

Run by bench/perf.py in the benchmark-only environment (.venv-bench), as
  inspect eval bench/inspect_task.py --model openai-api/bench/skilled --max-connections 64 ...
with BENCH_BODIES naming the JSON-lines file of Chat Completions bodies.
"""

from __future__ import annotations

import json
import os

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolCall, ToolDef, ToolParams


def _messages(body: dict) -> list:
    out, names = [], {}
    for m in body["messages"]:
        if m["role"] == "system":
            out.append(ChatMessageSystem(content=m["content"]))
        elif m["role"] == "user":
            out.append(ChatMessageUser(content=m["content"]))
        elif m["role"] == "assistant":
            calls = [
                ToolCall(id=c["id"], function=c["function"]["name"], arguments=json.loads(c["function"]["arguments"] or "{}"))
                for c in m.get("tool_calls") or ()
            ]
            names.update({c.id: c.function for c in calls})
            out.append(ChatMessageAssistant(content=m["content"] or "", tool_calls=calls or None))
        elif m["role"] == "tool":
            out.append(ChatMessageTool(content=m["content"], tool_call_id=m["tool_call_id"], function=names.get(m["tool_call_id"])))
    return out


def _tool(spec: dict) -> ToolDef:
    async def never_called(**kwargs) -> str:  # generate(tool_calls="none") makes one request
        return ""

    fn = spec["function"]
    return ToolDef(never_called, name=fn["name"], description=fn["description"], parameters=ToolParams(**fn["parameters"]))


@task
def replay():
    with open(os.environ["BENCH_BODIES"], encoding="utf-8") as f:
        bodies = [json.loads(line) for line in f if line.strip()]
    tools = {t["function"]["name"]: _tool(t) for b in bodies for t in b.get("tools") or ()}
    samples = [
        Sample(input=_messages(b), target="answer", metadata={"tools": [t["function"]["name"] for t in b.get("tools") or ()]})
        for b in bodies
    ]

    from inspect_ai.solver import solver

    @solver
    def offered_tools():
        async def solve(state, generate_):
            return await use_tools([tools[n] for n in state.metadata["tools"]])(state, generate_)

        return solve

    return Task(dataset=samples, solver=[offered_tools(), generate(tool_calls="none")], scorer=includes())
