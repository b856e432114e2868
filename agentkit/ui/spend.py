"""What the page shows of spend: each session's, from what its runs recorded, and, with a spend
ledger (:mod:`agentkit.ledger`), the ledger's totals by key and window on the ``/spend`` page.

A session's spend counts each run as its run log's end recorded it (the run's whole usage: its
replies, its sub-agents', its judges' and summaries' requests), and, for what the run log does
not hold (runs older than the log keeps, runs still going, runs whose process died), the usage
the transcript records: the replies, the sub-agents' results and the compactions' summaries. A
message belongs to a logged run when its timestamp falls between the run's start and end.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Blueprint, render_template, request
from pydantic import ValidationError

from ..errors import LedgerError
from ..ledger.policy import settled_cost
from ..ledger.store import WINDOWS, periods
from ..results import RunUsage
from ..sessions.runlog_base import RunInfo
from ..transcript import COMPACTION_ROLE, as_compaction
from ..types import Usage, role_of

if TYPE_CHECKING:
    from ..ledger import Ledger


@dataclass
class SessionSpend:
    """What a session's requests cost: dollars at the catalog's prices, and tokens of every
    kind (input, output, cache reads and writes), as the ledger counts them."""

    usd: float = 0.0
    tokens: int = 0

    def add(self, usage: Usage) -> None:
        usd, tokens = settled_cost(usage)
        self.usd += usd
        self.tokens += tokens


def recorded_usage(message: Any) -> tuple[Usage | None, Any]:
    """The usage a stored message records, and its timestamp: a reply's, a tool result's (a
    sub-agent's run), a compaction's (its summary request; a session loads it as a dict);
    ``None`` for none."""
    if role_of(message) == COMPACTION_ROLE:
        try:
            record = as_compaction(message)
        except ValidationError:
            return None, None
        return record.usage, record.timestamp
    usage = getattr(message, "usage", None)
    return (usage if isinstance(usage, Usage) else None), getattr(message, "timestamp", None)


def _logged_usage(run: RunInfo) -> RunUsage | None:
    """The usage a run's end record carries, or ``None`` (running, died, or an end written by
    something that did not say)."""
    end = run.end or {}
    if run.live or run.ended_ms is None or not isinstance(end.get("usage"), dict):
        return None
    try:
        return RunUsage.model_validate(end["usage"])
    except ValidationError:
        return None


def session_spend(messages: Sequence[Any], runs: Sequence[RunInfo]) -> SessionSpend:
    """A session's spend from its ``messages`` and the ``runs`` of it the run log holds (see
    the module: each logged run's end record, the transcript for the rest)."""
    spend = SessionSpend()
    spans: list[tuple[int, int]] = []
    for run in runs:
        logged = _logged_usage(run)
        if logged is not None and run.ended_ms is not None:
            spend.add(logged)
            spans.append((run.started_ms, run.ended_ms))
    spans.sort()
    starts = [start for start, _ in spans]
    for message in messages:
        usage, stamp = recorded_usage(message)
        if usage is None:
            continue
        if isinstance(stamp, int):
            at = bisect.bisect_right(starts, stamp) - 1
            if at >= 0 and stamp <= spans[at][1]:
                continue  # counted in its run's end record
        spend.add(usage)
    return spend


def ledger_pages(ledger: Ledger) -> Blueprint:
    """The ``/spend`` page: the ledger's spend by key in the current hour, day and month and in
    all, with what live reservations hold (``?prefix=`` keeps the keys that start with it)."""
    pages = Blueprint("spend", __name__)

    @pages.app_context_processor
    def has_ledger() -> dict[str, Any]:
        return {"ledger_page": True}

    @pages.get("/spend")
    def spend() -> str:
        prefix = request.args.get("prefix", "").strip()
        now = periods(ledger.clock())
        tables, problem = [], None
        try:
            for window in WINDOWS:
                rows = ledger.spend(window, prefix=prefix or None)
                tables.append({"window": window, "period": now[window], "rows": rows})
        except LedgerError as exc:  # the store is down: say so, keep serving
            problem = str(exc)
        return render_template("spend.html", tables=tables, prefix=prefix, problem=problem)

    return pages
