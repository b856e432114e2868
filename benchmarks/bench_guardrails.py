"""What a gated answer costs: one run whose answer streams in 5,000 text deltas, without
guardrails and with an output guardrail (a regex rule, the secrets and the PII detectors), in
process (a stream function that has every event ready: the loop's and the gate's cost only)
and over HTTP (a local server streaming Chat Completions chunks: what a real provider adds).

Run: ``python benchmarks/bench_guardrails.py [--deltas 5000] [--runs 15] [--secrets]``.
``--secrets`` also compares the secrets detector with ``detect-secrets`` (when installed) on
the same samples: what each finds, and what each flags in ordinary text. Numbers go to
stdout; nothing asserts.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentkit import Agent, Model
from agentkit.event_stream import AssistantMessageEventStream
from agentkit.guardrails import PII, Check, Guardrail, Guardrails, Pattern, Secrets
from agentkit.providers.builder import MessageBuilder

WORDS = "the quick brown fox jumps over a lazy dog while it rains".split()


def answer_deltas(count: int) -> list[str]:
    """``count`` deltas of a plain answer: words, a sentence's end every 20."""
    return [WORDS[i % len(WORDS)] + (". " if i % 20 == 19 else " ") for i in range(count)]


def ready_stream_fn(deltas: list[str]) -> Callable[..., AssistantMessageEventStream]:
    """A stream function whose answer is ready at once: every event pushed (through the
    providers' own message builder) before it returns."""

    def stream_fn(model: Model, context: Any, options: Any) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()
        builder = MessageBuilder(model, stream)
        builder.start()
        index = builder.begin_text()
        for delta in deltas:
            builder.add_text(index, delta)
        builder.end_text(index)
        builder.finish("stop")
        return stream

    return stream_fn


class Nothing(Guardrail):
    """Passes everything: what the gate itself costs (holding, checkpoints, release)."""

    def check(self, text: str, check: Check) -> None:
        return None


GUARDRAILS: dict[str, Callable[[], Guardrails | None]] = {
    "none": lambda: None,
    "no-op": lambda: Guardrails(output=[Nothing()]),
    "regex": lambda: Guardrails(output=[Pattern(r"\b(?:password|passwd)\s*[:=]\s*\S{1,64}")]),
    "secrets": lambda: Guardrails(output=[Secrets()]),
    "pii": lambda: Guardrails(output=[PII()]),
}


def _count_updates(seen: list[Any], event: Any) -> None:
    if event.type == "message_update":
        seen.append(event)


def time_runs(make_agent: Callable[[], Agent], runs: int) -> tuple[float, int]:
    """The median wall time of one run in milliseconds (after a warm-up run), and how many
    text deltas its listeners were given."""
    make_agent().prompt("warm up")
    times = []
    released = 0
    for _ in range(runs):
        agent = make_agent()
        deltas: list[Any] = []
        agent.subscribe(functools.partial(_count_updates, deltas))
        started = time.perf_counter()
        result = agent.prompt("Talk.")
        times.append((time.perf_counter() - started) * 1000)
        assert result.stop_reason == "stop", result.error_message
        released = len(deltas)
    return statistics.median(times), released


def bench_in_process(deltas: int, runs: int) -> None:
    model = Model(id="bench", api="bench", provider="bench", base_url="")
    stream_fn = ready_stream_fn(answer_deltas(deltas))
    print(f"in process, {deltas} deltas, median of {runs} runs:")
    base = None
    for name, make in GUARDRAILS.items():
        policies = [] if make() is None else [make()]

        def agent(policies: list[Any] = policies) -> Agent:
            return Agent(model=model, stream_fn=stream_fn, policies=list(policies))

        ms, events = time_runs(agent, runs)
        base = ms if base is None else base
        added = "" if name == "none" else f"  {ms - base:+.1f} ms"
        print(f"  {name:8} {ms:8.1f} ms  {events:5} update events{added}")


