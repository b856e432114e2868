"""Failures over real HTTP: auth errors, retries, drops, bad JSON, truncation, abort, timeouts,
and API keys that must never leak into messages."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time

import pytest
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    check_protocol,
    collect,
    fixture_bytes,
    http_threads,
    make_model,
    options,
    wait_no_http_threads,
)

from agentkit.abort import AbortController
from agentkit.events import ErrorEvent, TextDeltaEvent
from agentkit.providers import complete, runner, stream
from agentkit.providers.http import resolve_timeout, scrub
from agentkit.providers.runner import parse_retry_after
from agentkit.types import Context, TextContent, UserMessage

ANTHROPIC_BODY = fixture_bytes("vendor/anthropic-thinking-text.sse")
CTX = Context(messages=[UserMessage(content="hi")])


def anthropic(server: ReplayServer) -> object:
    return make_model("anthropic-messages", server.url)


def json_reply(status: int, payload: object, **kw: object) -> Reply:
    return Reply(
        status=status, body=json.dumps(payload).encode(), content_type="application/json", **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_name_the_provider_and_never_retry(server: ReplayServer, status: int) -> None:
    server.enqueue(
        json_reply(
            status, {"error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        )
    )
    events, message = collect(stream(anthropic(server), CTX, options(max_retries=3)))
    check_protocol(events)
    assert isinstance(events[-1], ErrorEvent) and events[-1].reason == "error"
    assert message.stop_reason == "error"
    assert message.error_message == (
        f"Anthropic rejected the API key (HTTP {status}): invalid x-api-key"
    )
    assert len(server.requests) == 1


def test_key_echoed_by_the_server_is_scrubbed(server: ReplayServer) -> None:
    server.enqueue(
        json_reply(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}. Check it."}})
    )
    model = make_model("openai-completions", server.url)
    message = complete(model, CTX, options())
    assert message.stop_reason == "error"
    assert API_KEY not in (message.error_message or "")
    assert "OpenAI rejected the API key (HTTP 401)" in (message.error_message or "")
    assert "[REDACTED]" in (message.error_message or "")
    assert API_KEY not in message.model_dump_json()


def test_key_in_a_stream_error_and_in_plain_text_bodies_is_scrubbed(server: ReplayServer) -> None:
    server.enqueue(
        Reply(status=400, body=f"bad request for key={API_KEY}".encode(), content_type="text/plain")
    )
    message = complete(make_model("google-generative-ai", server.url), CTX, options())
    assert API_KEY not in (message.error_message or "") and "HTTP 400" in (
        message.error_message or ""
    )
    body = f'data: {{"error": {{"code": 400, "message": "key {API_KEY} is bad"}}}}\r\n\r\n'.encode()
    server.enqueue(Reply(body=body))
    message = complete(make_model("google-generative-ai", server.url), CTX, options())
    assert message.stop_reason == "error"
    assert API_KEY not in (message.error_message or "")


def test_429_with_retry_after_then_success(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []  # the pauses between attempts, taken note of instead of slept
    monkeypatch.setattr(runner, "_wait", lambda signal, seconds: waits.append(seconds))
    server.enqueue(
        json_reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"}),
        Reply(body=ANTHROPIC_BODY),
    )
    events, message = collect(stream(anthropic(server), CTX, options()))
    check_protocol(events)
    assert message.stop_reason == "stop"
    assert len(server.requests) == 2
    assert waits == [1.0]  # Retry-After: 1 was honoured, not the 1 ms base delay


def test_retry_after_ms_header_and_408_409(server: ReplayServer) -> None:
    server.enqueue(
        json_reply(408, {}, headers={"retry-after-ms": "20"}),
        json_reply(409, {}),
        Reply(body=ANTHROPIC_BODY),
    )
    message = complete(anthropic(server), CTX, options(max_retries=2))
    assert message.stop_reason == "stop"
    assert len(server.requests) == 3


def test_500_then_success(server: ReplayServer) -> None:
    server.enqueue(
        Reply(status=500, body=b"boom"), Reply(status=503, body=b"busy"), Reply(body=ANTHROPIC_BODY)
    )
    message = complete(anthropic(server), CTX, options(max_retries=2))
    assert message.stop_reason == "stop" and len(server.requests) == 3


def test_retries_exhausted(server: ReplayServer) -> None:
    server.enqueue(*(json_reply(500, {"error": {"message": "overloaded"}}) for _ in range(3)))
    message = complete(anthropic(server), CTX, options(max_retries=2))
    assert message.stop_reason == "error"
    assert message.error_message == "Anthropic API error (HTTP 500): overloaded"
    assert len(server.requests) == 3


def test_retry_after_beyond_the_limit_fails_naming_the_delay(server: ReplayServer) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    server.enqueue(json_reply(429, {"error": {"message": "quota"}}, headers={"Retry-After": later}))
    start = time.monotonic()
    message = complete(anthropic(server), CTX, options(max_retry_delay_ms=2000))
    assert time.monotonic() - start < 1
    assert message.stop_reason == "error"
    text = message.error_message or ""
    assert "retry after 3599" in text or "retry after 3600" in text
    assert "2000 ms" in text and "HTTP 429" in text
    assert len(server.requests) == 1


def test_connection_refused_is_retried_then_reported() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = make_model("anthropic-messages", f"http://127.0.0.1:{port}")
    message = complete(model, CTX, options(max_retries=2))
    assert message.stop_reason == "error"
    assert (message.error_message or "").startswith(
        f"Connection to Anthropic at http://127.0.0.1:{port} failed"
    )


def test_drop_mid_stream_keeps_partial_content_and_is_not_retried(server: ReplayServer) -> None:
    cut = ANTHROPIC_BODY.index(b"signature_delta")
    server.enqueue(Reply(body=ANTHROPIC_BODY, chunk=64, drop_after=cut), Reply(body=ANTHROPIC_BODY))
    events, message = collect(stream(anthropic(server), CTX, options(max_retries=3)))
    check_protocol(events)
    assert message.stop_reason == "error"
    assert "interrupted" in (message.error_message or "")
    assert message.content and message.content[0].thinking.startswith("The user wants")  # type: ignore[union-attr]
    assert len(server.requests) == 1


@pytest.mark.parametrize("one_write", [False, True])
def test_malformed_json_line(server: ReplayServer, one_write: bool) -> None:
    # one_write: the events before the bad one arrive in the same read, and still count
    body = ANTHROPIC_BODY.replace(b'"thinking":" and"', b'"thinking": and"', 1)
    server.enqueue(Reply(body=body, chunk=13, one_write=one_write))
    events, message = collect(stream(anthropic(server), CTX, options()))
    check_protocol(events)
    assert message.stop_reason == "error"
    assert "malformed JSON" in (message.error_message or "")
    assert message.content[0].thinking == "The user wants two names for a pet pelican,"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("api", "name", "terminal"),
    [
        ("anthropic-messages", "vendor/anthropic-thinking-text.sse", b"event: message_delta"),
        (
            "openai-completions",
            "vendor/openai-chat-text-usage.sse",
            b'data: {"id":"chatcmpl-Dx0Xq5Xx9rHB2ehcHZCRDsnuymUXc","object":"chat.completion.chunk","created":1782955818,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_d0469e1700","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}',
        ),
        ("openai-responses", "vendor/openai-responses-text.sse", b"event: response.completed"),
        (
            "google-generative-ai",
            "vendor/gemini-sse-thinking-text.sse",
            b'data: {"candidates": [{"content": {"parts": [{"text": " most important',
        ),
    ],
)
def test_stream_ending_without_its_terminal_event(
    server: ReplayServer, api: str, name: str, terminal: bytes
) -> None:
    body = fixture_bytes(name)
    server.enqueue(Reply(body=body[: body.index(terminal)], chunk=7))
    events, message = collect(stream(make_model(api, server.url), CTX, options()))
    check_protocol(events)
    assert message.stop_reason == "error"
    assert "ended before" in (message.error_message or "")
    assert message.content  # what arrived is kept


@pytest.mark.parametrize("where", ["before_headers", "mid_body"])
def test_abort_ends_a_stalled_stream_at_once(server: ReplayServer, where: str) -> None:
    if where == "before_headers":
        server.enqueue(Reply(body=ANTHROPIC_BODY, stall_before_headers=True))
    else:
        server.enqueue(
            Reply(body=ANTHROPIC_BODY, stall_after=ANTHROPIC_BODY.index(b"signature_delta"))
        )
    controller = AbortController()
    events: list[object] = []
    s = stream(anthropic(server), CTX, options(signal=controller.signal, timeout=(5, 30)))

    first_delta = threading.Event()

    def consume() -> None:
        for event in s:
            events.append(event)
            if isinstance(event, TextDeltaEvent) or getattr(event, "type", "") == "thinking_delta":
                first_delta.set()

    reader = threading.Thread(target=consume)
    reader.start()
    if where == "mid_body":
        assert first_delta.wait(5)
    else:
        assert server.wait_for_requests(1)
    assert not s.done()
    start = time.monotonic()
    controller.abort()
    message = s.result(timeout=5)
    elapsed = time.monotonic() - start
    reader.join(5)
    # The goal is 100 ms; without the abort the read would last until the server's 10 s stall
    # ends (the read timeout is 30 s), so a 1 s bound still fails an abort that does nothing.
    assert elapsed < 1.0, f"abort took {elapsed * 1000:.0f} ms"
    assert message.stop_reason == "aborted"
    assert isinstance(events[-1], ErrorEvent) and events[-1].reason == "aborted"
    if where == "mid_body":
        assert message.content[0].thinking.startswith("The user wants")  # type: ignore[union-attr]
    assert wait_no_http_threads(), "the request thread must end with the request"


def test_abort_before_the_request_and_during_backoff(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = AbortController()
    controller.abort()
    message = complete(anthropic(server), CTX, options(signal=controller.signal))
    assert message.stop_reason == "aborted" and not server.requests

    backing_off = threading.Event()
    original_wait = runner._wait

    def wait(signal: object, seconds: float) -> None:
        backing_off.set()
        original_wait(signal, seconds)

    monkeypatch.setattr(runner, "_wait", wait)
    server.enqueue(json_reply(503, {}, headers={"Retry-After": "30"}))
    controller = AbortController()
    s = stream(anthropic(server), CTX, options(signal=controller.signal))
    assert backing_off.wait(5)  # the 503 was read and the 30 s wait has begun
    start = time.monotonic()
    controller.abort()
    assert s.result(timeout=5).stop_reason == "aborted"
    assert time.monotonic() - start < 1.0  # 100 ms goal; without the abort it would be 30 s
    assert len(server.requests) == 1


def test_read_timeout_after_the_first_event_is_final(server: ReplayServer) -> None:
    server.enqueue(Reply(body=ANTHROPIC_BODY, stall_after=ANTHROPIC_BODY.index(b"event: ping")))
    start = time.monotonic()
    message = complete(anthropic(server), CTX, options(timeout=(2, 0.3)))
    # 10x the 0.3 s read timeout; a read that never timed out would wait out the 10 s stall
    assert time.monotonic() - start < 3.0
    assert message.stop_reason == "error"
    assert "interrupted" in (message.error_message or "")
    assert "timed out" in (message.error_message or "").lower()
    assert len(server.requests) == 1


def test_failures_before_any_event_are_retried(server: ReplayServer) -> None:
    overloaded = (
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
        b'"message": "Overloaded"}}\n\n'
    )
    server.enqueue(
        Reply(body=ANTHROPIC_BODY, drop_after=0),  # headers, then the connection drops
        Reply(body=ANTHROPIC_BODY, stall_after=100),  # a read timeout before the first event
        Reply(body=overloaded),  # an error event as the very first event
        Reply(body=ANTHROPIC_BODY, chunk=13),
    )
    events, message = collect(
        stream(anthropic(server), CTX, options(max_retries=3, timeout=(2, 0.2)))
    )
    check_protocol(events)
    assert message.stop_reason == "stop"
    assert len(server.requests) == 4
    server.enqueue(Reply(body=overloaded))
    message = complete(anthropic(server), CTX, options(max_retries=0))
    assert message.error_message == "Anthropic stream error: Overloaded"


def test_close_delimited_body_streams_without_waiting_for_the_end(server: ReplayServer) -> None:
    server.enqueue(Reply(body=ANTHROPIC_BODY, chunked=False, chunk=100))
    events, message = collect(stream(anthropic(server), CTX, options()))
    check_protocol(events)
    assert message.stop_reason == "stop"


def test_missing_key_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = make_model("anthropic-messages", "https://api.anthropic.com")
    message = complete(model, CTX, {})
    assert message.stop_reason == "error"
    assert "ANTHROPIC_API_KEY" in (message.error_message or "")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    google = make_model("google-generative-ai", "https://generativelanguage.googleapis.com/v1beta")
    assert "GEMINI_API_KEY or GOOGLE_API_KEY" in (complete(google, CTX).error_message or "")


def test_env_key_is_used_and_local_servers_need_none(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key-123456")
    server.enqueue(Reply(body=ANTHROPIC_BODY), Reply(body=ANTHROPIC_BODY))
    assert complete(anthropic(server), CTX, {}).stop_reason == "stop"
    assert server.requests[0].headers["x-api-key"] == "env-key-123456"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert complete(anthropic(server), CTX, {}).stop_reason == "stop"  # 127.0.0.1: no key needed
    assert "x-api-key" not in server.requests[1].headers


def test_stream_returns_at_once_and_threads_end(server: ReplayServer) -> None:
    server.enqueue(Reply(body=ANTHROPIC_BODY, stall_after=100))
    before = set(threading.enumerate())
    start = time.monotonic()
    controller = AbortController()
    s = stream(anthropic(server), CTX, options(signal=controller.signal))
    # stream() did not wait for the response: the server stalls it for 10 s (read timeout 5 s)
    assert not s.done()
    assert time.monotonic() - start < 1.0
    assert http_threads()
    controller.abort()
    s.result(timeout=5)
    # An aborted request's thread is not waited for by result() (it may sit in a connect);
    # here it was blocked on a read the abort closed, so it ends promptly.
    assert wait_no_http_threads()
    leftover = [t for t in threading.enumerate() if t not in before and t.name == "agentkit-http"]
    assert not leftover


def test_helpers() -> None:
    assert scrub(f"a {API_KEY} b", [API_KEY, None, ""]) == "a [REDACTED] b"
    assert resolve_timeout(None) == (10.0, 600.0)
    assert resolve_timeout(3) == (3.0, 3.0)
    assert resolve_timeout((1, 2)) == (1.0, 2.0)
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    when = email.utils.formatdate(1000.0 + 30, usegmt=True)
    assert parse_retry_after({"retry-after": when}, now=1000.0) == pytest.approx(30, abs=1)
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None


def test_on_payload_can_replace_the_body(server: ReplayServer) -> None:
    server.enqueue(Reply(body=ANTHROPIC_BODY))
    seen: list[object] = []

    def hook(payload: dict, model: object) -> dict:  # type: ignore[type-arg]
        seen.append(model)
        return {**payload, "metadata": {"user_id": "u1"}}

    complete(anthropic(server), CTX, options(on_payload=hook))
    assert server.requests[0].json["metadata"] == {"user_id": "u1"}
    assert seen


def test_unknown_api_is_an_error_event() -> None:
    from agentkit.types import Model

    model = Model(id="x", api="nope", provider="p", base_url="http://127.0.0.1:1")
    message = complete(model, CTX)
    assert message.stop_reason == "error" and "nope" in (message.error_message or "")


def test_text_content_survives_errors(server: ReplayServer) -> None:
    body = fixture_bytes("vendor/openai-chat-text-usage.sse")
    server.enqueue(Reply(body=body, drop_after=body.index(b" London")))
    message = complete(make_model("openai-completions", server.url), CTX, options())
    assert message.stop_reason == "error"
    assert message.content == [TextContent(text="The capital of the UK is")]


def test_abort_while_connecting_ends_the_stream_at_once(
    full_listener: int, full_listener_socket: socket.socket
) -> None:
    controller = AbortController()
    model = make_model("anthropic-messages", f"http://127.0.0.1:{full_listener}")
    s = stream(model, CTX, options(signal=controller.signal, timeout=(5, 5), max_retries=0))
    assert not s.done()  # connect() hangs on the full accept queue until its 5 s timeout
    start = time.monotonic()
    controller.abort()
    message = s.result(timeout=10)
    assert time.monotonic() - start < 1.0  # 100 ms goal; without the abort, the 5 s timeout
    assert message.stop_reason == "aborted"
    # The connect thread given up on ends when connect() does: closing the listener refuses
    # its next SYN retry (about 1 s in), and at the latest it times out after 5 s.
    full_listener_socket.close()
    assert wait_no_http_threads(15)


def test_local_servers_bypass_proxies_from_the_environment(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    server.enqueue(Reply(body=ANTHROPIC_BODY))
    assert complete(anthropic(server), CTX, options(max_retries=0)).stop_reason == "stop"
