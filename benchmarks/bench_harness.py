"""Run a task set of :mod:`task_sets` on a model with a harness setting, two runs or more, and
write the results (verdict, time and tokens per task, the machine's load) to a JSON file and a
table.

Each task runs as a user runs it: ``agentkit run --yes --json`` in a subprocess, in a fresh
copy of the sets' workspace, with no provider key (so on the embedded model unless ``--model``
says otherwise); :func:`bench_tasks.run_task` does one. The machine is shared, so the load
average is written beside every task: "busy" runs are said to be busy. Wrap a run in
``flock /tmp/agentkit-model.lock`` so that two never share the model.

Run from the repository root::

    python benchmarks/bench_harness.py --set one-step --runs 2 --out one.json
    python benchmarks/bench_harness.py --set multi-step --model local:qwen2.5-coder-1.5b \\
        --harness off --out multi-1.5b-off.json
    python benchmarks/bench_harness.py --set all --harness checklist,completion --keep runs/
    python benchmarks/bench_harness.py --table one.json multi-1.5b-off.json   # a table only
    python benchmarks/bench_harness.py --activity runs/   # how often each policy acted

``benchmarks/results/harness/`` holds the reports behind the figures in ``docs/cli.md`` (its
README says how they were run; each task's load is in them). On a shared machine, give the
model server two threads (``AGENTKIT_LOCAL_THREADS=2``) and a priority of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tasks import (  # noqa: E402
    ROOT,
    agentkit_command,
    run_task,
    server_running,
    stop_server,
)
from task_sets import FILES, SETS  # noqa: E402

MAX_TURNS = 12
"""The turn budget of every task: room for a few steps and a send-back or two."""


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _server_pid(model: str | None = None) -> int | None:
    """The kept model server's process id (``agentkit server status``) for ``model`` (``local``
    or ``local:NAME``; the default embedded model when ``None``), if one runs."""
    from agentkit.local import DEFAULT_WEIGHTS, EMBEDDED_MODELS

    name = (model or "local").partition(":")[2]
    weights = EMBEDDED_MODELS.get(name, DEFAULT_WEIGHTS)
    done = subprocess.run(
        [*agentkit_command(), "server", "status"], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        return None
    for block in re.split(r"(?m)^(?=agentkit server: )", done.stdout):  # one block a server
        found = re.search(r"pid (\d+)", block)
        if found and f"model {weights.filename}," in block:
            return int(found.group(1))
    return None


def _cpu_of(pid: int | None) -> float | None:
    """The CPU seconds process ``pid`` has used so far (user and system), from /proc."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _nice_of(pid: int | None) -> int | None:
    """The scheduling priority of process ``pid`` (a server raised above the machine's other
    work measures as on a quiet machine), if known."""
    if pid is None:
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_task(
    task: Any, timeout: float, where: Path | None, extra: tuple[str, ...]
) -> dict[str, Any]:
    """:func:`bench_tasks.run_task` with the CPU time it cost: the command's own (its process
    tree, ``client_cpu_s``) and the kept model server's (``server_cpu_s``). On a busy machine
    the wall-clock time swells with the load while the CPU time stays about the same."""
    model = extra[extra.index("--model") + 1] if "--model" in extra else None
    pid = _server_pid(model)
    server_before, client_before = _cpu_of(pid), _children_cpu()
    result = run_task(task, timeout, where, extra, FILES, MAX_TURNS)
    client = _children_cpu() - client_before
    after_pid = _server_pid(model)
    server_after = _cpu_of(after_pid)
    server = None
    if server_after is not None:  # a server started by this task counts from zero
        server = server_after - (server_before if after_pid == pid and server_before else 0.0)
    result["client_cpu_s"] = round(client, 2)
    result["server_cpu_s"] = round(server, 2) if server is not None else None
    return result


