"""Provider streams under faults: every stream ends with exactly one terminal event whatever raises,
the parsers stay linear and never raise, what enters a message is serialisable, errors never
leak a key and say what came back. Each runs over real HTTP from the local replay server."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    chat_sse,
    collect,
    fixture_bytes,
    make_model,
    options,
)

from agentkit import Agent, AgentTool, AgentToolResult, TextContent
from agentkit.abort import AbortController, AbortSignal
from agentkit.events import ErrorEvent, ToolCallDeltaEvent
from agentkit.providers import builder as builder_module
from agentkit.providers import json_stream, stream, stream_simple
from agentkit.providers.builder import MessageBuilder
from agentkit.providers.json_stream import ToolArgsBuffer, parse_streaming_json
from agentkit.providers.sse import SSEParser
from agentkit.types import Context, ToolCall, UserMessage

CTX = Context(messages=[UserMessage(content="hi")])
CHAT = "openai-completions"


def tool_call_deltas(arguments: str, piece: int = 16) -> list[dict[str, Any]]:
    first = {
        "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "save", "arguments": ""}}]
    }
    rest = [
        {"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + piece]}}]}
        for i in range(0, len(arguments), piece)
    ]
    return [first, *rest]


def terminal_events(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type in ("done", "error")]


# --- exactly one terminal event, whatever raises ---------------------------------------------

BUILDER_STEPS = [
    "start",
    "begin_text",
    "add_text",
    "end_text",
    "begin_thinking",
    "add_thinking",
    "end_thinking",
    "set_thinking_signature",
    "begin_tool_call",
    "add_tool_args",
    "flush",
    "end_tool_call",
    "end_open_blocks",
    "finish",
]


@pytest.mark.parametrize(
    "fixture", ["vendor/anthropic-thinking-tool-use.sse", "vendor/openai-chat-tool-call-usage.sse"]
)
@pytest.mark.parametrize("step", BUILDER_STEPS + ["compute_cost", "parse"])
@pytest.mark.parametrize("exception", [RuntimeError, RecursionError, OverflowError])
def test_an_exception_at_any_builder_step_still_ends_the_stream_once(
    server: ReplayServer,
    monkeypatch: pytest.MonkeyPatch,
    fixture: str,
    step: str,
    exception: type[Exception],
) -> None:
    calls = {"n": 0}

    def failing(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            raise exception(f"injected at {step}")

        return wrapper

    if step == "compute_cost":
        monkeypatch.setattr(builder_module, "compute_cost", failing(builder_module.compute_cost))
    elif step == "parse":
        monkeypatch.setattr(json_stream, "from_json", failing(json_stream.from_json))
    else:
        monkeypatch.setattr(MessageBuilder, step, failing(getattr(MessageBuilder, step)))
    api = "anthropic-messages" if "anthropic" in fixture else CHAT
    server.enqueue(Reply(fixture_bytes(fixture)), Reply(fixture_bytes(fixture)))
    events, message = collect(stream(make_model(api, server.url), CTX, options(max_retries=0)))
    assert len(terminal_events(events)) == 1
    assert events[-1].type in ("done", "error")
    if calls["n"] and step != "parse":
        assert isinstance(events[-1], ErrorEvent)
        assert "injected" in (message.error_message or "")
    json.dumps(message.model_dump(mode="json"), allow_nan=False)


def test_deeply_nested_streamed_arguments_end_the_stream(server: ReplayServer) -> None:
    arguments = '{"x": ' + "[" * 5000  # a small model stuck in a loop, then the stream ends
    server.enqueue(Reply(chat_sse(*tool_call_deltas(arguments), finish="tool_calls")))
    events, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    assert len(terminal_events(events)) == 1
    call = message.content[0]
    assert isinstance(call, ToolCall) and isinstance(call.arguments, dict)


@pytest.mark.parametrize("depth", [1_000, 5_000, 100_000])
def test_parse_streaming_json_and_final_never_raise_at_any_depth(depth: int) -> None:
    for text in ("[" * depth, '{"a": ' * depth, '{"x": ' + "[" * depth + "]" * depth + "}"):
        assert isinstance(parse_streaming_json(text), (dict, list))
        buffer = ToolArgsBuffer()
        buffer.append(text)
        assert isinstance(buffer.partial(), dict)
        assert isinstance(buffer.final(), dict)


def test_usage_too_large_for_a_float_still_ends_with_done(server: ReplayServer) -> None:
    huge = 10**400
    body = chat_sse({"content": "ok"}, usage={"prompt_tokens": huge, "completion_tokens": huge})
    server.enqueue(Reply(body))
    events, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    assert [e.type for e in terminal_events(events)] == ["done"]
    assert message.usage.cost.total >= 0 and message.usage.cost.total != float("inf")
    json.dumps(message.model_dump(mode="json"), allow_nan=False)


# --- linear SSE parsing ------------------------------------------------------------------------


def _sse_body(events: int) -> bytes:
    line = 'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    return (line * events).encode()


def _parse_seconds(body: bytes, chunk: int | None) -> float:
    best = float("inf")
    for _ in range(3):
        parser = SSEParser()
        start = time.perf_counter()
        count = 0
        size = chunk or len(body)
        for i in range(0, len(body), size):
            count += len(parser.feed(body[i : i + size]))
        count += len(parser.close())
        best = min(best, time.perf_counter() - start)
        assert count == body.count(b"\n\n")
    return best


@pytest.mark.parametrize("chunk", [8192, None], ids=["8KiB-chunks", "one-chunk"])
def test_sse_parsing_is_linear_in_an_lf_only_stream(chunk: int | None) -> None:
    # 16x the events must cost about 16x (quadratic would be 256x); the bound is 10x slack
    small = _parse_seconds(_sse_body(4_000), chunk)
    large = _parse_seconds(_sse_body(64_000), chunk)
    assert large / max(small, 1e-4) < 160, f"{small:.4f}s vs {large:.4f}s"


def test_a_gzip_answer_of_64000_events_in_one_piece_is_parsed(server: ReplayServer) -> None:
    body = chat_sse(*[{"content": "a"} for _ in range(64_000)])
    server.enqueue(Reply(gzip.compress(body), headers={"Content-Encoding": "gzip"}))
    start = time.perf_counter()
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    elapsed = time.perf_counter() - start
    assert message.stop_reason == "stop", message.error_message
    assert message.content[0].text == "a" * 64_000  # type: ignore[union-attr]
    assert server.requests[0].headers.get("accept-encoding", "").startswith("gzip")
    assert elapsed < 60  # was minutes when each line rescanned the rest of the chunk


# --- what enters a message is serialisable ----------------------------------------------------


def test_an_emoji_split_into_utf16_halves_across_chunks_is_joined(server: ReplayServer) -> None:
    # the JSON escapes of one emoji, U+1F600, arrive in two separate events
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi \\ud83d"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"\\ude00!"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":" lone \\udce9"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    server.enqueue(Reply(body, chunk=7))
    events, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    assert message.content[0].text == "hi \U0001f600! lone \ufffd"  # type: ignore[union-attr]
    for event in events:
        json.dumps(getattr(event, "delta", "")).encode("utf-8")
    json.dumps(message.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")


def test_tool_arguments_with_surrogates_and_huge_numbers_are_serialisable(
    server: ReplayServer,
) -> None:
    arguments = '{"name": "caf\\udce9", "face": "\\ud83d\\ude00", "n": 1e400, "m": -2e999}'
    server.enqueue(Reply(chat_sse(*tool_call_deltas(arguments, 5), finish="tool_calls")))
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    call = message.content[0]
    assert isinstance(call, ToolCall)
    assert call.arguments == {
        "name": "caf\ufffd",
        "face": "\U0001f600",
        "n": "1e400",
        "m": "-2e999",
    }
    text = json.dumps(message.model_dump(mode="json"), ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [990, 995, 999, 1000, 1010])
def test_a_key_straddling_the_cut_of_an_error_body_does_not_leak(
    server: ReplayServer, offset: int
) -> None:
    body = ("x" * offset + API_KEY + "y" * 2000).encode()
    server.enqueue(Reply(body, status=400, content_type="text/plain"))
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    text = message.error_message or ""
    for size in range(6, len(API_KEY) + 1):
        for start in range(0, len(API_KEY) - size + 1):
            assert API_KEY[start : start + size] not in text


def test_a_malformed_payload_snippet_is_redacted_before_it_is_cut(server: ReplayServer) -> None:
    body = ("data: {" + "z" * 190 + API_KEY + "\n\n").encode()
    server.enqueue(Reply(body))
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options(max_retries=0)))
    assert "malformed JSON" in (message.error_message or "")
    assert API_KEY[:6] not in (message.error_message or "")


def test_a_200_html_page_is_named_and_not_retried(server: ReplayServer) -> None:
    page = b"<html><head><title>Hotel WiFi Login</title></head><body>Sign in</body></html>"
    server.enqueue(*[Reply(page, content_type="text/html; charset=utf-8") for _ in range(3)])
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options(max_retries=2)))
    assert message.stop_reason == "error"
    text = message.error_message or ""
    assert "text/html" in text and "Hotel WiFi Login" in text and "web page" in text
    assert len(server.requests) == 1


# --- connections: kept alive and reused; an abort closes only its own ------------------------


def _tls_context(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a self-signed certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


@pytest.mark.processes
def test_one_tls_connection_serves_a_20_turn_agent_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context, cert = _tls_context(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    server = ReplayServer(tls=context)
    server.start()
    try:
        turns = 20
        for i in range(turns - 1):
            call = {
                "tool_calls": [
                    {"index": 0, "id": f"c{i}", "function": {"name": "step", "arguments": "{}"}}
                ]
            }
            server.enqueue(Reply(chat_sse(call, finish="tool_calls")))
        server.enqueue(Reply(chat_sse({"content": "done"})))

        def execute(call_id: str, params: dict[str, Any], signal: Any, update: Any) -> Any:
            return AgentToolResult(content=[TextContent(text="ok")])

        agent = Agent(
            model=make_model(CHAT, server.url),
            stream_fn=stream_simple,
            api_key=API_KEY,
            tools=[AgentTool("step", "One step.", {"type": "object"}, execute)],
        )
        new = agent.prompt("Go.")
        assert new[-1].stop_reason == "stop", new[-1].error_message
        assert len(server.requests) == turns
        assert server.connections == 1  # one TCP connection and TLS handshake for 20 turns
    finally:
        server.stop()


def test_an_abort_closes_only_its_own_pooled_connection(server: ReplayServer) -> None:
    model = make_model(CHAT, server.url)
    text = chat_sse(*[{"content": f"w{i} "} for i in range(20)])
    first_event = text.index(b"\n\n") + 2
    # Both requests stall after their first event; only the first is aborted.
    server.enqueue(
        Reply(text, stall_after=first_event, resume=True),
        Reply(text, stall_after=first_event, resume=True),
    )
    controller = AbortController()
    aborted = stream(model, CTX, options(signal=controller.signal))
    survivor = stream(model, CTX, options())
    seen_a = next(e for e in aborted if e.type == "text_delta")
    seen_b = next(e for e in survivor if e.type == "text_delta")
    assert seen_a and seen_b
    started = time.perf_counter()
    controller.abort()
    message_a = aborted.result()
    assert message_a.stop_reason == "aborted"
    assert time.perf_counter() - started < 1.0  # the stalled read ended at once (100 ms goal)
    server.release.set()
    message_b = survivor.result()
    assert message_b.stop_reason == "stop", message_b.error_message
    assert message_b.content[0].text == "".join(f"w{i} " for i in range(20))  # type: ignore[union-attr]


def test_connections_are_reused_across_requests_from_many_threads(server: ReplayServer) -> None:
    model = make_model(CHAT, server.url)
    rounds, width = 5, 4
    server.enqueue(*[Reply(chat_sse({"content": "x"})) for _ in range(rounds * width)])
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(rounds):
            message = stream(model, CTX, options()).result()
            with lock:
                results.append(message.stop_reason)

    threads = [threading.Thread(target=worker) for _ in range(width)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == ["stop"] * (rounds * width)
    assert server.connections <= width  # at most one connection per concurrent request


# --- the scripted model streams like a provider -----------------------------------------------


def test_scripted_tool_calls_show_partial_arguments_on_toolcall_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentkit.event_stream import AssistantMessageEventStream
    from agentkit.testing import ScriptedModel, reply, tool_call

    # The partial message is live (it keeps changing), so record its arguments as each delta
    # is pushed.
    seen: list[dict[str, Any]] = []
    original_push = AssistantMessageEventStream.push

    def recording_push(self: Any, event: Any) -> None:
        if isinstance(event, ToolCallDeltaEvent):
            seen.append(json.loads(json.dumps(event.partial.content[0].arguments)))
        original_push(self, event)

    monkeypatch.setattr(AssistantMessageEventStream, "push", recording_push)
    arguments = {"path": "notes.txt", "text": "x" * 40}
    model = ScriptedModel([reply(tool_call("save", arguments))], chunk_size=8)
    events = list(model(model.model, Context(messages=[])))
    assert len(seen) == len(json.dumps(arguments)) // 8 + 1
    assert {"path": "notes.txt"} in seen or {"path": "notes.txt", "text": ""} in seen
    assert any(p.get("path") == "notes.txt" and 0 < len(p.get("text", "")) < 40 for p in seen)
    assert events[-1].type == "done"
    assert events[-1].message.content[0].arguments == arguments


class _AbortAtPause(AbortSignal):
    """A run's signal aborted while the scripted model sits in its ``stop_at``-th pause (with a
    delay, each pause waits on the signal once), so that a test puts an abort at every pause in
    turn without a timer."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.stop_at, self.pauses = stop_at, 0

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses += 1
        if self.pauses == self.stop_at:
            self._abort(None)
        return self.aborted


