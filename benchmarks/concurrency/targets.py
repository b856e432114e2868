#!/usr/bin/env python3
"""results/<stamp>/results.jsonl -> agentkit's concurrency targets, as ratios measured in the
same round and N (medians over rounds), for agentkit and, when the run had them, the base rows
(AGENTKIT_BASE) beside it. Standard library only.

    python3 benchmarks/concurrency/targets.py ~/.cache/agentkit-bench/results/<stamp>

Targets (N = 300 and 1000): threads' CPU per model turn <= 1.3x raw_threads', wall <= 1.1x;
aprompt()'s wall <= 2x raw_async's at N = 1000 and its loop lag < 10 ms; <= 3 threads per
prompt() run at the peak, none per aprompt() run beyond the worker and a tool thread;
connections opened <= 1.1x the most requests at once (N: every run's first request finds the
pool cold, so N is the floor; the server's own in-flight peak is lower, since the runs' first
requests do not all arrive at once); memory per run <= the floor's + 100 KB. Beside them: the
same threads row with each tool call on the run's own thread (what the tool thread costs), the
thread floor's wall over the asyncio floor's, and the asyncio floor's own loop lag.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(folder: Path) -> dict[tuple[int, int], dict[str, dict]]:
    """{(round, n): {label: result}} of the correct results."""
    rows: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for line in (folder / "results.jsonl").read_text().splitlines():
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if d.get("correct") and d.get("tool_requested", "native") == "native":
            rows[(d["round"], d["n"])][d["label"]] = d
    return rows


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(row: dict[str, dict], threads: str, aio: str) -> dict[str, float | None]:
    """One round's figures for the agentkit rows ``threads`` and ``aio``."""
    out: dict[str, float | None] = {}
    raw_t, raw_a = row.get("raw_threads"), row.get("raw_async")
    t, a = row.get(threads), row.get(aio)
    if t and raw_t:
        out["threads cpu/turn vs raw_threads"] = t["cpu_ms_per_turn"] / raw_t["cpu_ms_per_turn"]
        out["threads wall vs raw_threads"] = t["wall_s"] / raw_t["wall_s"]
        out["threads memory/run above raw_threads, KB"] = (
            t["rss_per_run_kb"] - raw_t["rss_per_run_kb"]
        )
    inline = row.get(threads + "_tools_on_loop_thread")
    if inline and raw_t:  # the same run without the tool thread: what that thread costs
        out["threads cpu/turn vs raw_threads, tools on the loop's thread"] = (
            inline["cpu_ms_per_turn"] / raw_t["cpu_ms_per_turn"]
        )
        out["threads wall vs raw_threads, tools on the loop's thread"] = (
            inline["wall_s"] / raw_t["wall_s"]
        )
    if t:
        out["threads per prompt() run at peak"] = t["peak_threads"] / t["n"]
        out["threads connections opened / N"] = t["server"]["connections"] / t["n"]
    if a and raw_a:
        out["aio wall vs raw_async"] = a["wall_s"] / raw_a["wall_s"]
        out["aio memory/run above raw_async, KB"] = a["rss_per_run_kb"] - raw_a["rss_per_run_kb"]
    if raw_t and raw_a:  # the thread floor beside the asyncio floor
        out["raw_threads wall vs raw_async"] = raw_t["wall_s"] / raw_a["wall_s"]
    if raw_a:
        out["raw_async's own loop lag max, ms"] = (raw_a.get("loop_lag_ms") or {}).get("max")
    if a:
        out["aio threads per run at peak"] = a["peak_threads"] / a["n"]
        out["aio loop lag max, ms"] = (a.get("loop_lag_ms") or {}).get("max")
        out["aio loop lag p99, ms"] = (a.get("loop_lag_ms") or {}).get("p99")
        out["aio connections opened / N"] = a["server"]["connections"] / a["n"]
    return out


def main(folder: Path) -> None:
    rows = load(folder)
    ns = sorted({n for _, n in rows})
    variants = [("agentkit", "agentkit_threads", "agentkit_aio")]
    if any("agentkit_threads_base" in r for r in rows.values()):
        variants.insert(0, ("base", "agentkit_threads_base", "agentkit_aio_base"))
    for n in ns:
        print(f"\n## N = {n}\n")
        per_variant: dict[str, dict[str, float | None]] = {}
        names: list[str] = []
        for name, threads, aio in variants:
            collected: dict[str, list[float]] = defaultdict(list)
            for (_, rn), row in rows.items():
                if rn != n:
                    continue
                for key, value in figures(row, threads, aio).items():
                    if value is not None:
                        collected[key].append(value)
                    if key not in names:
                        names.append(key)
            per_variant[name] = {key: median(values) for key, values in collected.items()}
        header = " | ".join(name for name, _, _ in variants)
        print(f"| figure (median over rounds) | {header} |")
        print("|---|" + "---|" * len(variants))
        for key in names:
            cells = []
            for name, _, _ in variants:
                value = per_variant[name].get(key)
                cells.append("–" if value is None else f"{value:.2f}")
            print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
