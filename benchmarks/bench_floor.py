"""agentkit beside a hand-written floor: the overhead per turn and a parallel batch, as ratios.

Run: ``python benchmarks/bench_floor.py``. A local Chat Completions server (its own process, so
it does not share this interpreter's lock) answers ``TURNS`` turns of ``K`` tool calls, then a
final text. The floor is what no framework can beat: one kept-alive ``requests.Session``, the
SSE parsed by hand, and a thread pool for a batch (a single call runs inline). agentkit runs the
same work through ``Agent.prompt()``. Each figure is the median wall per turn; with 0 ms tools
that is all overhead, the server's share included on both sides (so the ratio is a little kinder
than ``compare.sh`` in the shared bench, which subtracts the server's time). Both sides alternate
three times in one session; only the ratios mean anything on a shared machine. Nothing asserts.
(Targets: at most 1.3x per turn and 1.03x for the batch.)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from agentkit import Agent, Model, tool

SERVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from _sse_server import SSEServer

def chunk(delta, finish=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

turns, k, ms = (int(a) for a in sys.argv[2:5])

def answer(body):
    request = json.loads(body)
    done = sum(1 for m in request["messages"] if m["role"] == "tool") // k
    if done < turns:
        chunks = [chunk({"tool_calls": [{"index": i, "id": f"c{done}_{i}", "type": "function",
                  "function": {"name": "wait_ms", "arguments": json.dumps({"ms": ms})}}]})
                  for i in range(k)] + [chunk({}, "tool_calls")]
    else:
        chunks = [chunk({"content": "Done."}), chunk({}, "stop")]
    return "".join(f"data: {json.dumps(c)}\\n\\n" for c in chunks).encode() + b"data: [DONE]\\n\\n"

server = SSEServer(answer=answer, nodelay=True)
print(server.url, flush=True)
sys.stdin.read()
server.close()
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "wait_ms",
            "description": "Wait ms milliseconds.",
            "parameters": {
                "type": "object",
                "properties": {"ms": {"type": "integer"}},
                "required": ["ms"],
            },
        },
    }
]


def wait_ms(ms: int) -> str:
    """Wait ms milliseconds.

    Args:
        ms: How long to wait.
    """
    if ms:
        time.sleep(ms / 1000)
    return "ok"


class Floor:
    """The hand-written loop: one session, SSE by hand, a pool only for a batch."""

    def __init__(self, url: str) -> None:
        self.url = url + "/v1/chat/completions"
        self.session = requests.Session()
        self.session.trust_env = False
        self.pool = ThreadPoolExecutor(32)

    def run(self, work: dict[str, int]) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        while True:
            body = {"model": "m", "messages": messages, "tools": TOOLS, "stream": True}
            calls: dict[int, dict[str, Any]] = {}
            text = []
            with self.session.post(self.url, json=body, stream=True, timeout=60) as response:
                for line in response.iter_lines():
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    text.append(delta.get("content") or "")
                    for call in delta.get("tool_calls") or []:
                        calls[call["index"]] = call
            ordered = [calls[i] for i in sorted(calls)]
            messages.append({"role": "assistant", "content": "".join(text), "tool_calls": ordered})
            if not ordered:
                return
            run = lambda c: wait_ms(**json.loads(c["function"]["arguments"]))  # noqa: E731
            results = [run(ordered[0])] if len(ordered) == 1 else list(self.pool.map(run, ordered))
            for call, result in zip(ordered, results, strict=True):
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


WAIT_MS = tool(wait_ms)


def agentkit_run(model: Model) -> None:
    """One run, as an application makes it: a fresh Agent (its transcript starts empty)."""
    with Agent(model=model, tools=[WAIT_MS], api_key="sk-bench") as agent:
        agent.prompt("go")


def per_turn_ms(run: Any, work: dict[str, int], runs: int) -> float:
    """Median wall of ``runs`` runs, per turn, in ms."""
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        run(work)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls) / work["turns"] * 1000


def compare(label: str, work: dict[str, int], runs: int) -> None:
    """Alternate agentkit and the floor three times on one server; print the ratio range."""
    here = Path(__file__).resolve().parent
    args = [str(work[name]) for name in ("turns", "k", "ms")]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(here), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        floor = Floor(url)
        model = Model(
            id="m", name="m", api="openai-completions", provider="openai", base_url=url + "/v1"
        )
        ours = lambda w: agentkit_run(model)  # noqa: E731
        floor.run(work)  # warm both up
        ours(work)
        ratios, a_ms, f_ms = [], [], []
        for _ in range(3):
            a = per_turn_ms(ours, work, runs)
            f = per_turn_ms(floor.run, work, runs)
            a_ms.append(a)
            f_ms.append(f)
            ratios.append(a / f)
        print(
            f"{label}: agentkit {statistics.median(a_ms):.2f} ms, floor "
            f"{statistics.median(f_ms):.2f} ms per turn; ratio {min(ratios):.2f}-{max(ratios):.2f}x"
        )
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(10)


def main() -> None:
    compare("overhead per turn, 20 one-tool turns", {"turns": 20, "k": 1, "ms": 0}, 10)
    compare("wall of 3 turns x 8 tools x 200 ms  ", {"turns": 3, "k": 8, "ms": 200}, 3)


if __name__ == "__main__":
    main()
