"""Benchmark compaction: a long conversation with large tool results through a small window.

Each turn the user asks for a page, the model calls ``fetch`` (whose result is 500 to 2,000
tokens), then answers. Runs side by side:

- the scripted model with an 8,192-token window (it refuses a request over it in Anthropic's
  words, and reports each request's size as its input tokens), 300 turns, with ``summarize``,
  with ``trim``, and without compaction;
- with ``--local``, the embedded llama.cpp model with a small ``--ctx-size`` (its own tokenizer
  and its own overflow error), with ``trim`` and without compaction.

For each run it reports: the turns that ended well, the requests (and how many were summary
requests), the largest request against the window, requests over the window, requests in which
a tool call was missing its result (or a result its call), failed turns, the compactions and
their own cost (requests, input and output tokens, share of all input tokens), and time per turn.

Run from the repository root: ``python benchmarks/bench_compaction.py [--turns 300] [--local
[--ctx-size 2048] [--local-turns 40] [--local-summarize]] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentkit import Agent, tool  # noqa: E402
from agentkit.compaction import Compaction  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from agentkit.transcript import COMPACTION_ROLE  # noqa: E402
from agentkit.types import (  # noqa: E402
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    Usage,
    role_of,
)
from tests.compaction_support import (  # noqa: E402  (the tests' measures of a request)
    is_summary_request,
    pairs_whole,
    request_tokens,
)

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()


def page(number: int, rng: random.Random, chars: tuple[int, int]) -> str:
    """A page of ``chars`` characters (500 to 2,000 tokens for the 8k window)."""
    size = rng.randint(*chars)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    return f"page {number}: " + " ".join(words)


def make_fetch(seed: int, chars: tuple[int, int] = (2000, 8000)) -> Any:
    rng = random.Random(seed)

    @tool
    def fetch(page_number: int) -> str:
        """Fetch a page of the archive by its number."""
        return page(page_number, rng, chars)

    return fetch


class WindowedModel:
    """The scripted model of an 8k window: measures every request, refuses one over the window,
    calls ``fetch`` for a user message, answers a tool result, summarises a summary request."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.sizes: list[int] = []
        self.broken_pairs = 0
        self.summary_requests = 0
        self.model = ScriptedModel(
            [self._answer] * 20_000,
            model=Model(
                id="windowed", api="scripted", provider="scripted", base_url="",
                context_window=window,
            ),
        )  # fmt: skip

    def _answer(self, context: Context, options: StreamOptions) -> Any:
        tokens = request_tokens(context)
        self.sizes.append(tokens)
        if not pairs_whole(list(context.messages)):
            self.broken_pairs += 1
        if tokens > self.window:
            return reply(error=f"prompt is too long: {tokens} tokens > {self.window} maximum")
        usage = Usage(input=tokens, output=40, total_tokens=tokens + 40)
        if is_summary_request(context):
            self.summary_requests += 1
            return reply(
                "- The user is reading the archive page by page; each page was fetched and "
                f"acknowledged. Pages so far: up to the latest one. (summary {self.summary_requests})",
                usage=usage,
            )
        last = context.messages[-1]
        if role_of(last) == "user":
            number = int(str(last.content[0].text).split()[-1])
            return reply(tool_call("fetch", {"page_number": number}), usage=usage)
        return reply("Fetched and read the page.", usage=usage)


def measure(
    agent: Agent,
    turns: int,
    sizes: Any,
    window: int,
    stop_at_failure: bool,
    progress: str | None = None,
) -> dict[str, Any]:
    """Run ``turns`` prompts; the figures of the run."""
    ok = failed = 0
    first_failure: int | None = None
    error = None
    requests = 0
    started = time.perf_counter()
    for turn in range(turns):
        result = agent.prompt(f"Fetch page {turn}")
        requests += result.usage.requests
        if progress is not None:
            print(f"{progress}: turn {turn} {result.stop_reason}", file=sys.stderr, flush=True)
        if result.stop_reason in ("stop", "length"):  # "length": a long answer cut short
            ok += 1
        else:
            failed += 1
            if first_failure is None:
                first_failure, error = turn, result.error_message
            if stop_at_failure:
                break
    elapsed = time.perf_counter() - started
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    compaction_in = sum(r.usage.input + r.usage.cache_read for r in records)
    compaction_out = sum(r.usage.output for r in records)
    all_in = sum(
        m.usage.input + m.usage.cache_read
        for m in agent.state.messages
        if isinstance(m, AssistantMessage)
    ) + compaction_in
    measured = sizes()
    return {
        "turns_ok": ok,
        "turns_failed": failed,
        "first_failure_turn": first_failure,
        "first_error": (error or "")[:160] or None,
        "requests": requests,
        "compactions": len(records),
        "compaction_requests": sum(r.requests for r in records),
        "compaction_input_tokens": compaction_in,
        "compaction_output_tokens": compaction_out,
        "compaction_share_of_input": round(compaction_in / all_in, 3) if all_in else 0.0,
        "largest_request": max(measured) if measured else 0,
        "window": window,
        "requests_over_window": sum(1 for s in measured if s > window),
        "ms_per_turn": round(1000 * elapsed / max(ok + failed, 1), 2),
        "transcript_messages": len(agent.state.messages),
    }


