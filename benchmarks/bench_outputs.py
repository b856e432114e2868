"""A 1 MB tool result on the embedded model, with and without the tool-output limit.

The task: a ``read_log`` tool returns a whole service log (about 1 MB, 12,871 lines; an MCP
tool that does not page, ``tests/mcp_servers/log_server.py``) and the question is about one
line of it ("What error code did order 48213 fail with?"). The answer is right when it names
the code of that line. Without the limit the result goes to the model whole; with it (the
default cap of a quarter of the window) the model reads a preview and the ``read_output`` tool.

Two ways to run it (``--via``):

- ``cli`` (the default): each run is what a user runs, ``agentkit run --model
  local:qwen2.5-coder-1.5b --tools none --yes --json --max-turns 8 --output-limit on|off --mcp
  "python tests/mcp_servers/log_server.py" QUESTION`` in a subprocess: the command's agent for
  the embedded model as it is (its system prompt, harness, constrained calls, argument repair).
- ``api``: the agent is built here in Python, as the command built it before it had a harness
  (its small-model system prompt, constrained tool calls, argument repair, 8 turns, 256 output
  tokens a reply, the first request asked for a tool call), with a ``read_log`` tool of its own.

The model's server is the kept one (``agentkit server``). Each run writes its outcome, stop
reason, error, requests, the input tokens each request reported, the tools called and its time;
the machine's load is written beside each run. Each batch of runs (``--batch``) holds
``/tmp/agentkit-model.lock`` (``flock``) so two never share the model.

Run from the repository root::

    python benchmarks/bench_outputs.py --limit on --runs 10 --out benchmarks/results/context/on.json
    python benchmarks/bench_outputs.py --limit off --runs 10 --out benchmarks/results/context/off.json
    python benchmarks/bench_outputs.py --table benchmarks/results/context/*.json
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentkit import Agent, tool
from agentkit.budgets import Budgets
from agentkit.context import ToolOutputLimit
from agentkit.policy import ModelRequest, RequestHandler, RunPolicy, RunScope
from agentkit.types import AssistantMessage, ToolCall

MODEL = "qwen2.5-coder-1.5b"
MAX_TOKENS = 256
"""The output budget of each reply (a call or a sentence; the server's own is 2,048): on a busy
machine one reply that rambles would otherwise take half an hour."""
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "mcp_servers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli_run import REFUSED, ROOT, read_replies, run_command  # noqa: E402
from log_server import CODE, QUESTION, log_text  # noqa: E402  (the MCP server's own)

LOG_SERVER = ROOT / "tests" / "mcp_servers" / "log_server.py"


class ReadFirst(RunPolicy):
    """Asks the run's first request for a tool call (``tool_choice="required"``), as the CLI's
    look-first step does for a task that names a workspace file: without it the 1.5B model
    often describes the call instead of making it. Both arms get it."""

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        if request.purpose == "turn" and run.result.usage.requests == 0:
            options = request.options.model_copy(update={"tool_choice": "required"})
            request = dataclasses.replace(request, options=options)
        return call_next(request)


def build(limit: bool, log: str) -> Agent:
    """The agent ``agentkit run`` builds for the embedded model, with the log tool."""
    from agentkit.cli.agent_setup import SMALL_MODEL_SYSTEM_PROMPT, _stream_fn_for
    from agentkit.cli.model_choice import local_model_file
    from agentkit.local.kept import kept_server
    from agentkit.local.repair import stop_repeated_failures, with_argument_repair

    @tool
    def read_log() -> str:
        """Read the service's log file (all of it)."""
        return log

    server = kept_server(model_path=local_model_file(MODEL))
    return Agent(
        model=server.model,
        system_prompt=SMALL_MODEL_SYSTEM_PROMPT,
        tools=[with_argument_repair(read_log)],
        stream_fn=_stream_fn_for(None, True, True, Path.cwd()),
        after_tool_call=stop_repeated_failures(),
        budgets=Budgets(max_turns=8),
        max_tokens=MAX_TOKENS,
        policies=[ReadFirst(), *([ToolOutputLimit(read_after_cut=True)] if limit else [])],
    )


LOCK = "/tmp/agentkit-model.lock"
"""Held for each batch of runs (one run of the model at a time, machine-wide)."""


def one_run(limit: bool, log: str) -> dict[str, Any]:
    """One run of the task (the caller holds the model's lock); what it did."""
    agent = build(limit, log)
    started = time.monotonic()
    load = os.getloadavg()[0]
    result = agent.prompt(QUESTION)
    seconds = time.monotonic() - started
    refused = REFUSED.search(result.error_message or "")
    replies = [m for m in result.messages if isinstance(m, AssistantMessage)]
    calls = [f"{c.name}({json.dumps(c.arguments)})" for m in replies for c in m.content
             if isinstance(c, ToolCall)]  # fmt: skip
    answer = result.text or ""
    return {
        "limit": limit,
        "ok": CODE in answer and result.stop_reason == "stop",
        "stop_reason": result.stop_reason,
        "error": (result.error_message or "")[:300] or None,
        "answer": answer[:300],
        "requests": result.usage.requests,
        "input_tokens": [m.usage.input + m.usage.cache_read for m in replies],
        "output_tokens": [m.usage.output for m in replies],
        "refused_request_tokens": int(refused.group(1)) if refused else None,
        "calls": calls,
        "seconds": round(seconds, 2),
        "load": round(load, 2),
    }


def cli_run(limit: bool, timeout: float) -> dict[str, Any]:
    """One run as a user makes it (the caller holds the model's lock): ``agentkit run`` on the
    embedded model, the log served by a real MCP server (``tests/mcp_servers/log_server.py``),
    ``--output-limit on`` or ``off``; everything else the command's defaults for the embedded
    model (its harness included)."""
    server = f"{sys.executable} {LOG_SERVER}"
    command = [
        sys.executable, "-m", "agentkit", "run", "--model", f"local:{MODEL}", "--tools", "none",
        "--yes", "--json", "--max-turns", "8", "--output-limit", "on" if limit else "off",
        "--mcp", server, QUESTION,
    ]  # fmt: skip
    load = os.getloadavg()[0]
    out, _, seconds = run_command(command, timeout)
    run = read_replies(out)
    answer, last = run.answer, run.last
    calls = [f"{b.get('name')}({json.dumps(b.get('arguments'))})" for b in run.tool_calls()]
    return {
        "limit": limit,
        "via": "cli",
        "ok": CODE in answer and last.get("stop_reason") == "stop",
        "stop_reason": last.get("stop_reason") or ("timeout" if not run.ended else None),
        "error": run.error[:300] or None,
        "answer": answer[:300],
        "requests": len(run.replies),
        "input_tokens": run.tokens("input", "cache_read"),
        "output_tokens": run.tokens("output"),
        "refused_request_tokens": run.refused_tokens,
        "calls": calls,
        "seconds": round(seconds, 2),
        "load": round(load, 2),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate, tokens per request and time over ``runs``."""
    tokens = [t for r in runs for t in r["input_tokens"] if t]
    seconds = [r["seconds"] for r in runs]
    stops: dict[str, int] = {}
    for r in runs:
        stops[r["stop_reason"]] = stops.get(r["stop_reason"], 0) + 1
    return {
        "runs": len(runs),
        "ok": sum(r["ok"] for r in runs),
        "stop_reasons": stops,
        "requests_median": statistics.median(r["requests"] for r in runs) if runs else 0,
        "input_tokens_per_request_median": statistics.median(tokens) if tokens else None,
        "input_tokens_per_request_max": max(tokens) if tokens else None,
        "seconds_median": round(statistics.median(seconds), 1) if seconds else None,
    }


def _n(value: Any) -> str:
    """A figure as the table shows it: whole numbers without ``.0``, thousands separated."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


def table(paths: list[str]) -> None:
    """A Markdown table of the summaries in ``paths`` (what docs/context.md shows)."""
    print(
        "| agent | limit | right | how the runs ended | input tokens a request (median, max) "
        "| requests a run (median) | time a run (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        data = json.loads(Path(path).read_text())
        s = data["summary"]
        stops = ", ".join(f"{n} {reason}" for reason, n in s["stop_reasons"].items())
        refused = [
            r["refused_request_tokens"] for r in data["runs"] if r.get("refused_request_tokens")
        ]
        tokens = (
            f"{_n(s['input_tokens_per_request_median'])}, {_n(s['input_tokens_per_request_max'])}"
        )
        if refused:
            tokens += f" (refused: {max(refused):,})"
        agent = "agentkit run" if data.get("via") == "cli" else "Python"
        print(f"| {agent} | {data['limit']} | {s['ok']}/{s['runs']} | {stops} | {tokens} "
              f"| {_n(s['requests_median'])} | {s['seconds_median']} s |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", choices=["on", "off"], default="on")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--via",
        choices=["api", "cli"],
        default="cli",
        help="'cli' (default): each run is 'agentkit run' over the MCP log server; 'api': the "
        "agent built here in Python, with a read_log tool of its own",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a CLI run may take")
    parser.add_argument("--out", help="write the runs and their summary to this JSON file")
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="runs made under one hold of the model's lock (default 1)",
    )
    parser.add_argument(
        "--prior",
        help="the printed lines of an earlier, interrupted set: its runs count among --runs",
    )
    parser.add_argument("--table", nargs="+", help="print the summaries of these JSON files")
    args = parser.parse_args()
    if args.table:
        table(args.table)
        return
    log = log_text()
    runs = []
    if args.prior:
        for line in Path(args.prior).read_text().splitlines():
            if line.startswith('{"run"'):
                runs.append({k: v for k, v in json.loads(line).items() if k != "run"})
                print(line, flush=True)
    while len(runs) < args.runs:
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            for _ in range(min(args.batch, args.runs - len(runs))):
                if args.via == "cli":
                    run = cli_run(args.limit == "on", args.timeout)
                else:
                    run = one_run(args.limit == "on", log)
                runs.append(run)
                print(json.dumps({"run": len(runs), **run}), flush=True)
                write_report(args, log, runs)  # a set cut short keeps what it measured
    write_report(args, log, runs)
    print(json.dumps(summary(runs)), file=sys.stderr)


def write_report(args: argparse.Namespace, log: str, runs: list[dict[str, Any]]) -> None:
    """The runs so far and their summary, to ``--out`` (when given)."""
    if not args.out:
        return
    report = {
        "model": f"local:{MODEL}",
        "limit": args.limit,
        "via": args.via,
        "log_chars": len(log),
        "log_lines": log.count("\n") + 1,
        "question": QUESTION,
        "max_tokens": MAX_TOKENS,
        "summary": summary(runs),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
