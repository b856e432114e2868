"""Streamed JSON: salvaging tool arguments, the linear partial-parse schedule, JSON arrays."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from replay_server import fixture_bytes

from agentkit.providers import json_stream
from agentkit.providers.json_stream import (
    JsonArrayStream,
    ToolArgsBuffer,
    parse_partial_json,
    parse_streaming_json,
    repair_json,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("   \n", {}),
        (None, {}),
        ('{"a": 1}', {"a": 1}),
        ('{"city": "Par', {"city": "Par"}),
        ('{"a": 1, "b": tr', {"a": 1}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": [1, {"b": "c', {"a": [1, {"b": "c"}]}),
        ('{"a": "x\\u00', {"a": "x"}),
        ('{"a": "x\\', {"a": "x"}),
        ('{"a":', {}),
        ('{"a', {}),
        ('{"a": 1.', {"a": 1}),
        ('{"a": -', {}),
        ('{"a": null, "b": fal', {"a": None}),
        ("not json at all", {}),
        ('{"a": 1} trailing', {}),
    ],
)
def test_parse_streaming_json(text: str | None, expected: Any) -> None:
    assert parse_streaming_json(text) == expected


def test_repair_escapes_raw_control_characters_and_bad_escapes() -> None:
    raw = '{"code": "line1\nline2\tend", "path": "C:\\dir\\sub", "ok": "\\n"}'
    assert json.loads(repair_json(raw)) == {
        "code": "line1\nline2\tend",
        "path": "C:\\dir\\sub",
        "ok": "\n",
    }
    assert parse_streaming_json(raw)["path"] == "C:\\dir\\sub"


def test_repair_then_partial() -> None:
    assert parse_streaming_json('{"code": "a\nb", "more": "unfinis') == {
        "code": "a\nb",
        "more": "unfinis",
    }


def test_partial_parser_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_partial_json("{]")


def test_split_escape_sequences_across_deltas() -> None:
    # the shape of anthropic-server-tool-split-json.sse: a delta ends inside an escape
    pieces = ['{"comman', 'd": "pyt', "hon3 ", '-c \\"p', "rint(2 + 2)\\", '""}']
    buffer = ToolArgsBuffer()
    for piece in pieces:
        buffer.append(piece)
        assert isinstance(buffer.partial(), dict)
    assert buffer.final() == {"command": 'python3 -c "print(2 + 2)"'}


def test_args_buffer_parses_on_a_geometric_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = json_stream.parse_json_arguments

    def counting(text: str | None) -> Any:
        calls.append(len(text or ""))
        return original(text)

    monkeypatch.setattr(json_stream, "parse_json_arguments", counting)
    buffer = ToolArgsBuffer()
    buffer.append('{"data": "')
    for _ in range(200_000 // 16):
        buffer.append("x" * 16)
        buffer.partial()
    buffer.append('"}')
    final = buffer.final()
    assert len(final["data"]) == 200_000
    big = [n for n in calls if n > json_stream.EAGER_PARSE_LIMIT]
    assert big and big[-1] == len(buffer.text)  # the counted parser is the one the buffer uses
    # total characters parsed beyond the eager zone stay within a small multiple of the length
    assert sum(big) < 4 * len(buffer.text)
    assert len(big) < 20


def test_args_buffer_cost_is_linear() -> None:
    def run(size: int) -> float:
        buffer = ToolArgsBuffer()
        start = time.perf_counter()
        buffer.append('{"data": "')
        chunk = "abcdefghijklmnop"
        for _ in range(size // 16):
            buffer.append(chunk)
            buffer.partial()
        buffer.append('"}')
        buffer.final()
        return time.perf_counter() - start

    run(100_000)  # warm up
    small = min(run(250_000) for _ in range(2))
    large = min(run(1_000_000) for _ in range(2))
    assert large / small < 8  # 4x the data: about 4x the time, far from 16x


def test_json_array_stream_splits_elements_in_any_chunking() -> None:
    body = fixture_bytes("vendor/gemini-json-array-function-call.json")
    expected = [json.dumps(x) for x in json.loads(body)]
    for size in (1, 5, 7, 13, len(body)):
        stream = JsonArrayStream()
        out: list[str] = []
        for i in range(0, len(body), size):
            out.extend(stream.feed(body[i : i + size]))
        assert [json.dumps(json.loads(x)) for x in out] == expected


def test_json_array_stream_handles_brackets_and_escapes_inside_strings() -> None:
    body = b'[{"t": "a ] } [ { \\" \\\\"}, {"u": ["x", {"v": 1}]}]'
    stream = JsonArrayStream()
    out: list[str] = []
    for byte in range(len(body)):
        out.extend(stream.feed(body[byte : byte + 1]))
    assert [json.loads(x) for x in out] == [{"t": 'a ] } [ { " \\'}, {"u": ["x", {"v": 1}]}]
