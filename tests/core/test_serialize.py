"""Strict JSON: one surrogate cleaner, one role set, and data every encoder accepts."""

from __future__ import annotations

import json
import math

import pytest

from agentkit._serialize import LLM_ROLES, clean_text, dumps, encode_body, to_serialisable
from agentkit.loop import default_convert_to_llm
from agentkit.sessions import decode_message


def test_lone_surrogates_become_the_replacement_character_and_pairs_join() -> None:
    clean = "plain ü"
    assert clean_text(clean) is clean
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("\ud83d\ude00") == "\U0001f600"


def test_to_serialisable_drops_what_strict_json_cannot_hold() -> None:
    data = to_serialisable({"x": math.inf, "s": "\udc00", "o": object()})
    assert data["x"] is None and data["s"] == "\ufffd" and data["o"].startswith("<object")
    json.dumps(data, allow_nan=False).encode("utf-8")


def test_dumps_is_compact_and_strict() -> None:
    assert dumps({"a": "ü", "b": [1]}) == '{"a":"ü","b":[1]}'
    with pytest.raises(ValueError):
        dumps({"a": math.nan})


def test_the_request_body_survives_a_lone_surrogate() -> None:
    assert encode_body({"a": "ü"}) == '{"a":"ü"}'.encode()
    assert json.loads(encode_body({"a": "\ud800"})) == {"a": "?"}


def test_one_role_set_for_the_loop_and_the_stores() -> None:
    assert LLM_ROLES == {"system", "user", "assistant", "tool_result"}
    assert default_convert_to_llm([{"role": "note"}]) == []
    assert decode_message({"role": "note", "text": "x"}) == {"role": "note", "text": "x"}
