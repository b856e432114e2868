"""Cache-aware requests on the embedded model (llama.cpp reports the prompt tokens its slot
reused as cache reads), over each wire API it speaks: a second request that extends the first
reads the shared prefix from the cache, and a system prompt whose timestamp changed is named as
the break, with the cache reads falling to what the prompt's unchanged start holds."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentkit import Agent
from agentkit.context import CacheWatch, cache_report
from agentkit.local.constants import LOCAL_APIS
from agentkit.types import role_of

RULES = "You answer in one short word. " + "Keep answers short and plain. " * 30
"""A prompt long enough that its cached part is plainly more than a chat template's head."""


def agent_for(server: Any, api: str, watch: CacheWatch, when: str, **options: Any) -> Agent:
    return Agent(model=server.model_for(api), system_prompt=f"{RULES}Now: {when}.",
                 policies=[watch], max_tokens=4, temperature=0, **options)  # fmt: skip


@pytest.mark.parametrize("api", LOCAL_APIS)
def test_the_embedded_model_reports_cache_reads_and_a_break(
    api: str, embedded_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentkit")
    watch = CacheWatch()
    agent = agent_for(embedded_server, api, watch, "2026-12-03 10:00:01")
    agent.prompt("Say yes.")
    extended = agent.prompt("Say no.")
    prompt_tokens = cache_report(extended).turns[0]
    assert extended.stop_reason in ("stop", "length"), extended.error_message
    assert prompt_tokens.cache_read > len(RULES) // 8, prompt_tokens  # the prefix was reused
    assert cache_report(extended).notes == []

    carried = [m for m in agent.state.messages if role_of(m) != "system"]
    moved = agent_for(embedded_server, api, watch, "2026-12-03 10:07:45", messages=carried)
    broken = moved.prompt("Say maybe.")
    report = cache_report(broken)
    [note] = report.notes
    assert (note.part, note.detail["kind"]) == ("system_prompt", "timestamp")
    assert note.position == len(RULES) + len("Now: 2026-12-03 10:0")
    # what is read again is the prompt's start, up to about where it changed
    assert 0 < report.turns[0].cache_read < prompt_tokens.cache_read
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