def bench_http(deltas: int, runs: int) -> None:
    from benchmarks._sse_server import SSEServer

    chunks = [{"choices": [{"index": 0, "delta": {"content": d}}]} for d in answer_deltas(deltas)]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()
    server = SSEServer(lambda: body, nodelay=True)
    try:
        model = Model(id="bench", api="openai-completions", provider="openai",
                      base_url=server.url + "/v1")  # fmt: skip
        print(f"over HTTP (Chat Completions), {deltas} deltas, median of {runs} runs:")
        base = None
        for name, make in GUARDRAILS.items():
            policies = [] if make() is None else [make()]

            def agent(policies: list[Any] = policies) -> Agent:
                return Agent(model=model, api_key="sk-bench", policies=list(policies))

            ms, events = time_runs(agent, runs)
            base = ms if base is None else base
            added = "" if name == "none" else f"  {ms - base:+.1f} ms"
            print(f"  {name:8} {ms:8.1f} ms  {events:5} update events{added}")
    finally:
        server.close()


# --- the secrets detector beside detect-secrets ---------------------------------------------------

POSITIVES = {
    "openai project key": "sk-proj-" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7Qr9St1Uv3Wx5Yz7" * 2,
    "openai legacy key": "sk-" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn" + "T3BlbkFJ" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn",
    "anthropic key": "sk-ant-api03-" + "Xy9" * 30,
    "aws access key id": "AKIA" + "Q2W3E4R5T6Y7U8I9",
    "github token": "ghp_" + "1234567890abcdefghijABCDEFGHIJ123456",
    "gitlab token": "glpat-" + "xxxxXXXXxxxxXXXXxxxx",
    "slack token": "xoxb-" + "123456789012-abcdefABCDEF",
    "stripe key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "google api key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "hugging face token": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "password in a url": "postgres://admin:" + "hunter2hunter2" + "@db.internal:5432/app",
    "npm token": "npm_" + "abcdefghijklmnopqrstuvwxyz0123456789",
}  # fmt: skip

NEGATIVES = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the build",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "The password field must be at least 12 characters long.",
    "token = get_token()  # read from the environment",
    "See https://example.com:8080/docs?q=a:b@c for details.",
    "The risk-assessment task-list was shared with ask-me-anything.",
]


def compare_secrets() -> None:
    """Each sample through both: whether it is flagged, and by which of detect-secrets'
    plugins (its entropy and keyword plugins flag what merely looks random or says
    "password")."""
    ours = Secrets()
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        print("detect-secrets is not installed: pip install detect-secrets to compare")
        return

    def theirs(line: str) -> str:
        return ", ".join(sorted({found.type for found in scan_line(line)})) or "-"

    with default_settings():
        print("secrets: agentkit finds / detect-secrets finds (its plugin)")
        for name, secret in POSITIVES.items():
            line = f"the value is {secret} ok"
            print(f"  {name:20} {bool(ours.find(line))!s:6} {theirs(line)}")
        print("ordinary text flagged: agentkit / detect-secrets (its plugin)")
        for text in NEGATIVES:
            print(f"  {text[:44]:46} {bool(ours.find(text))!s:6} {theirs(text)}")
        sample = "\n".join(NEGATIVES * 400)
        for name, scan in (
            ("agentkit", lambda: ours.find(sample)),
            ("detect-secrets", lambda: [list(scan_line(line)) for line in sample.splitlines()]),
        ):
            started = time.perf_counter()
            scan()
            took = (time.perf_counter() - started) * 1000
            print(f"  {name} reads {len(sample) // 1024} KB of ordinary text in {took:.0f} ms")


def bench_check_cost(deltas: int, runs: int) -> None:
    """Each guardrail's own checks over the same answer, cut at the same checkpoints (one
    per sentence), without the loop: what gating with it adds over gating with no check."""
    from agentkit.abort import AbortController

    text = "".join(answer_deltas(deltas))
    sentences = [s + ". " for s in text.split(". ") if s]
    signal = AbortController().signal
    print(f"the checks alone, {len(sentences)} checkpoints over {len(text)} characters:")
    for name, make in GUARDRAILS.items():
        guardrails = make()
        if guardrails is None:
            continue
        [guardrail] = guardrails.output
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            for sentence in sentences:
                guardrail.hold(sentence)
                guardrail.check(sentence, Check("output", signal))
            times.append((time.perf_counter() - started) * 1000)
        print(f"  {name:8} {statistics.median(times):8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--secrets", action="store_true", help="compare with detect-secrets")
    args = parser.parse_args()
    bench_in_process(args.deltas, args.runs)
    bench_http(args.deltas, args.runs)
    bench_check_cost(args.deltas, args.runs)
    if args.secrets:
        compare_secrets()


if __name__ == "__main__":
    main()
