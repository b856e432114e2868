"""Chunked bodies: the decoder on its own, and over real HTTP a stream read as it arrives (one
piece per read, however many chunks it holds), never waiting for more."""

from __future__ import annotations

import gzip

import pytest
from replay_server import (
    ReplayServer,
    Reply,
    chat_sse,
    check_protocol,
    collect,
    make_model,
    options,
)

from agentkit.events import ToolCallDeltaEvent
from agentkit.providers import stream
from agentkit.providers.chunked import ChunkDecoder
from agentkit.types import Context, UserMessage

CTX = Context(messages=[UserMessage(content="hi")])

BODY = b'data: {"a": 1}\n\ndata: {"b": "two"}\n\ndata: [DONE]\n\n'
WIRE = (
    b"10;name=value\r\n" + BODY[:16] + b"\r\n"  # a chunk extension
    + b"%x\r\n" % (len(BODY) - 16) + BODY[16:] + b"\r\n"
    + b"0\r\nX-Trailer: yes\r\n\r\n"  # a trailer field
)


def test_decoder_gives_the_body_whatever_the_reads_are() -> None:
    whole = ChunkDecoder()
    assert whole.feed(WIRE) == BODY and whole.done and not whole.extra
    for cut in range(1, len(WIRE)):  # every split of the wire into two reads
        decoder = ChunkDecoder()
        first = decoder.feed(WIRE[:cut])
        assert not decoder.done
        assert first + decoder.feed(WIRE[cut:]) == BODY and decoder.done
    bytewise = ChunkDecoder()
    assert b"".join(bytewise.feed(WIRE[i : i + 1]) for i in range(len(WIRE))) == BODY
    assert bytewise.done


def test_decoder_accepts_bare_newlines_and_flags_bytes_after_the_end() -> None:
    decoder = ChunkDecoder()
    assert decoder.feed(b"3\nabc\n0\n\nHTTP/1.1 200 OK") == b"abc"
    assert decoder.done and decoder.extra


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (b"zz\r\n", "invalid chunk size"),
        (b"-3\r\nabc\r\n", "invalid chunk size"),
        (b"0x3\r\nabc\r\n", "invalid chunk size"),
        (b"\r\n", "invalid chunk size"),
        (b"3\r\nabcd\r\n", "longer than its declared size"),
        (b"1" * 5000, "too long"),
        (b"1" * 5000 + b"\r\n", "too long"),
    ],
)
def test_decoder_refuses_broken_framing(wire: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ChunkDecoder().feed(wire)


def tool_call_sse(pieces: list[str]) -> bytes:
    first = {"index": 0, "id": "call_1", "type": "function"}
    first["function"] = {"name": "lookup", "arguments": ""}  # type: ignore[assignment]
    deltas = [{"tool_calls": [first]}]
    deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces]
    return chat_sse(*deltas, finish="tool_calls")


PIECES = ['{"city": ', '"Par', 'is", "u', 'nit": "c"}']
ARGS = {"city": "Paris", "unit": "c"}


def completions(server: ReplayServer) -> object:
    return make_model("openai-completions", server.url)


def test_chunks_that_arrived_together_make_one_update(server: ReplayServer) -> None:
    # Each SSE event in a chunk of its own, as APIs send them, but all in one write: one read
    # brings them all, so the four argument pieces make one toolcall_delta.
    body = tool_call_sse(PIECES)
    server.enqueue(Reply(body=body, chunk=40, one_write=True))
    events, message = collect(stream(completions(server), CTX, options()))
    check_protocol(events)
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert len(deltas) == 1
    assert deltas[0].delta == "".join(PIECES)
    assert message.stop_reason == "tool_use" and message.content[0].arguments == ARGS  # type: ignore[union-attr]


def test_what_has_arrived_is_delivered_without_waiting_for_more(server: ReplayServer) -> None:
    body = tool_call_sse(PIECES)
    cut = body.index(b'is\\", \\"u')  # the stream stalls inside the arguments
    server.enqueue(Reply(body=body, chunk=40, stall_after=cut, resume=True))
    response = stream(completions(server), CTX, options())
    for event in response:
        if isinstance(event, ToolCallDeltaEvent) and not server.release.is_set():
            if event.partial.content[0].arguments == {"city": "Par"}:  # type: ignore[union-attr]
                server.release.set()  # seen while the server still held the rest back
    assert server.release.is_set()
    assert response.result(timeout=10).content[0].arguments == ARGS  # type: ignore[union-attr]


def test_a_compressed_chunked_body_is_decoded(server: ReplayServer) -> None:
    body = gzip.compress(tool_call_sse(PIECES))
    server.enqueue(Reply(body=body, chunk=30, headers={"Content-Encoding": "gzip"}))
    events, message = collect(stream(completions(server), CTX, options()))
    check_protocol(events)
    assert message.content[0].arguments == ARGS  # type: ignore[union-attr]


def test_a_body_read_to_its_end_leaves_the_connection_reusable(server: ReplayServer) -> None:
    body = tool_call_sse(PIECES)
    server.enqueue(*(Reply(body=body, chunk=25) for _ in range(3)))
    for _ in range(3):
        _, message = collect(stream(completions(server), CTX, options()))
        assert message.stop_reason == "tool_use"
    assert server.connections == 1


def framed(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def test_broken_framing_is_a_clear_error_and_the_connection_is_dropped(
    server: ReplayServer,
) -> None:
    body = tool_call_sse(PIECES)
    server.enqueue(
        Reply(framed=b"%x\r\n%s\r\nzz\r\n" % (len(body[:60]), body[:60])),
        Reply(body=body),
    )
    _, message = collect(stream(completions(server), CTX, options(max_retries=0)))
    assert message.stop_reason == "error"
    assert message.error_message == (
        "OpenAI stream was interrupted: invalid chunk size b'zz'"
    )
    _, message = collect(stream(completions(server), CTX, options()))
    assert message.stop_reason == "tool_use"
    assert server.connections == 2  # the broken connection was not given back to the pool


def test_bytes_after_the_last_chunk_keep_the_body_but_not_the_connection(
    server: ReplayServer,
) -> None:
    body = tool_call_sse(PIECES)
    server.enqueue(Reply(framed=framed(body) + b"junk"), Reply(body=body))
    for _ in range(2):
        _, message = collect(stream(completions(server), CTX, options()))
        assert message.content[0].arguments == ARGS  # type: ignore[union-attr]
    assert server.connections == 2
