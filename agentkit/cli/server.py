"""``agentkit server status|start|stop``: the embedded model's server kept between runs
(:mod:`agentkit.local.kept`)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from .console import EXIT_INTERRUPTED, Console
from .options import positive_int


def add_server_command(commands: Any) -> None:
    """The ``agentkit server`` command and its sub-commands."""
    server = commands.add_parser(
        "server",
        help="show, start or stop the kept local model server",
        description="The embedded model's server is kept running between runs, one per user, "
        "and ends itself after AGENTKIT_SERVER_IDLE seconds (default 600) without use.",
    )
    actions = server.add_subparsers(dest="action", required=True)
    actions.add_parser("status", help="whether it runs: its pid, address, model and idle time")
    start = actions.add_parser("start", help="start it now (if it is not running)")
    start.add_argument(
        "--ctx-size", type=positive_int, default=None, help="its context size in tokens"
    )
    actions.add_parser("stop", help="stop it")


def run_server_command(args: argparse.Namespace, io: Console) -> int:
    """Carry out ``agentkit server status|start|stop``; return the exit status."""
    if os.name != "posix":
        io.err("agentkit: the kept local model server needs a POSIX system")
        return 2
    from .. import local
    from ..local.kept import kept_server, stop_kept_server

    try:
        if args.action == "stop":
            stopped = stop_kept_server()
            io.out(f"agentkit server: stopped (pid {stopped.pid})" if stopped else
                   "agentkit server: not running")  # fmt: skip
            return 0
        if args.action == "start":
            server = kept_server(
                n_ctx=args.ctx_size, on_start=lambda: io.err("agentkit: starting the server...")
            )
            server.stop()  # let go of it: it stays, for the runs to come
    except local.LocalModelError as exc:
        io.err(f"agentkit: {exc}")
        return 1
    except KeyboardInterrupt:
        io.err("agentkit: interrupted")
        return EXIT_INTERRUPTED
    return _status(io)


def _status(io: Console) -> int:
    """Print whether the kept server runs, and how; exit status 0 when it does."""
    from ..local.kept import read_state, server_dir, stale_reason

    state = read_state()
    problem = stale_reason(state) if state is not None else "no server was started"
    if state is None or problem is not None:
        io.out(f"agentkit server: not running ({problem}); files in {server_dir()}")
        return 1
    ago = max(0.0, time.time() - state.started_at)
    io.out(
        f"agentkit server: running, pid {state.pid}, {state.url}\n"
        f"  model {Path(state.spec['model']).name}, context {state.spec['n_ctx']} tokens\n"
        f"  up {ago / 60:.0f} min; ends after {state.idle_s:g} s without a request or a "
        f"connected run\n"
        f"  files in {server_dir()} (log: server.log)"
    )
    return 0