def test_an_abort_at_any_pause_of_a_scripted_reply_ends_it_as_aborted() -> None:
    from agentkit.abort import ABORTED_TEXT
    from agentkit.testing import ScriptedModel, reply, thinking, tool_call

    # The last pause, after the last block and before "done", was outside the abort handling:
    # an abort landing there ended the reply as "ScriptedModel failed: Operation aborted".
    script = reply(thinking("hm", "sig"), "Hello there", tool_call("save", {"a": 1}))
    stop_at = 0
    while True:
        stop_at += 1
        model = ScriptedModel([script], delay=60.0, chunk_size=4)  # never waits: see the signal
        signal = _AbortAtPause(stop_at)
        message = model(model.model, Context(messages=[]), {"signal": signal}).result(30)
        if not signal.aborted:  # past the last pause: the reply ended as scripted
            assert message.stop_reason == "tool_use"
            break
        assert (message.stop_reason, message.error_message) == ("aborted", ABORTED_TEXT), stop_at
    assert stop_at > 10  # every pause of every block was tried


# --- options and quirks are typed -------------------------------------------------------------


def test_a_misspelt_stream_option_is_refused() -> None:
    from pydantic import ValidationError

    from agentkit.types import StreamOptions

    with pytest.raises(ValidationError):
        StreamOptions(max_retires=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        StreamOptions(anthropic={"cache_retension": "long"})


def test_a_misspelt_compat_quirk_is_refused_when_the_model_is_made() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_token_field"):
        make_model(CHAT, "http://127.0.0.1:1/v1", compat={"max_token_field": "max_tokens"})
    model = make_model(CHAT, "http://127.0.0.1:1/v1", compat={"max_tokens_field": "max_tokens"})
    assert model.compat is not None and model.compat.max_tokens_field == "max_tokens"
    assert type(model).model_validate(model.model_dump(mode="json")) == model


def test_a_misspelt_compat_quirk_set_later_ends_the_stream_with_a_clear_error(
    server: ReplayServer,
) -> None:
    model = make_model(CHAT, server.url)
    model.compat = {"max_token_field": "max_tokens"}  # type: ignore[assignment]  # not validated
    _, message = collect(stream(model, CTX, options()))
    assert message.stop_reason == "error"
    assert "max_token_field" in (message.error_message or "")
    assert not server.requests


@pytest.mark.parametrize("offset", [490, 495, 500])
def test_a_key_straddling_the_cut_of_an_in_stream_error_does_not_leak(
    server: ReplayServer, offset: int
) -> None:
    # the same fault class as the error body: an error event inside the stream
    message_text = "m" * offset + API_KEY + "n" * 3000
    body = f"data: {json.dumps({'error': {'message': message_text}})}\n\n".encode()
    server.enqueue(Reply(body))
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options(max_retries=0)))
    text = message.error_message or ""
    assert "stream error" in text and "[REDACTED]" in text
    assert all(API_KEY[i : i + 6] not in text for i in range(len(API_KEY) - 5))


