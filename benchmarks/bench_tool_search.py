"""Tool search on the embedded model: a 200-tool MCP catalog and a task that needs one of the
tools, run with tool search and without, several times each; success rate, tokens per request
and time per run, written to a JSON file.

Each run is what a user runs: ``agentkit run --model local:qwen2.5-coder-1.5b --tools none
--yes --json --mcp "python tests/mcp_servers/catalog_server.py 200" TASK`` in a subprocess,
with ``--tool-search auto`` (the default: above 20 tools) or ``off``. The embedded model is one
per machine: each run takes ``/tmp/agentkit-model.lock`` itself (its time starts once it holds
it), so other agents' runs never share the model with it. The machine is shared, so the load
average is written beside every run.

Run from the repository root::

    python benchmarks/bench_tool_search.py --runs 10 --out benchmarks/results/context/tool-search.json
    python benchmarks/bench_tool_search.py --table benchmarks/results/context/tool-search.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli_run import ROOT, read_replies, run_command  # noqa: E402

MODEL = "local:qwen2.5-coder-1.5b"
TASK = "How many units of item SKU-4411 are in stock? Use your tools to find out."
ANSWER = "37"
LOCK = "/tmp/agentkit-model.lock"
MODES = {"search": "auto", "off": "off", "search-only": "auto"}
"""``--modes`` names: the command's tool search, none, and ``search-only``: its tool search
without the preload and the required first call, so that the model must call ``search_tools``
itself (the command has no option for that: the run patches ``_tool_search``, see
:data:`SEARCH_ONLY`)."""
SEARCH_ONLY = """
import sys
from agentkit.cli import agent_setup, console_main
from agentkit.context.search import ToolSearch

def search_only(setting, tools, small):
    return [ToolSearch(max_share=None, keep=[t.name for t in tools])]

agent_setup._tool_search = search_only
console_main(sys.argv[1:])
"""
"""The ``search-only`` mode's program: the command with a tool search that preloads nothing."""
COMMIT = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                        cwd=ROOT).stdout.strip() or None  # fmt: skip
"""The commit the runs ran (``None`` outside a checkout: the runner says it)."""


def run_once(mode: str, tools: int, timeout: float, max_turns: int) -> dict[str, Any]:
    """One run in ``mode`` (the caller holds the model's lock)."""
    server = f"{sys.executable} {ROOT / 'tests' / 'mcp_servers' / 'catalog_server.py'} {tools}"
    start = ["-c", SEARCH_ONLY] if mode == "search-only" else ["-m", "agentkit"]
    command = [
        sys.executable, *start, "run", "--model", MODEL, "--tools", "none", "--yes",
        "--json", "--max-turns", str(max_turns), "--tool-search", MODES[mode], "--mcp", server,
        TASK,
    ]  # fmt: skip
    load = [round(x, 2) for x in os.getloadavg()]
    out, code, seconds = run_command(command, timeout)
    return {"mode": mode, "exit": code, "seconds": round(seconds, 1), "load": load,
            "commit": COMMIT, **read_run(out)}  # fmt: skip


def read_run(jsonl: str) -> dict[str, Any]:
    """What a run's JSON lines say: its answer, requests, tokens, tool calls and how it ended."""
    run = read_replies(jsonl)
    answer, last = run.answer, run.last
    return {
        "success": ANSWER in answer and last.get("stop_reason") == "stop",
        "answer": answer[:300],
        "stop_reason": last.get("stop_reason"),
        "error": run.error[:300] or None,
        "needed_tokens": run.refused_tokens,
        "requests": len(run.replies),
        "prompt_tokens": run.tokens("input", "cache_read", "cache_write"),
        "output_tokens": run.tokens("output"),
        "tool_calls": [b.get("name") for b in run.tool_calls()],
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: successes, tokens per request (median, max), seconds per run (median)."""
    summary: dict[str, Any] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        prompts = [t for r in mine for t in r["prompt_tokens"] if t]
        summary[mode] = {
            "runs": len(mine),
            "successes": sum(1 for r in mine if r["success"]),
            "prompt_tokens_per_request_median": statistics.median(prompts) if prompts else None,
            "prompt_tokens_per_request_max": max(prompts) if prompts else None,
            "needed_tokens_median": statistics.median(
                [r["needed_tokens"] for r in mine if r.get("needed_tokens")] or [0]
            ),
            "requests_per_run_median": statistics.median(r["requests"] for r in mine),
            "seconds_per_run_median": statistics.median(r["seconds"] for r in mine),
            "load_median": statistics.median(r["load"][0] for r in mine),
        }
    return summary


def table(report: dict[str, Any]) -> str:
    rows = ["| mode | success | tokens/request (median, max) | requests/run | s/run (median) | load |",
            "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for mode, s in report["summary"].items():
        rows.append(
            f"| {mode} | {s['successes']}/{s['runs']} | {s['prompt_tokens_per_request_median']}, "
            f"{s['prompt_tokens_per_request_max']} | {s['requests_per_run_median']} | "
            f"{s['seconds_per_run_median']} | {s['load_median']} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tools", type=int, default=200)
    parser.add_argument("--modes", default="search,off")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--batch", type=int, default=1, help="rounds run under one hold of the lock")
    parser.add_argument("--prior", type=Path, help="a report whose runs count (to go on with it)")
    parser.add_argument("--commit", help="the commit the runs ran, when not run in a checkout")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path)
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    report: dict[str, Any] = {
        "model": MODEL, "task": TASK, "answer": ANSWER, "tools": args.tools,
        "cores": os.cpu_count(), "runs": [],
    }  # fmt: skip
    if args.prior:
        report["runs"] = json.loads(args.prior.read_text())["runs"]
    modes = args.modes.split(",")
    rounds = list(range(args.runs))
    while rounds:
        batch, rounds = rounds[: args.batch], rounds[args.batch :]
        with open(LOCK, "a") as lock:  # one hold of the model's lock per batch of rounds
            waited = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock_wait = round(time.monotonic() - waited, 1)
            for i in batch:
                for mode in modes:  # interleaved, so that the machine's load falls on both alike
                    result = run_once(mode, args.tools, args.timeout, args.max_turns)
                    result["commit"] = args.commit or result["commit"]
                    result["lock_wait_s"], lock_wait = lock_wait, 0.0
                    report["runs"].append(result)
                    report["summary"] = summarise(report["runs"])
                    print(f"{i + 1}/{args.runs} {mode}: success={result['success']} {result['seconds']} s "
                          f"tokens={result['prompt_tokens']} calls={result['tool_calls']}", flush=True)  # fmt: skip
                    if args.out:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))


if __name__ == "__main__":
    main()
