"""A huge streamed tool argument through ``Agent.prompt()`` over local HTTP (one command:
``python benchmarks/bench_tool_args.py``).

A local Chat Completions server (a process of its own) streams one tool call whose argument is 1 MB (then 2 MB) of
JSON text in 16-byte deltas (one SSE event each), then a short text answer after the tool ran.
Printed: seconds per ``prompt()``, the 2 MB / 1 MB ratio (2.0 is linear; the floor's own ratio
beside it shows how much of a departure the machine makes), and how many
``message_update`` events a listener saw for the call (the builder coalesces the deltas of one
network read into one update, so this is the number of reads, not of deltas).

Beside it, in the same run, the floor: a hand-written ``requests`` loop that makes the same two
requests, decodes every event with ``json.loads``, joins the argument pieces and parses them once.
The machine's load moves both; their ratio is what to compare across runs.

Targets: 1 MB <= 0.5 s, 2 MB <= 2.2x the 1 MB time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
from _sse_server import SSEServer  # noqa: E402

from agentkit import Agent, AgentTool, AgentToolResult, TextContent  # noqa: E402
from agentkit.providers import stream_simple  # noqa: E402
from agentkit.types import Model  # noqa: E402

DELTA = 16


def sse(chunks: list[dict[str, Any]]) -> bytes:
    parts = [f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in chunks]
    return ("".join(parts) + "data: [DONE]\n\n").encode()


def tool_call_body(size: int) -> bytes:
    arguments = json.dumps({"path": "big.txt", "text": "y" * size})
    chunks: list[dict[str, Any]] = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "save", "arguments": ""}}
                        ]
                    },
                }
            ]
        }
    ]
    for i in range(0, len(arguments), DELTA):
        piece = arguments[i : i + DELTA]
        chunks.append(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]},
                    }
                ]
            }
        )
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return sse(chunks)


TEXT_BODY = sse(
    [
        {"choices": [{"index": 0, "delta": {"content": "Saved."}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
)


SIZES = (100_000, 1_000_000, 2_000_000)
"""The argument sizes the server has bodies for (the first one warms up)."""


def serve() -> None:
    """The server process: bodies for every size made before it listens, so that no request
    waits for one; the request's model id names the size (``bench-<size>``), and a request
    that carries a tool result gets the text answer. Prints its URL, stops when stdin closes."""
    bodies = {f"bench-{size}": tool_call_body(size) for size in SIZES}

    def answer(request: bytes) -> bytes:
        payload = json.loads(request)
        if any(m.get("role") == "tool" for m in payload.get("messages", ())):
            return TEXT_BODY
        return bodies[payload["model"]]

    server = SSEServer(answer=answer, piece_size=16384)
    print(server.url, flush=True)
    sys.stdin.read()
    server.close()


class Server:
    """The server, in a process of its own so that it does not compete with the measured
    client for the interpreter lock."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


def run_once(server: Server, size: int) -> tuple[float, int, int]:
    """Seconds for one ``prompt()``, the updates a listener saw, and the argument length."""
    received: list[int] = []

    def save(call_id: str, params: dict[str, Any], signal: Any, update: Any) -> AgentToolResult:
        received.append(len(params["text"]))
        return AgentToolResult(content=[TextContent(text="saved")])

    model = Model(id=f"bench-{size}", api="openai-completions", provider="local", base_url=f"{server.url}/v1")
    agent = Agent(
        model=model,
        stream_fn=stream_simple,
        tools=[AgentTool("save", "Save a file.", {"type": "object"}, save)],
    )
    updates = [0]

    def listen(event: Any) -> None:
        if event.type == "message_update":
            updates[0] += 1

    agent.subscribe(listen)
    start = time.perf_counter()
    new = agent.prompt("Save it.")
    elapsed = time.perf_counter() - start
    assert new[-1].stop_reason == "stop", new[-1].error_message
    assert received == [size], received
    return elapsed, updates[0], size


def floor_once(server: Server, session: requests.Session, size: int) -> float:
    """Seconds for the same two requests in hand-written code: no events, no listener."""
    url = f"{server.url}/v1/chat/completions"
    first = {"model": f"bench-{size}", "stream": True, "messages": [{"role": "user"}]}
    start = time.perf_counter()
    pieces: list[str] = []
    with session.post(url, json=first, stream=True) as response:
        for line in response.iter_lines():
            if line.startswith(b"data: {"):
                for call in json.loads(line[6:])["choices"][0]["delta"].get("tool_calls", ()):
                    pieces.append(call["function"]["arguments"])
    arguments = json.loads("".join(pieces))
    second = {**first, "messages": [{"role": "user"}, {"role": "tool", "content": "saved"}]}
    with session.post(url, json=second, stream=True) as response:
        answer = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith(b"data: {")]
    elapsed = time.perf_counter() - start
    assert len(arguments["text"]) == size and answer, "the floor read the wrong stream"
    return elapsed


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    server = Server()
    session = requests.Session()
    try:
        run_once(server, 100_000)  # warm up: imports, the pooled connection
        floor_once(server, session, 100_000)
        one = min(run_once(server, 1_000_000) for _ in range(5))
        floor_one = min(floor_once(server, session, 1_000_000) for _ in range(5))
        two = min(run_once(server, 2_000_000) for _ in range(5))
        floor_two = min(floor_once(server, session, 2_000_000) for _ in range(5))
    finally:
        session.close()
        server.close()
    print(f"Tool argument in {DELTA}-byte deltas through Agent.prompt() over local HTTP:")
    print(f"  1 MB: {one[0] * 1000:7.0f} ms   ({one[1]} message_update events)")
    print(f"  2 MB: {two[0] * 1000:7.0f} ms   ({two[1]} message_update events)")
    print(f"  ratio 2 MB / 1 MB: {two[0] / one[0]:.2f} (2.0 = linear; target <= 2.2)")
    print(
        f"  floor (hand-written requests loop), 1 MB: {floor_one * 1000:7.0f} ms"
        f"   (agentkit {one[0] / floor_one:.2f}x)"
    )
    print(
        f"  floor, 2 MB: {floor_two * 1000:7.0f} ms   (ratio 2 MB / 1 MB: {floor_two / floor_one:.2f};"
        f" agentkit {two[0] / floor_two:.2f}x)"
    )


if __name__ == "__main__":
    main()
