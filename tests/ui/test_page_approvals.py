"""The approval inbox: a run started from the page waits for approval (deferred, durable), the
inbox lists the call, a person approves it in a real browser, the decision is the session's
durable record, and a resume from the page runs the call exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from agentkit import Agent, Approvals, tool
from agentkit.sessions import Session, SqliteStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.ui import UiServer

from ..support import WAIT
from .browser import needs_browser, not_pwned, open_page, shot
from .conftest import HOSTILE


@pytest.fixture
def refunds() -> list[int]:
    return []


@pytest.fixture
def approval_page(tmp_path: Path, refunds: list[int]) -> Iterator[UiServer]:
    @tool(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        refunds.append(amount)
        return f"refunded {amount} on {order}"

    # One script for every agent the page builds: the run that asks, then the run that resumes.
    model = ScriptedModel([
        reply(tool_call("refund", {"order": HOSTILE, "amount": 30})),
        "The refund is done.",
    ])  # fmt: skip

    def build(session: Session) -> Agent:
        return Agent(model=model.model, stream_fn=model, tools=[refund], session=session,
                     approvals=Approvals(defer=True))  # fmt: skip

    with SqliteStore(tmp_path / "sessions.db") as store, UiServer(store, build_agent=build) as server:
        yield server


def _start_waiting_run(server: UiServer) -> tuple[requests.Session, str]:
    client = requests.Session()
    client.get(server.url, timeout=WAIT)
    base = server.url.split("?")[0].rstrip("/")
    started = client.post(base + "/new", data={"session": "refund-1", "text": "refund it",
                                               "csrf": server.guard.csrf_token},
                          headers={"Origin": base, "Accept": "application/json"}, timeout=WAIT)  # fmt: skip
    assert started.status_code == 200
    live = server.live.get("refund-1")
    assert live is not None and live.agent.wait_for_idle(WAIT)
    return client, base


def test_decide_over_http_once_and_resume(approval_page: UiServer, refunds: list[int]) -> None:
    client, base = _start_waiting_run(approval_page)
    (waiting,) = Session("refund-1", approval_page.store).pending_approvals()
    inbox = client.get(base + "/approvals", timeout=WAIT).text
    assert waiting.id in inbox and "&lt;script&gt;" in inbox and HOSTILE not in inbox
    form = {"csrf": approval_page.guard.csrf_token, "decision": "approve",
            "arguments": '{"order": "A-1", "amount": 25}'}  # fmt: skip
    headers = {"Origin": base, "Accept": "application/json"}
    url = f"{base}/s/refund-1/approvals/{waiting.id}"
    assert client.post(url, data=form, headers=headers, timeout=WAIT).status_code == 200
    twice = client.post(url, data=form, headers=headers, timeout=WAIT)
    assert twice.status_code == 409 and "decided already" in twice.json()["message"]
    assert refunds == []  # deciding runs nothing; the resume does
    resumed = client.post(f"{base}/s/refund-1/resume", data={"csrf": form["csrf"]},
                          headers=headers, timeout=WAIT)  # fmt: skip
    assert resumed.status_code == 200
    live = approval_page.live.get("refund-1")
    assert live is not None and live.agent.wait_for_idle(WAIT)
    assert refunds == [25]  # once, with the edited arguments
    stored = Session("refund-1", approval_page.store).load()
    assert stored[-1].content[0].text == "The refund is done."


@pytest.mark.browser
@needs_browser
def test_approve_in_the_browser(approval_page: UiServer, refunds: list[int]) -> None:
    _start_waiting_run(approval_page)
    with open_page() as page:
        _approve_and_resume(approval_page, refunds, page)


def _approve_and_resume(approval_page: UiServer, refunds: list[int], page: Any) -> None:
    page.goto(approval_page.url)
    page.click("header a:has-text('Approvals')")
    item = page.locator("li.approval")
    assert item.locator(".tool").inner_text() == "refund"
    assert "<script>window.pwned = true</script>" in item.locator("pre.args").inner_text()
    shot(page, "approvals")
    item.locator("input[name=reason]").fill("looks right")
    item.locator("button:has-text('Approve')").click()
    page.wait_for_url("**/approvals")
    assert page.locator("li.approval").count() == 0
    assert Session("refund-1", approval_page.store).pending_approvals() == []
    page.goto(approval_page.url.split("?")[0] + "s/refund-1")
    page.click("form.resume button")
    page.wait_for_selector(".call .badge.ok")
    assert refunds == [30]
    not_pwned(page)
    shot(page, "after-approval")
