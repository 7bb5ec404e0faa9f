"""Server-sent event streams for the scripted model server (tests/model_server.py).

Each encoder turns one complete, non-streamed reply into the (event name, data) pairs the
real API sends for it when asked to stream, in the order the API documents, so that the
agent clients' own stream parsers are what gets tested. An empty event name is a
`data:`-only line (Chat Completions, Gemini).
"""

from __future__ import annotations

import json


def responses(payload: dict, body: dict) -> list[tuple[str, dict]]:
    """OpenAI Responses API: response.created, then per output item its added/delta/done
    events, then response.completed with the whole response."""
    events: list[tuple[str, dict]] = []

    def emit(kind: str, **data) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    emit("response.created", response={**payload, "status": "in_progress", "output": []})
    emit("response.in_progress", response={**payload, "status": "in_progress", "output": []})
    for index, item in enumerate(payload["output"]):
        if item["type"] == "message":
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            for part_index, part in enumerate(item["content"]):
                emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=part_index, part={**part, "text": ""})
                emit("response.output_text.delta", item_id=item["id"], output_index=index, content_index=part_index, delta=part["text"])
                emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=part_index, text=part["text"])
                emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=part_index, part=part)
        else:
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
            emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"])
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index, arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=payload)
    return events


def anthropic(payload: dict, body: dict) -> list[tuple[str, dict]]:
    """Anthropic Messages: message_start, a start/delta/stop triple per content block,
    message_delta with the stop reason and output tokens, message_stop."""
    usage = payload["usage"]
    start = {**payload, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(payload["content"]):
        if block["type"] == "text":
            first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            first, delta = {**block, "input": {}}, {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None}, "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def chat(payload: dict, body: dict) -> list[tuple[str, dict | str]]:
    """Chat Completions: chunks with a role, the content, each tool call, then the finish
    reason; a usage chunk when stream_options.include_usage asks; then [DONE]."""
    choice = payload["choices"][0]
    message = choice["message"]
    head = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict, finish: str | None = None) -> tuple[str, dict]:
        return "", {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        events.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(("", {**head, "choices": [], "usage": payload["usage"]}))
    events.append(("", "[DONE]"))
    return events


def gemini(payload: dict, body: dict) -> list[tuple[str, dict]]:
    """Gemini streamGenerateContent: one GenerateContentResponse per part, the finish
    reason and the token counts on the last."""
    candidate = payload["candidates"][0]
    parts = candidate["content"]["parts"] or [{"text": ""}]
    events = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        piece = {"content": {"role": "model", "parts": [part]}, "index": 0} | ({"finishReason": candidate["finishReason"]} if last else {})
        events.append(("", {"candidates": [piece], "modelVersion": payload["modelVersion"], "responseId": payload["responseId"]} | ({"usageMetadata": payload["usageMetadata"]} if last else {})))
    return events


ENCODERS = {"responses": responses, "anthropic": anthropic, "chat": chat, "gemini": gemini}
