"""Provider parsing benchmarks (a plain script: ``python benchmarks/bench_providers.py``).

1. Parse throughput per wire API: a long synthetic stream built from the recorded vendor
   events (``tests/fixtures/vendor``), fed in 4 KiB chunks through the same path a real
   response takes (SSE or JSON-array decoding, the API's parser, the message builder, the event
   stream), without the network. Printed as events per second.
2. The same streams end to end over HTTP from a local server, to show the network path's cost.
3. The cost of one huge tool argument (1 MB and 2 MB) streamed in 16-byte deltas through the
   Chat Completions and Anthropic parsers; the 2 MB / 1 MB time ratio shows linearity (about 2).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _sse_server import SSEServer  # noqa: E402

from agentkit.event_stream import AssistantMessageEventStream  # noqa: E402
from agentkit.providers import anthropic, google, openai_completions, openai_responses  # noqa: E402
from agentkit.providers.builder import MessageBuilder  # noqa: E402
from agentkit.providers.registry import stream  # noqa: E402
from agentkit.providers.runner import ApiSpec, BodyDecoder  # noqa: E402
from agentkit.types import Context, Model, UserMessage  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
EVENTS = 20_000


def recorded(name: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The (event name, JSON) pairs of a recorded SSE fixture."""
    text = (FIXTURES / "vendor" / name).read_text(encoding="utf-8")
    out: list[tuple[str | None, dict[str, Any]]] = []
    event = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            if data != "[DONE]":
                out.append((event, json.loads(data)))
            event = None
    return out


def sse(pairs: list[tuple[str | None, Any]], crlf: bool = False) -> bytes:
    sep = "\r\n" if crlf else "\n"
    parts = []
    for event, data in pairs:
        head = f"event: {event}{sep}" if event else ""
        body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        parts.append(f"{head}data: {body}{sep}{sep}")
    return "".join(parts).encode("utf-8")


def words(i: int) -> str:
    return f" word{i % 97}"


def chat_stream(n: int) -> bytes:
    src = recorded("openai-chat-text-usage.sse")
    first, delta, finish, usage = src[0], src[1], src[-2], src[-1]
    body: list[tuple[str | None, Any]] = [first]
    for i in range(n):
        d = json.loads(json.dumps(delta[1]))
        d["choices"][0]["delta"]["content"] = words(i)
        body.append((None, d))
    body += [finish, usage, (None, "[DONE]")]
    return sse(body)


def responses_stream(n: int) -> bytes:
    src = {data["type"]: (event, data) for event, data in recorded("openai-responses-text.sse")}
    body: list[tuple[str | None, Any]] = [
        src["response.created"],
        src["response.output_item.added"],
        src["response.content_part.added"],
    ]
    event, template = src["response.output_text.delta"]
    for i in range(n):
        d = dict(template)
        d["delta"] = words(i)
        body.append((event, d))
    body += [src["response.output_item.done"], src["response.completed"]]
    return sse(body)


def anthropic_stream(n: int) -> bytes:
    src = recorded("anthropic-thinking-text.sse")
    start = src[0]
    block_start = next(
        p for p in src if p[1].get("type") == "content_block_start" and p[1]["index"] == 1
    )
    delta = next(p for p in src if p[1].get("delta", {}).get("type") == "text_delta")
    tail = [p for p in src if p[1].get("type") in ("message_delta", "message_stop")]
    body: list[tuple[str | None, Any]] = [start, (block_start[0], {**block_start[1], "index": 0})]
    for i in range(n):
        body.append(
            (
                delta[0],
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": words(i)},
                },
            )
        )
    body += [("content_block_stop", {"type": "content_block_stop", "index": 0}), *tail]
    return sse(body)


def gemini_stream(n: int) -> bytes:
    src = recorded("gemini-sse-thinking-text.sse")
    template = src[3][1]
    body: list[tuple[str | None, Any]] = []
    for i in range(n):
        d = json.loads(json.dumps(template))
        d["candidates"][0]["content"]["parts"] = [{"text": words(i)}]
        if i == n - 1:
            d["candidates"][0]["finishReason"] = "STOP"
        body.append((None, d))
    return sse(body, crlf=True)


class _FakeRequest:
    """Stands in for the HTTP request: yields the body in fixed-size chunks."""

    def __init__(self, body: bytes, size: int) -> None:
        self.body = body
        self.size = size

    def iter_bytes(self) -> Iterator[bytes]:
        for i in range(0, len(self.body), self.size):
            yield self.body[i : i + self.size]


def model_for(api: str, base: str = "http://127.0.0.1:1") -> Model:
    base_url = {
        "openai-completions": f"{base}/v1",
        "openai-responses": f"{base}/v1",
        "anthropic-messages": base,
        "google-generative-ai": f"{base}/v1beta",
    }[api]
    return Model(id="bench", api=api, provider="bench", base_url=base_url, reasoning=True)


