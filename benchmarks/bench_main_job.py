"""The README's main job as a newcomer meets it: its ``agentkit run`` command, on a terminal (a
pty), first from nothing (an empty cache: the weights are joined, a kept server started, the
fixed prompt read and its KV cache saved), then warm (the kept server and the saved prefix).

For each run it reports when the screen showed each step, in seconds from the command's start:
``starting`` (the weights are joined; the server starts), ``working`` (the first model request
is on its way: the spinner), ``call`` (the tool call's name shows), ``result`` (the tool's
outcome), ``answer`` (the answer's first characters), ``exit``; and the longest time the screen
stood still while the run went on (``still``) and what it showed then (``still_after``). The load average before and after says how busy
the machine was. The embedded model's server is one per user: run one model run at a time.

Run from a checkout with the ``local`` extra installed::

    python benchmarks/bench_main_job.py                # one cold run, three warm
    python benchmarks/bench_main_job.py --warm 6 --json
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKS = {
    "starting": b"starting the local model",
    "working": b"working...",
    "call": b"-> read_file",
    "result": b"<- read_file",
}


def readme_command() -> list[str]:
    """The README's main job, as arguments (``agentkit run ...``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"\.venv/bin/agentkit (run [^\n]+)", text)
    if match is None:
        raise SystemExit("the README's main job command was not found")
    return shlex.split(match.group(1))


def run_once(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One run on a pty: when each mark first showed, the longest still screen, the exit."""
    started = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, as a shell would run it
        try:
            os.chdir(ROOT)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    output = b""
    seen: dict[str, float] = {}
    last_change, still, still_after = started, 0.0, b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.1)
        now = time.monotonic()
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            break
        if now - last_change > still:  # the longest still screen so far, and what it showed
            still, still_after = now - last_change, output[-60:]
        last_change = now
        output += chunk
        for name, mark in MARKS.items():
            if name not in seen and mark in output:
                seen[name] = round(now - started, 2)
        if "answer" not in seen and "result" in seen:
            tail = output.split(MARKS["result"], 1)[1]
            # Text after a line break or after the spinner was cleared: not a spinner frame.
            if re.search(rb"(?:\n|\r\x1b\[K)\w", tail):
                seen["answer"] = round(now - started, 2)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    seen["exit"] = round(time.monotonic() - started, 2)
    seen["still"] = round(still, 2)
    seen["still_after"] = still_after.decode("utf-8", "replace")
    seen["status"] = os.waitstatus_to_exitcode(status)
    seen["output"] = re.sub(r"\r?\n", "\n", output.decode("utf-8", "replace"))[-400:]
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--warm", type=int, default=3, help="warm runs after the cold one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()

    command = Path(sys.executable).with_name("agentkit")
    argv = [str(command), *readme_command()[0:]]
    scratch = Path(tempfile.mkdtemp(prefix="agentkit-main-job-"))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(AGENTKIT_CACHE_DIR=str(scratch / "cache"), AGENTKIT_SERVER_DIR=str(scratch / "s"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    load_before = os.getloadavg()
    try:
        runs = [run_once(argv, env) for _ in range(1 + options.warm)]
    finally:
        os.environ.update(AGENTKIT_SERVER_DIR=env["AGENTKIT_SERVER_DIR"])
        sys.path.insert(0, str(ROOT))
        from agentkit.local.kept import stop_kept_servers

        stop_kept_servers()
    load_after = os.getloadavg()
    warm = runs[1:]
    report = {
        "command": " ".join(shlex.quote(a) for a in ["agentkit", *argv[1:]]),
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "cold": runs[0],
        "warm": warm,
        "warm_median_exit": statistics.median(r["exit"] for r in warm) if warm else None,
    }
    if options.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['command']}\n{report['cores']} cores, load {load_before} -> {load_after}")
    for label, run in [("cold", runs[0]), *((f"warm {i}", r) for i, r in enumerate(warm, 1))]:
        steps = ", ".join(f"{k} {run[k]}" for k in (*MARKS, "answer", "exit", "still") if k in run)
        print(f"{label:>7}: {steps} (status {run['status']})")


if __name__ == "__main__":
    main()
