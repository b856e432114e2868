"""``agentkit ledger``: what each key spent in a window, from a spend ledger's store
(:mod:`agentkit.ledger`; wired into the parser in :mod:`agentkit.cli.app`)."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any, TextIO

from ..errors import LedgerError

LEDGER_HELP = "the ledger's store: a redis:// or postgresql:// URL (default: $AGENTKIT_LEDGER)"

_PERIOD = re.compile(r"\d{4}-\d{2}(-\d{2}(T\d{2})?)?|total")


def add_ledger_command(commands: Any) -> None:
    """The ``agentkit ledger`` command."""
    ledger = commands.add_parser(
        "ledger", help="what each key spent (USD, tokens, requests) in an hour, day or month"
    )
    ledger.add_argument("--store", help=LEDGER_HELP)
    ledger.add_argument(
        "--window", choices=("hour", "day", "month", "total"), default="day",
        help="the window to list, the current one (default: day)",
    )  # fmt: skip
    ledger.add_argument(
        "--period", help="a past period instead: 2026-12 (a month), 2026-12-03, 2026-12-03T07"
    )
    ledger.add_argument("--prefix", help="only the keys that start with this (tenant:acme/)")
    ledger.add_argument("--json", action="store_true", help="one JSON object per key")


def shared_store(url: str | None, option: str) -> str:
    """The URL of the ledger store another process may read (``url``, else $AGENTKIT_LEDGER);
    :class:`LedgerError` when there is none, or it names this process's memory."""
    url = url or os.environ.get("AGENTKIT_LEDGER", "")
    if not url:
        raise LedgerError(f"no ledger store: give {option} URL or set AGENTKIT_LEDGER")
    if url.startswith("memory://"):
        raise LedgerError("a memory:// ledger lives in its own process: give its store's URL")
    return url


def run_ledger_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Carry out ``agentkit ledger``; return the exit status."""
    from ..ledger import Ledger

    try:
        url = shared_store(args.store, "--store")
        if args.period is not None and not _PERIOD.fullmatch(args.period):
            raise LedgerError(
                f"--period is a month (2026-12), a day (2026-12-03), an hour (2026-12-03T07) "
                f"or total, not {args.period!r}"
            )
        with Ledger(url) as ledger:
            if args.period is not None:
                rows = ledger.store.spend(args.period, args.prefix)
            else:
                rows = ledger.spend(args.window, prefix=args.prefix)
    except LedgerError as exc:
        stderr.write(f"agentkit: {exc}\n")
        return 1
    for row in rows:
        if args.json:
            stdout.write(json.dumps(row.__dict__) + "\n")
        else:
            held = f"\theld ${row.held_usd:.4f}" if row.held_usd or row.held_tokens else ""
            stdout.write(
                f"{row.key}\t{row.period}\t${row.usd:.4f}\t{row.tokens} tokens\t"
                f"{row.requests} requests{held}\n"
            )
    return 0
