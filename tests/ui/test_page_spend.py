"""Spend on the page: each session's spend in the session list, from its runs' recorded usage
(the run log's end records, the transcript for what the log does not hold), and the spend
ledger's totals by key and window on /spend, read in Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from agentkit import Agent
from agentkit.ledger import Cap, Ledger, MemoryLedgerStore, SpendPolicy
from agentkit.sessions import Session, SqliteStore
from agentkit.sessions.runlog_base import RunInfo
from agentkit.subagents import agent_tool
from agentkit.testing import SCRIPTED_MODEL, ScriptedModel, reply, tool_call
from agentkit.transcript import CompactionRecord
from agentkit.types import AssistantMessage, Cost, ModelCost, TextContent, Usage, UserMessage
from agentkit.ui import UiServer
from agentkit.ui.spend import session_spend

from ..support import WAIT
from .browser import expect, needs_browser, not_pwned, open_page

PRICES = ModelCost(input=10.0, output=40.0)
"""USD per million tokens of the scripted models."""
MODEL = SCRIPTED_MODEL.model_copy(update={"cost": PRICES})


def usage(input_tokens: int, output_tokens: int) -> Usage:
    usd = (input_tokens * PRICES.input + output_tokens * PRICES.output) / 1_000_000
    return Usage(input=input_tokens, output=output_tokens,
                 total_tokens=input_tokens + output_tokens, cost=Cost(total=usd))  # fmt: skip


def answer(text: str, spent: Usage, at: int) -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text=text)], api="scripted", provider="scripted",
                            model="scripted", usage=spent, timestamp=at)  # fmt: skip


def ended(run_id: str, started: int, ended_at: int, spent: dict[str, Any] | None) -> RunInfo:
    end: dict[str, Any] = {"type": "run_end", "stop_reason": "stop"}
    if spent is not None:
        end["usage"] = spent
    return RunInfo(run_id, "s", False, started, 9, ended_ms=ended_at, end=end)


# --- a session's spend, from its runs' records and its transcript -----------------------------


def test_a_logged_run_counts_as_its_end_record_says_and_the_rest_as_the_transcript_does() -> None:
    old = answer("before the log", usage(1000, 100), at=1_000)  # $0.014, a pruned run's
    logged = answer("in the logged run", usage(2000, 0), at=5_000)  # $0.02, the run's reply
    # The logged run also made a judge's request the transcript never shows: its end says $0.05.
    run_usage = usage(4000, 250).model_dump(mode="json")
    compaction = CompactionRecord(summary="so far", first_kept_index=1, index=3,
                                  usage=usage(500, 50), timestamp=9_000).model_dump(mode="json")
    live = answer("in the run going on", usage(100, 10), at=12_000)  # $0.0014
    messages = [UserMessage(content="hi", timestamp=900), old, logged, compaction, live]
    runs = [
        RunInfo("going", "s", True, 11_000, 3),  # live: its end is not written yet
        ended("died", 8_000, 10_000, None),  # its process died: no usage in its end
        ended("logged", 4_000, 6_000, run_usage),
    ]
    spend = session_spend(messages, runs)
    assert spend.usd == pytest.approx(0.014 + 0.05 + 0.007 + 0.0014)
    assert spend.tokens == 1100 + 4250 + 550 + 110
    # Without the run log, the transcript's figures: the judge's request is not among them.
    assert session_spend(messages, []).usd == pytest.approx(0.014 + 0.02 + 0.007 + 0.0014)


def test_a_garbled_end_record_or_a_garbled_record_costs_nothing_and_breaks_nothing() -> None:
    reply_ = answer("ok", usage(1000, 0), at=5_000)
    garbled = ended("bad", 4_000, 6_000, {"input": "lots", "cost": "free"})
    broken_record = {"role": "compaction", "summary": 3}
    spend = session_spend([reply_, broken_record, {"role": "note"}], [garbled])
    assert spend.usd == pytest.approx(0.01) and spend.tokens == 1000


# --- the page ---------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with SqliteStore(tmp_path / "sessions.db") as opened:
        yield opened


def _run_sessions(store: SqliteStore, ledger: Ledger) -> tuple[float, float]:
    """Two sessions run for real (their run logs recorded): ``helped``, whose run starts a
    sub-agent, and ``plain``; return what each run cost."""
    child_model = ScriptedModel([reply("found", usage=usage(300, 30))], model=MODEL)
    child = Agent(model=MODEL, stream_fn=child_model, name="helper", description="helps")
    parent_model = ScriptedModel([
        reply(tool_call("helper", {"task": "look"}), usage=usage(1000, 50)),
        reply("done", usage=usage(1200, 20)),
    ], model=MODEL)  # fmt: skip
    keys = ["tenant:acme", "user:acme/42"]
    with Agent(model=MODEL, stream_fn=parent_model, tools=[agent_tool(child)],
               session=Session("helped", store), policies=[SpendPolicy(ledger, keys)]) as parent:
        helped = parent.prompt("Go").usage.cost.total
    plain_model = ScriptedModel([reply("hello", usage=usage(100, 10))], model=MODEL)
    with Agent(model=MODEL, stream_fn=plain_model, session=Session("plain", store),
               policies=[SpendPolicy(ledger, ["tenant:zeta"])]) as agent:
        plain = agent.prompt("Hi").usage.cost.total
    return helped, plain


@pytest.mark.browser
@needs_browser
def test_the_session_list_shows_each_sessions_spend_and_the_spend_page_the_ledgers(
    store: SqliteStore,
) -> None:
    ledger = Ledger(MemoryLedgerStore(), caps=[Cap("user:*", "day", usd=1.0)])
    helped, plain = _run_sessions(store, ledger)
    assert helped == pytest.approx((1000 * 10 + 50 * 40 + 1200 * 10 + 20 * 40 + 300 * 10 + 30 * 40)
                                   / 1_000_000)  # fmt: skip
    held = ledger.reserve(["tenant:acme"], usd=0.25, tokens=900)  # a request in flight
    with UiServer(store, ledger=ledger) as server, open_page() as page:
        page.goto(server.url)
        row = page.locator('tr[data-session="helped"] td.spend')
        expect(row).to_have_text(f"${helped:.4f} · 2600 tokens")  # its sub-agent's included
        expect(page.locator('tr[data-session="plain"] td.spend')).to_have_text(
            f"${plain:.4f} · 110 tokens"
        )
        page.get_by_role("link", name="Spend").click()
        expect(page.locator("h1")).to_have_text("Spend")
        day = page.locator('table[data-window="day"]')
        acme = day.locator('tr[data-key="tenant:acme"] td')
        expect(acme.nth(1)).to_have_text(f"${helped:.4f}")
        expect(acme.nth(2)).to_have_text("2600")
        expect(acme.nth(3)).to_have_text("3")  # the parent's two requests, its sub-agent's one
        expect(acme.nth(4)).to_have_text("$0.2500 · 900 tokens")
        expect(page.locator('table[data-window="total"] tr[data-key="tenant:zeta"] td').nth(1)) \
            .to_have_text(f"${plain:.4f}")  # fmt: skip
        page.fill('input[name="prefix"]', "user:")
        page.get_by_role("button", name="Show").click()
        expect(page.locator('table[data-window="month"] tbody tr')).to_have_count(1)
        expect(page.locator('table[data-window="month"] tr[data-key="user:acme/42"]')).to_have_count(1)
        not_pwned(page)
    ledger.release(held)


def test_without_a_ledger_there_is_no_spend_page_and_a_ledger_that_fails_is_said(
    store: SqliteStore,
) -> None:
    from agentkit.errors import LedgerError

    class Down(MemoryLedgerStore):
        def spend(self, period: str, prefix: str | None = None) -> list[Any]:
            raise LedgerError("the Redis ledger store at redis://127.0.0.1:1/0 did not answer")

    with UiServer(store) as server:
        client = requests.Session()
        client.get(server.url, timeout=WAIT)
        base = server.url.split("?")[0].rstrip("/")
        assert client.get(f"{base}/spend", timeout=WAIT).status_code == 404
        assert 'href="/spend"' not in client.get(f"{base}/", timeout=WAIT).text
    with UiServer(store, ledger=Ledger(Down())) as server:
        client = requests.Session()
        client.get(server.url, timeout=WAIT)
        base = server.url.split("?")[0].rstrip("/")
        page = client.get(f"{base}/spend", params={"prefix": "<b>x"}, timeout=WAIT)
        assert page.status_code == 200
        assert "the ledger cannot be read: the Redis ledger store" in page.text
        assert "<b>x" not in page.text  # escaped


def test_agentkit_ui_takes_a_ledger_another_process_can_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentkit.cli.ui import open_ledger
    from agentkit.errors import CliError

    monkeypatch.delenv("AGENTKIT_LEDGER", raising=False)
    assert open_ledger(None) is None  # no ledger: no /spend page
    with pytest.raises(CliError, match="lives in its own process"):
        open_ledger("memory://")
    monkeypatch.setenv("AGENTKIT_LEDGER", "memory://")
    with pytest.raises(CliError, match="lives in its own process"):
        open_ledger(None)
    with pytest.raises(CliError, match="no ledger store for 'ftp://x'"):
        open_ledger("ftp://x")
