"""The agent a command runs: its system prompt, its workspace tools (compact ones for a small
model), approvals on the terminal, the printers subscribed to it, and the MCP servers it
was given."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..budgets import DEFAULT_MAX_TURNS, Budgets
from ..errors import AgentError, CliError
from ..loop import StreamFn
from ..policy import RunPolicy
from ..tools import AgentTool
from ..types import Model, role_of
from .approval import terminal_approvals
from .console import Console
from .model_choice import choose_model
from .render import JsonPrinter, Progress, TextPrinter
from .sessions import session_for

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

# The embedded model has a 4,096-token context: keep what one tool call returns small.
SMALL_CONTEXT = 8192
SMALL_READ_CHARS = 6000
SMALL_OUTPUT_CHARS = 4000


def check_tools(spec: str) -> None:
    """Refuse unknown ``--tools`` names before anything slow starts."""
    from ..workspace import TOOL_NAMES

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


def allowed(specs: list[str]) -> set[str]:
    """The tools ``--allow`` approves without asking (unknown names refused)."""
    from ..workspace import TOOL_NAMES

    names = {name.strip() for spec in specs for name in spec.split(",") if name.strip()}
    unknown = sorted(names - set(TOOL_NAMES))
    if unknown:
        raise CliError(
            f"--allow: unknown tool(s) {', '.join(unknown)}; available: {', '.join(sorted(TOOL_NAMES))}"
        )
    return names


def _is_small(model: Model) -> bool:
    """Whether ``model`` has a small context (the embedded one): tools and prompt are cut down."""
    return 0 < model.context_window <= SMALL_CONTEXT


def _select_tools(spec: str, workspace: Path, model: Model) -> list[AgentTool]:
    """The workspace tools ``--tools`` names, each with argument repair."""
    from ..local.repair import with_argument_repair
    from ..workspace import compact_tools, workspace_tools

    check_tools(spec)
    if _is_small(model):
        tools = workspace_tools(
            workspace,
            max_read_chars=SMALL_READ_CHARS,
            max_output_chars=SMALL_OUTPUT_CHARS,
            read_before_overwrite=True,
        )
        tools = compact_tools(tools)
    else:
        tools = workspace_tools(workspace)
    tools = [with_argument_repair(t) for t in tools]
    if spec == "all":
        return tools
    if spec == "none":
        return []
    known = {t.name: t for t in tools}
    return [known[name.strip()] for name in spec.split(",") if name.strip()]


def _sandbox_warnings(tools: list[AgentTool]) -> dict[str, str]:
    """What the approval question of ``run_command`` says about where it runs."""
    from ..workspace import is_sandboxed

    return {
        t.name: (
            " (sandboxed: read-only system, no network)"
            if is_sandboxed(t)
            else " (not sandboxed: it runs with your permissions)"
        )
        for t in tools
        if t.name == "run_command"
    }


BUSY_TEXT = "agentkit: the model server is busy with another run; this request waits its turn"
"""Said once a run when the kept server is serving another process's request (``ServerTurns``)."""


def _server_turns(io: Console, agent: Agent) -> None:
    """With a kept server: say so when it is busy with another process's request as this run
    sends one (:mod:`agentkit.local.busy`), instead of a silent wait."""
    directory = getattr(io.local_server, "directory", None)
    if directory is None:
        return
    from ..events import AgentEndEvent, AgentStartEvent, MessageEndEvent
    from ..local.busy import ServerTurns

    turns = io.server_turns = ServerTurns(directory, lambda: io.err(BUSY_TEXT))
    inner = agent.stream_fn

    def stream(model: Model, context: Any, options: Any) -> Any:
        turns.sending()
        return inner(model, context, options)

    def follow(event: Any) -> None:
        if isinstance(event, AgentStartEvent):
            turns.new_run()
        elif isinstance(event, AgentEndEvent) or (
            isinstance(event, MessageEndEvent) and role_of(event.message) == "assistant"
        ):
            turns.answered()

    agent.stream_fn = stream
    agent.subscribe(follow)