def test_a_usage_count_beyond_float_range_does_not_fail_the_answer(server: ReplayServer) -> None:
    # 1e400 parses as infinity: the count is ignored, the answer is kept
    body = chat_sse({"content": "ok"}).replace(
        b"data: [DONE]", b'data: {"choices": [], "usage": {"prompt_tokens": 1e400}}\n\ndata: [DONE]'
    )
    server.enqueue(Reply(body))
    _, message = collect(stream(make_model(CHAT, server.url), CTX, options()))
    assert message.stop_reason == "stop", message.error_message
    assert message.usage.input == 0


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_its_parents_connection(server: ReplayServer) -> None:
    # the same fault class as pooling itself: a prefork worker must not write to the
    # parent's socket, or both requests are corrupted
    model = make_model(CHAT, server.url)
    server.enqueue(*[Reply(chat_sse({"content": "x"})) for _ in range(3)])
    assert stream(model, CTX, options()).result().stop_reason == "stop"
    assert server.connections == 1
    pid = os.fork()
    if pid == 0:  # the child: one request, then leave without running the parent's cleanup
        ok = stream(model, CTX, options()).result().stop_reason == "stop"
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert server.connections == 2  # the child opened its own
    assert stream(model, CTX, options()).result().stop_reason == "stop"
    assert server.connections == 2  # and the parent still reuses its own


