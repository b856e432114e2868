"""``agentkit server status|start|stop``: the embedded models' servers kept between runs, one
per model (:mod:`agentkit.local.kept`)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from .console import EXIT_INTERRUPTED, Console
from .options import positive_int

MODEL_HELP = (
    "which model: an embedded one by name (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b) or a GGUF "
    "file; default: the default embedded model"
)


def add_server_command(commands: Any) -> None:
    """The ``agentkit server`` command and its sub-commands."""
    server = commands.add_parser(
        "server",
        help="show, start or stop the kept local model servers",
        description="Each embedded model's server is kept running between runs, one per user "
        "and model, and ends itself after AGENTKIT_SERVER_IDLE seconds (default 600) without "
        "use.",
    )
    actions = server.add_subparsers(dest="action", required=True)
    actions.add_parser("status", help="which run: their pids, addresses, models and idle time")
    start = actions.add_parser("start", help="start one now (if it is not running)")
    start.add_argument("--model", metavar="NAME|PATH.gguf", help=MODEL_HELP)
    start.add_argument(
        "--ctx-size", type=positive_int, default=None, help="its context size in tokens"
    )
    stop = actions.add_parser("stop", help="stop them (or the one of --model)")
    stop.add_argument("--model", metavar="NAME|PATH.gguf", help="stop this model's only")


def run_server_command(args: argparse.Namespace, io: Console) -> int:
    """Carry out ``agentkit server status|start|stop``; return the exit status."""
    if os.name != "posix":
        io.err("agentkit: the kept local model server needs a POSIX system")
        return 2
    from .. import local
    from ..local.kept import kept_server, stop_kept_servers
    from .model_choice import local_model_file

    model = getattr(args, "model", None)
    model = model.removeprefix("local:") if model else None
    try:
        path = local_model_file(model, join=args.action == "start") if model else None
        if args.action == "stop":
            stopped = stop_kept_servers(path)
            for state in stopped:
                io.out(f"agentkit server: stopped (pid {state.pid}, {_model_name(state)})")
            if not stopped:
                io.out("agentkit server: not running")
            return 0
        if args.action == "start":
            server = kept_server(
                n_ctx=args.ctx_size,
                model_path=path,
                on_start=lambda: io.err("agentkit: starting the server..."),
            )
            server.stop()  # let go of it: it stays, for the runs to come
    except local.LocalModelError as exc:
        io.err(f"agentkit: {exc}")
        return 1
    except KeyboardInterrupt:
        io.err("agentkit: interrupted")
        return EXIT_INTERRUPTED
    return _status(io)


def _model_name(state: Any) -> str:
    return Path(state.spec.get("model", "?")).name


def _status(io: Console) -> int:
    """Print which kept servers run, and how; exit status 0 when one does."""
    from ..local.kept import kept_states, server_dir, stale_reason

    running = 0
    for directory, state in kept_states():
        problem = stale_reason(state)
        if problem is not None:
            io.out(f"agentkit server: {_model_name(state)}: not running ({problem})")
            continue
        running += 1
        ago = max(0.0, time.time() - state.started_at)
        io.out(
            f"agentkit server: running, pid {state.pid}, {state.url}\n"
            f"  model {_model_name(state)}, context {state.spec['n_ctx']} tokens\n"
            f"  up {ago / 60:.0f} min; ends after {state.idle_s:g} s without a request or a "
            f"connected run\n"
            f"  files in {directory} (log: server.log)"
        )
    if not running:
        io.out(f"agentkit server: not running (no server was started); files in {server_dir()}")
        return 1
    return 0
