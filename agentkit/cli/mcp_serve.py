"""``agentkit mcp serve module:factory``: an agent (or a list of tools) as an MCP server, over
stdio (the default: what Claude Desktop and IDEs launch) or streamable HTTP (``--http``).

``module:factory`` names a callable (or a list) the way uvicorn names an app: ``module`` is
imported with the current folder on the path (``path/to/file.py`` works too) and ``factory``
is an attribute of it:

- a function returning an :class:`~agentkit.Agent`: served as one tool taking a ``task``
  (:func:`~agentkit.integrations.mcp_server.agent_tool`); it is called for each task, so every
  task runs on a fresh agent;
- a function returning a list of :class:`~agentkit.AgentTool` objects, or such a list: the
  tools are served as they are.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from ..errors import CliError, MCPServerError
from ..types import AgentTool
from .console import EXIT_INTERRUPTED, Console
from .options import positive_int


def add_mcp_command(commands: Any) -> None:
    """The ``agentkit mcp`` command and its ``serve`` sub-command."""
    mcp = commands.add_parser("mcp", help="serve an agent or tools over MCP")
    actions = mcp.add_subparsers(dest="action", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve module:factory as an MCP server (stdio, or --http)",
        description="Serve an agent (a factory returning an Agent: one tool taking a task) or "
        "a list of tools (a factory returning AgentTools) as an MCP server.",
    )
    serve.add_argument("target", metavar="module:factory", help="what to serve")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    serve.add_argument("--port", type=positive_int, default=8000, help="HTTP port (default 8000)")
    serve.add_argument("--name", default="agentkit", help="the server's name for clients")
    serve.add_argument(
        "--tool-name", default="run_agent", help="the agent's tool name (default run_agent)"
    )


def run_mcp_command(args: argparse.Namespace, io: Console) -> int:
    """Carry out ``agentkit mcp serve``; return the exit status."""
    from ..integrations.mcp_server import serve

    try:
        tools = load_tools(args.target, args.tool_name)
        if args.http:
            serve(
                tools,
                transport="http",
                host=args.host,
                port=args.port,
                name=args.name,
                on_listening=lambda url: io.err(f"agentkit: serving MCP at {url}"),
            )
        else:
            serve(tools, transport="stdio", name=args.name)
    except (CliError, MCPServerError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0


def load_tools(target: str, tool_name: str = "run_agent") -> list[AgentTool]:
    """The tools ``module:factory`` stands for (see the module); raises :class:`CliError`."""
    from ..agent import Agent
    from ..integrations.mcp_server import agent_tool

    found = _resolve(target)
    made = found() if callable(found) else found
    if isinstance(made, Agent):
        made.close()  # a sample, to see what the factory makes; each task gets its own
        return [agent_tool(found, name=tool_name)]
    if isinstance(made, (list, tuple)) and made and all(isinstance(t, AgentTool) for t in made):
        return list(made)
    raise CliError(
        f"{target} must be a function returning an Agent or a list of AgentTools, "
        f"or such a list; it gave {type(made).__name__}"
    )


def _resolve(target: str) -> Any:
    module_name, _, attribute = target.rpartition(":")
    if not module_name or not attribute:
        raise CliError(f"expected module:factory, got {target!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise CliError(f"cannot load {module_name}: no such file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CliError(f"cannot import {module_name}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise CliError(f"{module_name} has no attribute {attribute!r}") from None
