"""The event-stream parser: line endings, multi-line data, comments, names, chunk splits."""

from __future__ import annotations

import pytest
from replay_server import fixture_bytes

from agentkit.providers.sse import SSEEvent, SSEParser


def parse(body: bytes, size: int | None = None) -> list[SSEEvent]:
    """The events of ``body`` fed to one parser whole, or in pieces of ``size`` bytes."""
    parser = SSEParser()
    pieces = [body] if size is None else [body[i : i + size] for i in range(0, len(body), size)]
    events = [event for piece in pieces for event in parser.feed(piece)]
    return events + list(parser.close())


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    body = eol.join([b"event: ping", b"data: {}", b"", b"data: x", b"", b""])
    assert parse(body) == [SSEEvent("ping", "{}"), SSEEvent("message", "x")]


def test_multi_line_data_comments_and_fields() -> None:
    body = b": a comment\nid: 7\nevent: update\ndata: one\ndata:two\ndata:  three\nretry: 5\n\n"
    assert parse(body) == [SSEEvent("update", "one\ntwo\n three", "7")]


def test_blank_lines_without_data_dispatch_nothing_and_reset_the_name() -> None:
    body = b"event: lost\n\n\n\ndata: kept\n\n"
    assert parse(body) == [SSEEvent("message", "kept")]


def test_field_without_colon_and_byte_order_mark() -> None:
    body = b"\xef\xbb\xbfdata\n\ndata: a\n\n"
    assert parse(body) == [SSEEvent("message", ""), SSEEvent("message", "a")]


def test_padding_after_json_is_kept_for_the_json_parser() -> None:
    body = b'event: ping\ndata: {"type": "ping"}     \n\n'
    assert parse(body)[0].data == '{"type": "ping"}     '


def test_last_event_without_blank_line_is_dispatched_but_a_cut_line_is_not() -> None:
    assert parse(b"data: whole\n") == [SSEEvent("message", "whole")]
    assert parse(b'data: whole\n\ndata: {"cut') == [SSEEvent("message", "whole")]


@pytest.mark.parametrize(
    "name",
    [
        "vendor/anthropic-thinking-text.sse",
        "vendor/gemini-sse-thinking-text.sse",
        "vendor/openai-responses-text.sse",
    ],
)
def test_any_split_gives_the_same_events(name: str) -> None:
    body = fixture_bytes(name)
    whole = parse(body)
    assert whole
    for size in (1, 2, 3, 7, 13, 64):
        assert parse(body, size) == whole
    # every single split point, CR/LF pairs and multi-byte characters included
    for cut in range(0, len(body), 37):
        parser = SSEParser()
        events = parser.feed(body[:cut]) + parser.feed(body[cut:]) + parser.close()
        assert events == whole


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    parser = SSEParser()
    events = parser.feed(b"data: a\r") + parser.feed(b"\n\r") + parser.feed(b"\ndata: b\r\n\r\n")
    assert events == [SSEEvent("message", "a"), SSEEvent("message", "b")]


def test_utf8_split_inside_a_character() -> None:
    body = "data: héllo ✓\n\n".encode()
    assert parse(body, 1) == [SSEEvent("message", "héllo ✓")]


def test_long_line_in_tiny_chunks_is_linear() -> None:
    payload = b"x" * 200_000
    body = b"data: " + payload + b"\n\n"
    events = parse(body, 16)
    assert events[0].data == payload.decode()