def _stream_fn_for(
    stream_fn: StreamFn | None, embedded: bool, small: bool, workspace: Path
) -> StreamFn | None:
    """``stream_fn`` with what the embedded (``embedded``) or a small model needs to call tools
    reliably."""
    if embedded:
        # The embedded server: tools declared in text, calls constrained by a grammar and
        # read back from the reply's text (the server's own parser fails on fenced calls).
        from ..local import with_constrained_tool_calls
        from ..local.looking import with_look_first

        stream_fn = with_constrained_tool_calls(stream_fn)
        # A task that names a workspace file or a command gets a tool call before an answer.
        stream_fn = with_look_first(stream_fn, workspace)
    if small:  # a small model writes a call as text now and then, often in a code fence
        from ..local.repair import with_text_tool_calls

        stream_fn = with_text_tool_calls(stream_fn)
    return stream_fn


def _harness(setting: str, embedded: bool, workspace: Path) -> list[RunPolicy]:
    """The harness policies ``--harness`` asks for (``auto``: all of them for the embedded
    model, none for another)."""
    from ..harness import HARNESS_POLICIES, harness_policies

    if setting == "off" or (setting == "auto" and not embedded):
        return []
    names = HARNESS_POLICIES if setting in ("auto", "on") else tuple(setting.split(","))
    return harness_policies(workspace, names)


def _tool_search(setting: str, tools: list[AgentTool], small: bool) -> list[RunPolicy]:
    """The tool search ``--tool-search`` asks for; the workspace tools stay declared in full,
    and a small model is given the three best matches of its task at once."""
    from ..context.search import DEFAULT_MAX_SHARE, ToolSearch

    if setting == "off":
        return []
    share = None if setting == "auto" else DEFAULT_MAX_SHARE
    keep = [t.name for t in tools]
    return [ToolSearch(max_share=share, keep=keep, preload=3 if small else 0, first_call=small)]


def _output_limit(setting: str, small: bool) -> list[RunPolicy]:
    """The tool-output limit ``--output-limit`` asks for: by default for a small model, a
    result above a quarter of its window is kept whole and previewed, and the model is asked
    to read it (``docs/context.md``, measured there)."""
    if setting == "off" or (setting == "auto" and not small):
        return []
    from ..context import ToolOutputLimit

    return [ToolOutputLimit(read_after_cut=small)]


def build_agent(
    args: argparse.Namespace, io: Console, stream_fn: StreamFn | None, model: Model | None
) -> Agent:
    """The agent for ``agentkit run``/``chat`` with these arguments; ``model`` and ``stream_fn``
    are the caller's seams (a scripted model in tests), else the model is chosen here."""
    from ..local.repair import stop_repeated_failures
    from ..workspace import MUTATING_TOOLS

    io.json = args.json
    io.keep_server = args.keep_server
    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {args.workspace!r} is not a folder")
    chosen = model or choose_model(args.model, args.base_url, io, ctx_size=args.ctx_size)
    if args.ctx_size is not None and model is None and chosen.provider != "local":
        raise CliError("--ctx-size applies to the local model only (--model local)")
    tools = _select_tools(args.tools, workspace, chosen)
    small = _is_small(chosen)
    system = args.system or (SMALL_MODEL_SYSTEM_PROMPT if small else DEFAULT_SYSTEM_PROMPT)
    io.prefix = (system, tools)
    embedded = io.local_server is not None and model is None
    agent = Agent(
        model=chosen,
        system_prompt=system,
        tools=tools,
        stream_fn=_stream_fn_for(stream_fn, embedded, small, workspace),
        after_tool_call=stop_repeated_failures(),  # a model that loops on a failure is stopped
        approvals=terminal_approvals(
            io, () if args.yes else MUTATING_TOOLS - allowed(args.allow), _sandbox_warnings(tools)
        ),
        budgets=Budgets(max_turns=args.max_turns or DEFAULT_MAX_TURNS),
        session=session_for(args),
        policies=[
            *_harness(getattr(args, "harness", "auto"), embedded, workspace),
            *_tool_search(getattr(args, "tool_search", "auto"), tools, small),
            *_output_limit(getattr(args, "output_limit", "auto"), small),
        ],
    )
    if embedded:
        _server_turns(io, agent)
    agent.subscribe(Progress(io, args.json))
    agent.subscribe(JsonPrinter(io) if args.json else TextPrinter(io))
    if args.mcp_header and not args.mcp_url:
        raise CliError("--mcp-header goes to --mcp-url servers, and none was given")
    if args.mcp or args.mcp_url:
        from .mcp_servers import attach_mcp_servers, parse_headers

        headers = parse_headers(args.mcp_header)
        try:
            attach_mcp_servers(agent, args.mcp, args.mcp_url, headers)
        except AgentError as exc:
            raise CliError(str(exc)) from None
    return agent
