#!/usr/bin/env python3
"""Floor for threads: a hand-written agent loop with plain `requests`, one thread per run.

No framework: each run has its own requests.Session (one kept-alive connection, as a
request thread of a Django/Flask server would), stream=true, SSE deltas parsed by hand, and
calls the tool on its own thread (--tool sync, the default; --tool async runs the async
tool with asyncio.run on that thread).
"""

import harness  # noqa: I001  (first: times the imports that follow)

import asyncio
import inspect
import json

import requests

FRAMEWORK = "raw_threads"
MODE = "threads"
NATIVE_TOOL = "sync"


def version() -> str:
    return "requests " + requests.__version__


class State:
    pass


def build(args) -> State:
    s = State()
    s.url = args.base_url.rstrip("/") + "/chat/completions"
    s.turns = args.turns
    s.tool = harness.tool_fn(args)
    s.tool_is_async = inspect.iscoroutinefunction(s.tool)
    return s


def _chat(s: State, session: requests.Session, messages: list) -> dict:
    body = {"model": harness.MODEL, "messages": messages, "tools": [harness.TOOL_SCHEMA],
            "stream": True, "stream_options": {"include_usage": True}}
    content: list[str] = []
    calls: dict[int, dict] = {}
    with session.post(s.url, json=body, timeout=600, stream=True) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                continue  # read on to the end of the body, so the connection is reused
            chunk = json.loads(data)
            choices = chunk.get("choices")
            if not choices:
                continue
            delta = choices[0].get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                slot = calls.get(tc["index"])
                if slot is None:
                    slot = calls[tc["index"]] = {"id": None, "type": "function",
                                                 "function": {"name": "", "arguments": ""}}
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] = fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
    msg = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def _execute(s: State, call: dict) -> str:
    args = json.loads(call["function"]["arguments"] or "{}")
    if s.tool_is_async:
        return asyncio.run(s.tool(**args))
    return s.tool(**args)


def run(s: State, i: int) -> str:
    messages = [{"role": "system", "content": harness.SYSTEM},
                {"role": "user", "content": harness.prompt(i)}]
    with requests.Session() as session:
        session.trust_env = False  # loopback only: no proxy / netrc look-ups
        session.headers["Authorization"] = "Bearer " + harness.API_KEY
        for _ in range(s.turns + 5):
            msg = _chat(s, session, messages)
            messages.append(msg)
            calls = msg.get("tool_calls")
            if not calls:
                return msg.get("content") or ""
            for c in calls:  # one call per turn in this workload
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": _execute(s, c)})
    raise RuntimeError("no final answer after turns + 5 requests")


if __name__ == "__main__":
    harness.main(__import__(__name__))
