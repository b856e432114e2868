"""The command line's session parts: ``agentkit chat --session NAME`` and
``agentkit sessions list|show|export|import|rm|approvals|approve|deny`` (wired into the parser
in :mod:`agentkit.cli.app`)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from ..errors import ApprovalError
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
    sessions = commands.add_parser(
        "sessions", help="list, show, export, import or remove sessions; decide approvals"
    )
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
    actions.add_parser(
        "approvals", help="the tool calls that wait for a decision"
    ).add_argument("name")
    approve = actions.add_parser("approve", help="approve a waiting tool call")
    deny = actions.add_parser("deny", help="deny a waiting tool call (the model reads why)")
    for decide in (approve, deny):
        decide.add_argument("name")
        decide.add_argument("call_id", help="the tool call's id (see 'approvals')")
        decide.add_argument("--reason", help="why (the model reads a denial's reason)")
    approve.add_argument(
        "--arguments", type=_json_object, help="run the call with these arguments (a JSON object)"
    )
    approve.add_argument(
        "--expires-in", type=float, metavar="SECONDS",
        help="deny the call if it has not resumed within SECONDS",
    )  # fmt: skip


def session_for(args: argparse.Namespace) -> Session | None:
    """The session ``agentkit chat --session NAME`` runs on, or ``None``."""
    name = getattr(args, "session", None)
    return Session(name, args.store) if name else None


def run_sessions_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Carry out ``agentkit sessions ...``; return the exit status."""
    try:
        with open_store(args.store) as store:
            if args.action == "list":
                found = store.list()
                for info in found:
                    when = datetime.fromtimestamp(info.updated_ms / 1000, timezone.utc)
                    stdout.write(f"{info.name}\t{info.messages} messages\t{when:%Y-%m-%d %H:%M}Z\n")
                if not found:  # on stderr: stdout lists sessions, one a line, for scripts
                    stderr.write(f"agentkit: no sessions in {store.display_url}\n")
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
                stdout.write(f"removed session {args.name}\n")
                return 0
            if not store.load(args.name)[0]:
                raise SessionError(f"no session named {args.name!r}")
            if args.action in ("approvals", "approve", "deny"):
                return _approvals_command(args, session, stdout)
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
    except (SessionError, ApprovalError, OSError, ValueError) as exc:
        stderr.write(f"agentkit: {exc}\n")
        return 1


def _approvals_command(args: argparse.Namespace, session: Session, stdout: TextIO) -> int:
    """List the session's waiting calls (id, tool, arguments, when asked), or decide one."""
    if args.action == "approvals":
        for request in session.pending_approvals():
            when = datetime.fromtimestamp(request.requested_at, timezone.utc)
            shown = json.dumps(request.arguments, ensure_ascii=False)
            stdout.write(f"{request.id}\t{request.tool_name}\t{shown}\t{when:%Y-%m-%d %H:%M}Z\n")
        return 0
    if args.action == "approve":
        session.approve(
            args.call_id, args.reason, arguments=args.arguments, expires_in=args.expires_in
        )
    else:
        session.deny(args.call_id, args.reason)
    stdout.write(f"{args.action}d {args.call_id}; resume the session's run to apply it\n")
    return 0


def _json_object(text: str) -> dict[str, Any]:
    """An argument type: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object, e.g. '{\"path\": \"a.txt\"}'")
    return value


def _summary(message: Any) -> str:
    """One line for a message: its text, and its tool calls by name (an approval entry: the
    call it is about, and the decision)."""
    entry = _approval_summary(message)
    if entry is not None:
        return entry
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
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


def _approval_summary(message: Any) -> str | None:
    """One line for an approval entry (:mod:`agentkit.deferred`), ``None`` for a message."""
    from ..deferred import ApprovalDecisionEntry, ApprovalRequestEntry, ApprovalResumeEntry

    if isinstance(message, ApprovalRequestEntry):
        shown = json.dumps(message.arguments, ensure_ascii=False)
        held = " (held for the calls before it)" if message.held else ""
        return f"[{message.tool_name}({message.tool_call_id})] {shown}{held}"
    if isinstance(message, ApprovalDecisionEntry):
        verdict = "approved" if message.approved else "denied"
        reason = f": {message.reason}" if message.reason else ""
        edited = " with edited arguments" if message.arguments is not None else ""
        return f"{message.tool_call_id} {verdict}{edited}{reason}"
    if isinstance(message, ApprovalResumeEntry):
        return "resumed " + ", ".join(message.tool_call_ids)
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: agentkit sessions ...")
