"""The command line's session parts: ``agentkit chat --session NAME`` and
``agentkit sessions list|show|export|import|rm`` (wired into the parser in :mod:`agentkit.cli.app`)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from ..sessions import import_jsonl
from ..sessions.base import SessionError
from ..sessions.session import Session, open_store
from ..types import role_of

STORE_HELP = "the session store: a SQLite path or a sqlite:// redis:// postgresql:// URL " \
    "(default: $AGENTKIT_SESSIONS, else ~/.agentkit/sessions.db)"  # fmt: skip


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """``--session NAME`` and ``--store URL`` for ``agentkit chat``."""
    parser.add_argument("--session", help="keep the conversation in this session, resuming it")
    parser.add_argument("--store", help=STORE_HELP)


def add_sessions_command(commands: Any) -> None:
    """The ``agentkit sessions`` command and its sub-commands."""
    sessions = commands.add_parser("sessions", help="list, show, export, import or remove sessions")
    sessions.add_argument("--store", help=STORE_HELP)
    actions = sessions.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every session, with its size and last change")
    actions.add_parser("show", help="print a session's messages").add_argument("name")
    export = actions.add_parser("export", help="write a session as JSONL")
    export.add_argument("name")
    export.add_argument("-o", "--output", help="the file to write (default: standard output)")
    load = actions.add_parser("import", help="read a JSONL export into a new session")
    load.add_argument("file")
    load.add_argument("--name", help="the new session's name (default: the exported name)")
    actions.add_parser("rm", help="remove a session").add_argument("name")


def session_for(args: argparse.Namespace) -> Session | None:
    """The session ``agentkit chat --session NAME`` runs on, or ``None``."""
    name = getattr(args, "session", None)
    return Session(name, args.store) if name else None


def run_sessions_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Carry out ``agentkit sessions ...``; return the exit status."""
    try:
        with open_store(args.store) as store:
            if args.action == "list":
                for info in store.list():
                    when = datetime.fromtimestamp(info.updated_ms / 1000, timezone.utc)
                    stdout.write(f"{info.name}\t{info.messages} messages\t{when:%Y-%m-%d %H:%M}Z\n")
                return 0
            if args.action == "import":
                with open(args.file, encoding="utf-8") as file:
                    session = import_jsonl(store, file, args.name)
                stdout.write(f"imported {session.version} messages as {session.name}\n")
                return 0
            session = Session(args.name, store)
            if args.action == "rm":
                if not session.delete():
                    raise SessionError(f"no session named {args.name!r}")
                return 0
            if not store.load(args.name)[0]:
                raise SessionError(f"no session named {args.name!r}")
            if args.action == "export":
                if args.output:
                    with open(args.output, "w", encoding="utf-8") as file:
                        session.export_jsonl(file)
                else:
                    session.export_jsonl(stdout)
                return 0
            for message in session.load():  # show
                stdout.write(f"{role_of(message)}: {_summary(message)}\n")
            return 0
    except (SessionError, OSError, ValueError) as exc:
        stderr.write(f"agentkit: {exc}\n")
        return 1


def _summary(message: Any) -> str:
    """One line for a message: its text, and its tool calls by name."""
    content = message.get("content") if isinstance(message, dict) else message.content
    if isinstance(content, str):
        return content.replace("\n", " ")
    parts = []
    for block in content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text.replace("\n", " "))
        elif kind == "tool_call":
            parts.append(f"[{block.name}({block.id})]")
        elif kind == "image":
            parts.append("[image]")
        elif kind == "thinking":
            parts.append("[thinking]")
    if getattr(message, "is_error", False):
        parts.insert(0, "(error)")
    return " ".join(parts)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: agentkit sessions ...")