@contextlib.contextmanager
def _held(path: str | None) -> Iterator[None]:
    """Hold the exclusive lock of the file at ``path`` (nothing when ``None``)."""
    if path is None:
        yield
        return
    with open(path, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def run_set(
    set_name: str,
    runs: int,
    extra: tuple[str, ...],
    timeout: float,
    keep: Path | None,
    only: list[str],
    on_result: Any,
    lock: str | None = None,
) -> list[list[dict[str, Any]]]:
    """Every task of the set, ``runs`` times over; ``on_result`` sees each result as it comes.
    With ``lock``, each task holds that file's lock while it runs (others wait between tasks)."""
    tasks = [t for t in SETS[set_name] if not only or any(w in t.name for w in only)]
    results: list[list[dict[str, Any]]] = []
    for run in range(runs):
        results.append([])
        for task in tasks:
            where = keep / set_name / f"run{run + 1}" if keep is not None else None
            with _held(lock):
                load = _load()
                result = timed_task(task, timeout, where, extra)
            result |= {"set": set_name, "run": run + 1, "load_before": load}
            results[-1].append(result)
            on_result(result)
    return results


def summarise_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One run of one set: how many tasks succeeded, the median time and tokens a task."""
    times = [float(r["total_s"]) for r in results if "total_s" in r]
    cpu = [
        r["client_cpu_s"] + r["server_cpu_s"]
        for r in results
        if r.get("server_cpu_s") is not None and "client_cpu_s" in r
    ]
    tokens = [r["tokens"] for r in results if "tokens" in r]
    return {
        "tasks": len(results),
        "succeeded": sum(1 for r in results if r["ok"]),
        "median_s": round(statistics.median(times), 2) if times else None,
        "median_cpu_s": round(statistics.median(cpu), 2) if cpu else None,
        "median_input_tokens": statistics.median(t["input"] for t in tokens) if tokens else None,
        "median_output_tokens": statistics.median(t["output"] for t in tokens) if tokens else None,
        "median_prompt_tokens": (
            statistics.median(t["input"] + t.get("cache_read", 0) for t in tokens)
            if tokens
            else None
        ),
        "median_requests": statistics.median(t["requests"] for t in tokens) if tokens else None,
        "failed": [r["task"] for r in results if not r["ok"]],
    }


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    """Per set: each run's summary, the tasks whose verdict differed between runs, the load."""
    summary: dict[str, Any] = {}
    for set_name, runs in report["results"].items():
        verdicts: dict[str, set[bool]] = {}
        for run in runs:
            for r in run:
                verdicts.setdefault(r["task"], set()).add(bool(r["ok"]))
        loads = [r["load_before"][0] for run in runs for r in run]
        summary[set_name] = {
            "runs": [summarise_run(run) for run in runs],
            "unstable": sorted(task for task, seen in verdicts.items() if len(seen) > 1),
            "load_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)}
            if loads
            else None,
        }
    return summary


def table(reports: list[dict[str, Any]]) -> str:
    """A Markdown table of reports: a row per model, harness setting and set."""
    rows = [
        "| model | harness | set | succeeded (per run) | median s a task | median CPU s a task "
        "| median tokens prompt (new)/output "
        "| requests | load (1 min) | failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        for set_name, s in report["summary"].items():
            runs = s["runs"]
            done = ", ".join(f"{r['succeeded']}/{r['tasks']}" for r in runs)
            times = ", ".join(str(r["median_s"]) for r in runs)
            cpu = ", ".join(str(r.get("median_cpu_s")) for r in runs)
            tokens = ", ".join(
                f"{r.get('median_prompt_tokens', 0):g} ({r['median_input_tokens']:g} new)/"
                f"{r['median_output_tokens']:g}"
                for r in runs
                if r["median_input_tokens"] is not None
            )
            requests = ", ".join(f"{r['median_requests']:g}" for r in runs if r["median_requests"])
            load = s["load_1min"] or {}
            failed = sorted({t for r in runs for t in r["failed"]})
            rows.append(
                f"| {report['model']} | {report['harness']} | {set_name} | {done} | {times} | {cpu} | "
                f"{tokens} | {requests} | {load.get('min')}-{load.get('max')} | "
                f"{', '.join(failed) or '-'} |"
            )
    return "\n".join(rows)


ACTIVITY = {
    "completion": lambda m: m["role"] == "user" and _text(m).startswith("Not done yet:"),
    "repeats": lambda m: m["role"] == "tool_result"
    and (
        bool((m.get("details") or {}).get("repeated"))
        or "was already called with these arguments and failed" in _text(m)
    ),
    "verify": lambda m: m["role"] == "tool_result" and " now holds:\n" in _text(m),
    "hints": lambda m: m["role"] == "tool_result"
    and any(
        mark in _text(m)
        for mark in (
            "holds (copy old_text",
            "is a folder, not a file",
            " holds: ",
            "would change nothing",
            "To add text at the end",
        )
    ),
}
"""How each policy shows in a transcript (the checklist's note is in requests only: the
requests that follow a tool batch are counted, the most it can have been shown)."""


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(c.get("text", "") for c in content or [] if isinstance(c, dict))


def activity(folder: Path) -> dict[str, Any]:
    """How often each harness policy acted in the kept event lines under ``folder`` (``--keep``
    of a run): per policy, the tasks it acted in and the times it did."""
    counts: dict[str, list[int]] = {name: [0, 0] for name in ("checklist", *ACTIVITY)}
    tasks = 0
    for path in sorted(folder.rglob("*.jsonl")):
        tasks += 1
        seen = dict.fromkeys(counts, 0)
        after_tools = False  # the last message was a tool result: the next request has a note
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") != "message_end":
                continue
            message = event["message"]
            for name, test in ACTIVITY.items():
                seen[name] += 1 if test(message) else 0
            if message["role"] == "assistant" and after_tools:
                seen["checklist"] += 1
            after_tools = message["role"] == "tool_result"
        for name in counts:
            counts[name][0] += 1 if seen[name] else 0
            counts[name][1] += seen[name]
    return {"tasks": tasks, **{k: {"tasks": v[0], "times": v[1]} for k, v in counts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=[*SETS, "all"], default="all")
    parser.add_argument("--runs", type=int, default=2, help="how many times to run the set")
    parser.add_argument("--model", help="e.g. local:qwen2.5-coder-1.5b (default: the embedded)")
    parser.add_argument("--harness", help="agentkit run --harness SETTING (default: its default)")
    parser.add_argument("--out", help="the JSON file to write (default: harness-<...>.json)")
    parser.add_argument("--keep", help="a folder to keep each task's event lines and stderr in")
    parser.add_argument("-k", action="append", default=[], help="only tasks whose name has this")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per task")
    parser.add_argument("--table", nargs="+", metavar="JSON", help="only print these reports")
    parser.add_argument("--activity", metavar="DIR", help="only count the policies' acts in DIR")
    parser.add_argument(
        "--lock", metavar="FILE", help="hold this file's lock during each task (a shared model)"
    )
    args = parser.parse_args()
    if args.activity:
        print(json.dumps(activity(Path(args.activity)), indent=1))
        return
    if args.table:
        reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.table]
        print(table(reports))
        return
    model = args.model or "local"
    harness = args.harness or "default"
    extra: tuple[str, ...] = ()
    if args.model:
        extra += ("--model", args.model)
    if args.harness:
        extra += ("--harness", args.harness)
    out = Path(args.out or f"harness-{model.replace(':', '-')}-{harness.replace(',', '+')}.json")
    report: dict[str, Any] = {
        "model": model,
        "harness": harness,
        "cores": os.cpu_count(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_at_start": _load(),
        "server_nice": _nice_of(_server_pid(args.model)),
        "results": {},
    }
    was_running = server_running()

    def write(result: dict[str, Any]) -> None:
        mark = "ok  " if result["ok"] else "FAIL"
        tokens = result.get("tokens") or {}
        print(
            f"{mark} {result['set']:10} {result['task']:15} run {result['run']} "
            f"{result.get('total_s', '-')} s  tokens {tokens.get('input')}/{tokens.get('output')}"
            f"  load {result['load_before'][0]}  {result.get('tools')}",
            flush=True,
        )
        report["results"].setdefault(result["set"], [])
        runs = report["results"][result["set"]]
        if len(runs) < result["run"]:
            runs.append([])
        runs[result["run"] - 1].append(result)
        report["summary"] = summarise(report)
        out.write_text(json.dumps(report, indent=1), encoding="utf-8")

    keep = Path(args.keep) if args.keep else None
    for set_name in SETS if args.set == "all" else [args.set]:
        run_set(set_name, args.runs, extra, args.timeout, keep, args.k, write, args.lock)
    report["load_at_end"] = _load()
    report["summary"] = summarise(report)
    out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if not was_running:
        stop_server()
    print(table([report]))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
