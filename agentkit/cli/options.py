"""The options ``agentkit run`` and ``agentkit chat`` share, and the argument types they use."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argument type: a whole number of at least 1, with a readable complaint otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def harness_setting(text: str) -> str:
    """An argument type: ``auto``, ``on``, ``off`` or harness policy names, comma-separated
    (:data:`agentkit.harness.HARNESS_POLICIES`), with a readable complaint otherwise."""
    from ..harness import HARNESS_POLICIES

    value = text.strip().lower()
    if value in ("auto", "on", "off"):
        return value
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in HARNESS_POLICIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected auto, on, off or some of {','.join(HARNESS_POLICIES)}; got {text!r}"
        )
    return ",".join(names)


def common_options() -> argparse.ArgumentParser:
    """A parent parser with the options of a run: the model, the tools, the workspace, the
    output format, the budget, the local model's server and the MCP servers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        help="provider:model-id (e.g. openai:gpt-4.1-mini, anthropic:claude-sonnet-4-5); "
        "local for the default embedded model, local:qwen2.5-coder-0.5b or "
        "local:qwen2.5-coder-1.5b for one by name, local:PATH.gguf for a GGUF file; default: a "
        "configured provider, else the embedded model",
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
    common.add_argument(
        "--allow", action="append", default=[], metavar="TOOL[,TOOL]",
        help="an approval rule: run these tools without asking (repeatable)",
    )  # fmt: skip
    common.add_argument("--json", action="store_true", help="print one JSON event per line")
    common.add_argument(
        "--max-turns", type=positive_int, default=None, help="stop after N turns (N >= 1)"
    )
    common.add_argument(
        "--harness",
        type=harness_setting,
        default="auto",
        metavar="auto|on|off|NAMES",
        help="the harness around a small model (a task checklist, a completion check, a "
        "guard on repeated calls, a re-read after each write, hints on a failed edit, a "
        "table's column facts; see docs/harness.md): 'auto' (default) for the embedded model "
        "only, 'on' for any model, 'off', or names "
        "(checklist,completion,repeats,verify,hints,tables)",
    )
    common.add_argument(
        "--tool-search",
        choices=("auto", "on", "off"),
        default="auto",
        help="show many tools as a catalog and a search tool (docs/tool-search.md): 'auto' "
        "(default) above 20 tools, 'on' also when the tools take a quarter of the window, 'off'",
    )
    common.add_argument(
        "--output-limit",
        choices=("auto", "on", "off"),
        default="auto",
        help="keep a tool result too large for the window whole and show the model a preview "
        "and a tool to read the rest (docs/context.md): 'auto' (default) for a model with a "
        "small window (the embedded one), 'on' for any model, 'off'",
    )
    common.add_argument(
        "--ctx-size",
        type=positive_int,
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
    common.add_argument(
        "--mcp-header", action="append", default=[], metavar="'NAME: VALUE'",
        help="send this header to every --mcp-url server, e.g. "
        "\"Authorization: Bearer $TOKEN\" (repeatable)",
    )  # fmt: skip
    return common
