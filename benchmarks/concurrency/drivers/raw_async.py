#!/usr/bin/env python3
"""Floor for concurrency: a hand-written agent loop on asyncio, one task per run.

No framework: the OpenAI chat-completions JSON by hand, stream=true, SSE deltas parsed by
hand, one client shared by every run with no connection limit (every run keeps its own
kept-alive connection). The tool is awaited in the run's task (--tool async, the default) or
handed to the loop's default thread pool (--tool sync, asyncio.to_thread).

--http aiohttp (default: the fastest widely used asyncio client), --http httpx2 (the HTTP
client of openai 3.x, and so of every asyncio framework here; row raw_async_httpx2) or
--http httpx (httpx 0.28; row raw_async_httpx).
"""

import harness  # noqa: I001  (first: times the imports that follow)

import asyncio
import inspect
import json
from importlib.metadata import version as _dist_version

FRAMEWORK = "raw_async"
MODE = "asyncio"
NATIVE_TOOL = "async"


def add_args(p) -> None:
    p.add_argument("--http", choices=["aiohttp", "httpx", "httpx2"], default="aiohttp")


def framework_name(args) -> str:
    return "raw_async" if args.http == "aiohttp" else "raw_async_" + args.http


_HTTP = "aiohttp"


def version() -> str:
    return f"{_HTTP} {_dist_version(_HTTP)}"


class State:
    pass


async def abuild(args) -> State:
    global _HTTP
    _HTTP = args.http
    s = State()
    s.url = args.base_url.rstrip("/") + "/chat/completions"
    s.turns = args.turns
    s.tool = harness.tool_fn(args)
    s.tool_is_async = inspect.iscoroutinefunction(s.tool)
    headers = {"Authorization": "Bearer " + harness.API_KEY}
    if args.http == "aiohttp":
        import aiohttp
        s.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), headers=headers,
            timeout=aiohttp.ClientTimeout(total=600), trust_env=False)
        s.chat = _chat_aiohttp
    else:
        import importlib
        httpx = importlib.import_module(args.http)
        s.client = httpx.AsyncClient(
            headers=headers, timeout=600, trust_env=False,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        s.chat = _chat_httpx
    return s


async def aclose(s: State) -> None:
    if hasattr(s, "session"):
        await s.session.close()
    else:
        await s.client.aclose()


def _body(messages: list) -> dict:
    return {"model": harness.MODEL, "messages": messages, "tools": [harness.TOOL_SCHEMA],
            "stream": True, "stream_options": {"include_usage": True}}


class _Acc:
    """Accumulates the SSE deltas of one response into an assistant message."""

    __slots__ = ("content", "calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict] = {}

    def line(self, line: bytes) -> None:
        if not line.startswith(b"data: "):
            return
        data = line[6:].strip()
        if data == b"[DONE]":
            return
        chunk = json.loads(data)
        choices = chunk.get("choices")
        if not choices:
            return
        delta = choices[0].get("delta") or {}
        if delta.get("content"):
            self.content.append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            slot = self.calls.get(tc["index"])
            if slot is None:
                slot = self.calls[tc["index"]] = {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}}
            if tc.get("id"):
                slot["id"] = tc["id"]
            fn = tc.get("function") or {}
            if fn.get("name"):
                slot["function"]["name"] = fn["name"]
            if fn.get("arguments"):
                slot["function"]["arguments"] += fn["arguments"]

    def message(self) -> dict:
        msg = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return msg


async def _chat_aiohttp(s: State, messages: list) -> dict:
    acc = _Acc()
    async with s.session.post(s.url, json=_body(messages)) as r:
        r.raise_for_status()
        async for line in r.content:  # to the end of the body, so the connection is reused
            acc.line(line)
    return acc.message()


async def _chat_httpx(s: State, messages: list) -> dict:
    acc = _Acc()
    async with s.client.stream("POST", s.url, json=_body(messages)) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            acc.line(line.encode())
    return acc.message()


async def _execute(s: State, call: dict) -> str:
    args = json.loads(call["function"]["arguments"] or "{}")
    if s.tool_is_async:
        return await s.tool(**args)
    return await asyncio.to_thread(s.tool, **args)


async def arun(s: State, i: int) -> str:
    messages = [{"role": "system", "content": harness.SYSTEM},
                {"role": "user", "content": harness.prompt(i)}]
    for _ in range(s.turns + 5):
        msg = await s.chat(s, messages)
        messages.append(msg)
        calls = msg.get("tool_calls")
        if not calls:
            return msg.get("content") or ""
        if len(calls) == 1:
            results = [await _execute(s, calls[0])]
        else:
            results = await asyncio.gather(*(_execute(s, c) for c in calls))
        for c, res in zip(calls, results, strict=True):
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": res})
    raise RuntimeError("no final answer after turns + 5 requests")


if __name__ == "__main__":
    harness.main(__import__(__name__))