def test_an_http_proxy_from_the_environment_gets_the_absolute_url(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.enqueue(Reply(chat_sse({"content": "via the proxy"})))
    model = make_model(CHAT, "http://api.example.invalid")
    _, message = collect(stream(model, CTX, options(max_retries=0)))
    assert message.stop_reason == "stop", message.error_message
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["host"] == "api.example.invalid"


def test_the_request_body_is_the_transcript_in_utf8_json(server: ReplayServer) -> None:
    # The body is written by pydantic-core's encoder; what it refuses falls back to json.dumps.
    done = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    model = make_model(CHAT, server.url)
    text = "caf\u00e9 \u2028 \U0001f600 \"quoted\" \\ back"
    server.enqueue(Reply(done))
    message = collect(stream(model, Context(messages=[UserMessage(content=text)]), options()))[1]
    assert message.stop_reason == "stop", message.error_message
    sent = server.requests[0]
    assert sent.json["messages"][-1] == {"role": "user", "content": text}
    assert "caf\u00e9".encode() in sent.body  # UTF-8, not \\u escapes

    # A lone surrogate an application put in the transcript is sent as "?" (UTF-8 cannot hold it).
    server.enqueue(Reply(done))
    lone = Context(messages=[UserMessage(content="caf\udce9")])
    message = collect(stream(model, lone, options()))[1]
    assert message.stop_reason == "stop", message.error_message
    assert server.requests[1].json["messages"][-1]["content"] == "caf?"

    # An object an on_payload hook adds that JSON cannot hold is a readable error, no request.
    def hook(payload: dict, _model: object) -> dict:  # type: ignore[type-arg]
        return {**payload, "metadata": object()}

    message = collect(stream(model, CTX, options(on_payload=hook)))[1]
    assert message.stop_reason == "error"
    assert "not JSON serializable" in (message.error_message or "")
    assert len(server.requests) == 2