def parse_only(spec: ApiSpec, body: bytes, chunk: int = 4096) -> tuple[float, int]:
    """Seconds to turn ``body`` into events, and how many events came out."""
    out = AssistantMessageEventStream()
    builder = MessageBuilder(model_for(spec.api), out)
    parser = spec.parser(builder)
    label = "bench"
    fmt = "sse-or-json-array" if spec.api == "google-generative-ai" else "sse"
    start = time.perf_counter()
    decoder = BodyDecoder(fmt, label, [])
    for piece in _FakeRequest(body, chunk).iter_bytes():
        for event, data in decoder.feed(piece):
            parser.handle(event, data)
        builder.flush()
    for event, data in decoder.close():
        parser.handle(event, data)
    parser.finish()
    elapsed = time.perf_counter() - start
    count = sum(1 for _ in out)
    message = out.result()
    assert message.stop_reason in ("stop", "tool_use"), message.error_message
    return elapsed, count


class _Server(SSEServer):
    """Answers every request with ``body``."""

    def __init__(self) -> None:
        self.body = b""
        super().__init__(lambda: self.body, piece_size=4096)


def over_http(server: _Server, api: str, body: bytes) -> tuple[float, int]:
    server.body = body
    model = model_for(api, server.url)
    start = time.perf_counter()
    s = stream(model, Context(messages=[UserMessage(content="bench")]), {"api_key": "x"})
    count = sum(1 for _ in s)
    elapsed = time.perf_counter() - start
    assert s.result().stop_reason == "stop", s.result().error_message
    return elapsed, count


def _tool_events(api: str, pieces: list[str]) -> Iterator[tuple[str, Any]]:
    """The decoded payloads of a stream carrying one tool call made of ``pieces``."""
    if api == "openai-completions":
        first = {"index": 0, "id": "call_1", "function": {"name": "save", "arguments": ""}}
        yield "message", {"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]}
        for piece in pieces:
            call = {"index": 0, "function": {"arguments": piece}}
            yield "message", {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        yield "message", {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
        yield "done", None
        return
    yield "message", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}
    block = {"type": "tool_use", "id": "toolu_1", "name": "save", "input": {}}
    yield "message", {"type": "content_block_start", "index": 0, "content_block": block}
    for piece in pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        yield "message", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "message", {"type": "content_block_stop", "index": 0}
    yield "message", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}
    yield "message", {"type": "message_stop"}


def tool_argument_cost(api: str, size: int, delta: int = 16) -> float:
    """Seconds to stream one ``size``-character tool argument in ``delta``-character pieces.

    The payloads are made as they are parsed and a consumer thread drains the events, as in a
    real run (holding every event alive would make the garbage collector the bottleneck).
    """
    argument = '{"data": "' + "x" * (size - 12) + '"}'
    pieces = [argument[i : i + delta] for i in range(0, len(argument), delta)]
    out = AssistantMessageEventStream()
    spec = openai_completions.SPEC if api == "openai-completions" else anthropic.SPEC
    parser = spec.parser(MessageBuilder(model_for(api), out))
    drained = threading.Thread(target=lambda: sum(1 for _ in out))
    drained.start()
    start = time.perf_counter()
    for event, data in _tool_events(api, pieces):
        parser.handle(event, data)
    parser.finish()
    drained.join()
    elapsed = time.perf_counter() - start
    message = out.result()
    assert len(message.content[0].arguments["data"]) == size - 12  # type: ignore[union-attr]
    return elapsed


def main() -> None:
    streams = {
        "openai-completions": (openai_completions.SPEC, chat_stream(EVENTS)),
        "openai-responses": (openai_responses.SPEC, responses_stream(EVENTS)),
        "anthropic-messages": (anthropic.SPEC, anthropic_stream(EVENTS)),
        "google-generative-ai": (google.SPEC, gemini_stream(EVENTS)),
    }
    print(f"Parse throughput, {EVENTS} text deltas per stream, 4 KiB chunks, no network:")
    for api, (spec, body) in streams.items():
        parse_only(spec, body)  # warm up
        best = min(parse_only(spec, body) for _ in range(3))
        elapsed, count = best
        mb = len(body) / 1e6
        print(
            f"  {api:22s} {count / elapsed:10,.0f} events/s  "
            f"{mb / elapsed:7.1f} MB/s  ({mb:.1f} MB, {elapsed * 1000:.0f} ms)"
        )
    print("End to end over local HTTP (same streams, real requests):")
    server = _Server()
    for api, (_, body) in streams.items():
        elapsed, count = min(over_http(server, api, body) for _ in range(2))
        print(f"  {api:22s} {count / elapsed:10,.0f} events/s  ({elapsed * 1000:.0f} ms)")
    server.close()
    print("One huge tool argument in 16-byte deltas (partial arguments kept live):")
    for api in ("openai-completions", "anthropic-messages"):
        tool_argument_cost(api, 100_000)  # warm up
        one = min(tool_argument_cost(api, 1_000_000) for _ in range(3))
        two = min(tool_argument_cost(api, 2_000_000) for _ in range(3))
        print(
            f"  {api:22s} 1 MB: {one * 1000:6.0f} ms   2 MB: {two * 1000:6.0f} ms   "
            f"ratio {two / one:.2f} (2.0 = linear)"
        )


if __name__ == "__main__":
    main()
