"""The floor: the same Chat Completions requests, sent by a bare asyncio loop of
`openai.AsyncOpenAI().chat.completions.create` calls behind a semaphore.

Run: python bench/bare_loop.py BODIES.jsonl --base-url URL [-j 64] [--fast]
--fast sends them the way the runner does (the SDK's aiohttp transport and its raw
`post()`), the floor for that path. Prints one JSON line: {"requests": N, "loop_s": s}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import openai


async def send_all(bodies: list[dict], base_url: str, jobs: int, fast: bool) -> float:
    from openai.types.chat import ChatCompletion

    http_client = openai.DefaultAioHttpClient() if fast else None
    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, timeout=120, max_retries=4, http_client=http_client)
    gate = asyncio.Semaphore(jobs)

    async def one(body: dict) -> None:
        async with gate:
            if fast:
                await client.post("/chat/completions", cast_to=ChatCompletion, body=body)
            else:
                await client.chat.completions.create(**body)

    start = time.perf_counter()
    await asyncio.gather(*(one(b) for b in bodies))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bodies")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("-j", "--jobs", type=int, default=64)
    parser.add_argument("--fast", action="store_true")
    args = parser.parse_args()
    with open(args.bodies, encoding="utf-8") as f:
        bodies = [json.loads(line) for line in f if line.strip()]
    loop_s = asyncio.run(send_all(bodies, args.base_url, args.jobs, args.fast))
    print(json.dumps({"requests": len(bodies), "loop_s": round(loop_s, 3)}))


if __name__ == "__main__":
    main()
