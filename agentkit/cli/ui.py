"""``agentkit ui``: serve the local web page over a session store until Ctrl-C.

The chat box prompts sessions with the agent ``--agent module:factory`` names (the factory
takes the :class:`~agentkit.sessions.Session` and returns an ``Agent`` made with it, as for
``agentkit.integrations.celery``), or else with the command's own agent: the workspace tools in
``--workspace`` on the model ``--model`` picks (the embedded model when no key is set).
"""

from __future__ import annotations

import argparse
import importlib
import io as _io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._extras import needs_extra
from ..agent import Agent
from ..errors import CliError, LedgerError
from ..loop import StreamFn
from ..sessions import Session, open_store
from ..types import Model
from .console import Console
from .sessions import STORE_HELP

if TYPE_CHECKING:
    from ..ledger import Ledger


def add_ui_command(commands: Any, common: argparse.ArgumentParser) -> None:
    """The ``agentkit ui`` command."""
    ui = commands.add_parser(
        "ui",
        parents=[common],
        help="a local web page: sessions, live runs, a chat box",
        description="Serve a web page on 127.0.0.1 until Ctrl-C: the sessions of a store, runs "
        "as they happen (steer or abort them), the approvals that wait, and a chat box. The "
        "page's link carries a secret made for this launch. Needs the ui extra.",
    )
    ui.add_argument("--store", help=STORE_HELP)
    ui.add_argument(
        "--agent",
        metavar="MODULE:FACTORY",
        help="the chat box's agent: FACTORY(session) -> Agent (default: this command's own)",
    )
    ui.add_argument(
        "--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)"
    )
    ui.add_argument("--redis", metavar="URL", help="follow and steer runs on Celery workers")
    ui.add_argument("--reports", metavar="DIR",
                    help="show the evaluation reports in DIR (what agentkit eval --save writes)")  # fmt: skip
    ui.add_argument(
        "--ledger", metavar="URL",
        help="a spend ledger's store (redis:// or postgresql://) to show by key and window on "
        "/spend (default: $AGENTKIT_LEDGER)",
    )  # fmt: skip


def factory_from_spec(spec: str) -> Any:
    """The callable ``module:attribute`` names; :class:`CliError` saying what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"--agent takes MODULE:FACTORY, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise CliError(f"{module_name!r} has no callable {attribute!r}")
    return factory


def open_ledger(url: str | None) -> Ledger | None:
    """The spend ledger ``--ledger`` (else $AGENTKIT_LEDGER) names, or ``None`` for none;
    :class:`CliError` for a URL no other process can share or no store serves."""
    if not (url or os.environ.get("AGENTKIT_LEDGER")):
        return None
    from ..ledger import Ledger
    from .ledger import shared_store

    try:
        return Ledger(shared_store(url, "--ledger"))
    except LedgerError as exc:
        raise CliError(str(exc)) from None


def run_ui_command(
    args: argparse.Namespace, io: Console, stream_fn: StreamFn | None, model: Model | None
) -> int:
    """Serve the page until Ctrl-C; return the exit status."""
    try:
        from ..ui import UiServer
    except ImportError as exc:
        raise CliError(f"{needs_extra('the page', 'ui')} ({exc})") from None
    reports = _reports_folder(args.reports)
    ledger = open_ledger(args.ledger)
    store = open_store(args.store)
    if args.agent:
        build = factory_from_spec(args.agent)
    else:
        build = _own_agent(args, io, stream_fn, model)
    try:
        server = UiServer(store, port=args.port, build_agent=build, redis_url=args.redis,
                          reports=reports, ledger=ledger)  # fmt: skip
    except OSError as exc:
        store.close()
        if ledger is not None:
            ledger.close()
        raise CliError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}") from None
    io.out(f"agentkit ui: sessions in {store.url}")
    if reports is not None:
        io.out(f"agentkit ui: evaluation reports in {reports}")
    io.out(f"agentkit ui: open {server.url}")
    io.out("agentkit ui: (the link carries this launch's secret; Ctrl-C stops the page)")
    try:
        server.serve_forever()  # Werkzeug's loop ends quietly on Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        store.close()
        if ledger is not None:
            ledger.close()
    io.err("agentkit ui: stopped")
    return 0


def _reports_folder(text: str | None) -> Path | None:
    """The folder ``--reports`` names, which must exist (a typo would show an empty list)."""
    if text is None:
        return None
    folder = Path(text).expanduser().resolve()
    if not folder.is_dir():
        raise CliError(f"--reports: no folder {text!r}")
    return folder


def _own_agent(
    args: argparse.Namespace, io: Console, stream_fn: StreamFn | None, model: Model | None
) -> Any:
    """The command's own agent, made per session; its terminal printers write nowhere (the page
    shows the run), and a tool that needs approval is refused unless ``--yes`` was given."""
    from .agent_setup import build_agent

    def build(session: Session) -> Agent:
        quiet = Console(_io.StringIO(), open(os.devnull, "w"), io.stderr)  # noqa: SIM115
        options = argparse.Namespace(**vars(args))
        options.session, options.store = session.name, session.store.url
        agent = build_agent(options, quiet, stream_fn, model)
        agent.add_close_callback(quiet.stdout.close)
        return agent

    return build