def scripted_run(strategy: str | None, turns: int, window: int) -> dict[str, Any]:
    windowed = WindowedModel(window)
    agent = Agent(
        model=windowed.model.model, stream_fn=windowed.model, tools=[make_fetch(7)],
        system_prompt="You read an archive for the user, one page at a time.",
        compaction=strategy,
    )  # fmt: skip
    figures = measure(agent, turns, lambda: windowed.sizes, window, strategy is None)
    figures["requests_with_a_broken_pair"] = windowed.broken_pairs
    figures["summary_requests_seen"] = windowed.summary_requests
    return figures


def local_run(strategy: str | None, turns: int, ctx_size: int, server: Any) -> dict[str, Any]:
    from agentkit.providers import stream_simple

    sizes: list[int] = []
    broken = [0]

    def measured(model: Model, context: Context, options: Any = None) -> Any:
        if not pairs_whole(list(context.messages)):
            broken[0] += 1
        response = stream_simple(model, context, options)
        original = response.result

        def result(timeout: float | None = None) -> Any:
            message = original(timeout)
            if message.stop_reason != "error":
                sizes.append(message.usage.input + message.usage.cache_read)
            elif "context size" in (message.error_message or ""):
                sizes.append(ctx_size + 1)  # refused: over the window
            return message

        response.result = result  # type: ignore[method-assign]
        return response

    model = server.model_for("openai-completions")
    scale = ctx_size / 8192  # pages sized to the window as the scripted run's are
    chars = (int(2000 * scale), int(8000 * scale))
    agent = Agent(
        model=model, stream_fn=measured, tools=[make_fetch(11, chars)], max_tokens=24,
        system_prompt="You read an archive. For each request call fetch, then say one line.",
        compaction=Compaction(strategy=strategy) if strategy else None,
    )  # fmt: skip
    figures = measure(
        agent, turns, lambda: sizes, ctx_size, strategy is None, f"local {strategy}"
    )
    figures["requests_with_a_broken_pair"] = broken[0]
    return figures


def print_table(title: str, runs: dict[str, dict[str, Any]]) -> None:
    names = list(runs)
    keys = list(next(iter(runs.values())))
    print(f"\n{title}")
    print(f"{'':34}" + "".join(f"{n:>22}" for n in names))
    for key in keys:
        if key != "first_error":
            print(f"{key:34}" + "".join(f"{str(runs[n].get(key)):>22}" for n in names))
    for name in names:
        if runs[name].get("first_error"):
            print(f"first error ({name}): {runs[name]['first_error']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--local", action="store_true", help="also run the embedded model")
    parser.add_argument("--ctx-size", type=int, default=2048)
    parser.add_argument("--local-turns", type=int, default=40)
    parser.add_argument("--local-summarize", action="store_true", help="the embedded model summarises too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    report: dict[str, Any] = {}
    report["scripted"] = {
        "summarize": scripted_run("summarize", args.turns, args.window),
        "trim": scripted_run("trim", args.turns, args.window),
        "no compaction": scripted_run(None, args.turns, args.window),
    }
    if args.local:
        from agentkit import local

        server = local.start_local_model(n_ctx=args.ctx_size)
        try:
            runs = {"trim": "trim", "no compaction": None}
            if args.local_summarize:
                runs = {"trim": "trim", "summarize": "summarize", "no compaction": None}
            report["local"] = {
                name: local_run(strategy, args.local_turns, args.ctx_size, server)
                for name, strategy in runs.items()
            }
        finally:
            server.stop()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(f"scripted model, {args.window}-token window, {args.turns} turns",
                    report["scripted"])  # fmt: skip
        if "local" in report:
            print_table(f"embedded model, --ctx-size {args.ctx_size}, {args.local_turns} turns",
                        report["local"])  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
