"""The everyday task set: ``agentkit run`` on small, real chores, each checked on disk or in
the answer. Reports the success rate, time to first token and total time per task.

Every task runs as a user would run it: the installed command in a subprocess (``--yes``,
``--json``), in a fresh copy of a small workspace, with no provider key, so on the embedded
local model. The first run starts the kept local server (unless one runs already) and saves
the prompt prefix's KV cache; the rest reuse both. Results are appended to a JSONL file as they
come, so an interrupted run still reports. A kept server the bench started is stopped at its
end.

Run from the repository root::

    python benchmarks/bench_tasks.py                  # all tasks
    python benchmarks/bench_tasks.py -k edit -k read  # tasks whose name contains a word
    python benchmarks/bench_tasks.py --only read --repeat 7 --cold   # a cold run, six warm
    python benchmarks/bench_tasks.py --only read --repeat 6 --no-keep-server  # a server per run
    python benchmarks/bench_tasks.py --system-file prompt.txt  # try another system prompt
    python benchmarks/bench_tasks.py --model local:qwen2.5-coder-1.5b  # the stronger model
    python benchmarks/bench_tasks.py --report results.jsonl   # summarise earlier results
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FILES: dict[str, str] = {
    "notes.txt": "Shopping list for Saturday:\n- milk\n- eggs\n- coffee beans\n",
    "todo.md": "# To do\n\n- call the dentist\n- pay the electricity bill\n- water the plants\n",
    "config.json": '{\n  "host": "localhost",\n  "port": 8080,\n  "debug": false\n}\n',
    "README.md": "# Weather station\n\nReads a sensor every minute and logs the temperature.\n",
    "data.csv": "city,temperature\nParis,18\nOslo,7\nCairo,31\n",
    "src/app.py": (
        "def greet(name):\n"
        '    return "Hello, " + name\n'
        "\n"
        "\n"
        "# TODO: read the name from the command line\n"
        'print(greet("world"))\n'
    ),
    "src/util.py": "def helper(values):\n    return sorted(values)\n",
}

Check = Callable[[Path, str], bool]


@dataclass
class Task:
    """One chore: the prompt, and a check of the workspace and the final answer."""

    name: str
    prompt: str
    check: Check


def answer_has(*words: str) -> Check:
    return lambda ws, answer: all(w.lower() in answer.lower() for w in words)


def answer_has_any(*words: str) -> Check:
    return lambda ws, answer: any(w.lower() in answer.lower() for w in words)


def file_has(path: str, *words: str, absent: tuple[str, ...] = ()) -> Check:
    def check(ws: Path, answer: str) -> bool:
        target = ws / path
        if not target.is_file():
            return False
        text = target.read_text(encoding="utf-8", errors="replace")
        return all(w in text for w in words) and not any(a in text for a in absent)

    return check


def add_py_works(ws: Path, answer: str) -> bool:
    target = ws / "add.py"
    if not target.is_file():
        return False
    done = subprocess.run(
        [sys.executable, "-c", "import add; assert add.add(2, 3) == 5"],
        cwd=ws,
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


TASKS: list[Task] = [
    Task("read", "Read the file notes.txt and tell me what it says.", answer_has("milk")),
    Task(
        "write",
        "Create a file hello.txt containing the text: Hello, world!",
        file_has("hello.txt", "Hello, world!"),
    ),
    Task(
        "edit-word",
        "In notes.txt, replace the word eggs with butter.",
        file_has("notes.txt", "butter", "milk", absent=("eggs",)),
    ),
    Task("list", "List the files in the folder src.", answer_has("app.py", "util.py")),
    Task(
        "run-echo",
        "Run the command: echo agentkit-works. Then tell me its output.",
        answer_has("agentkit-works"),
    ),
    Task(
        "run-python",
        "Run the command: python3 --version. Which Python version is installed?",
        answer_has("3."),
    ),
    Task(
        "search",
        "Search the workspace for the text TODO and tell me which file contains it.",
        answer_has("app.py"),
    ),
    Task(
        "write-lines",
        "Write a file numbers.txt with the numbers 1, 2 and 3, each on its own line.",
        file_has("numbers.txt", "1\n2\n3"),
    ),
    Task(
        "read-function",
        "Read src/app.py and tell me the name of the function it defines.",
        answer_has("greet"),
    ),
    Task(
        "config-value",
        "Read config.json. What is the value of port?",
        answer_has("8080"),
    ),
    Task(
        "config-edit",
        "In config.json, change the port from 8080 to 9090.",
        file_has("config.json", "9090", '"host"', absent=("8080",)),
    ),
    Task(
        "readme-title",
        "Read README.md and tell me the title on its first line.",
        answer_has("weather station"),
    ),
    Task(
        "make-function",
        "Create a Python file add.py with a function add(a, b) that returns a + b.",
        add_py_works,
    ),
    Task(
        "todo-question",
        "Read todo.md. Does it mention the dentist? Answer yes or no.",
        answer_has("yes"),
    ),
    Task(
        "rename-function",
        "In src/app.py, rename the function greet to welcome everywhere.",
        file_has("src/app.py", "def welcome", "welcome(", absent=("greet",)),
    ),
    Task(
        "csv-lookup",
        "Read data.csv. What is the temperature in Oslo?",
        answer_has("7"),
    ),
    Task(
        "find-definition",
        "Which file in src defines the function helper? Search for it.",
        answer_has("util.py"),
    ),
    Task(
        "new-folder-file",
        "Create the file docs/intro.md with the text: # Introduction",
        file_has("docs/intro.md", "# Introduction"),
    ),
    Task(
        "run-ls",
        "Run the command ls and tell me whether a file named data.csv is there.",
        answer_has_any("yes", "data.csv"),
    ),
    Task(
        "add-todo",
        "Add the item '- buy stamps' as a new last line of todo.md.",
        file_has("todo.md", "buy stamps", "dentist", "water the plants"),
    ),
    Task(
        "count-lines",
        "Run the command: wc -l data.csv. How many lines does data.csv have?",
        answer_has("4"),
    ),
    Task(
        "debug-flag",
        "In config.json, set debug to true.",
        file_has("config.json", '"debug": true', "8080"),
    ),
]

FRESH_TASKS: list[Task] = [
    Task(
        "fresh-replace-word",
        "In README.md, replace the word minute with hour.",
        file_has("README.md", "every hour", "Weather station", absent=("minute",)),
    ),
    Task(
        "fresh-top-files",
        "Which files are in the top folder of the workspace?",
        answer_has("config.json", "todo.md"),
    ),
    Task(
        "fresh-coffee",
        "Is coffee on the shopping list in notes.txt? Answer yes or no.",
        answer_has("yes"),
    ),
]
"""Tasks kept out of every tuning of prompts and tool descriptions (``--fresh`` runs them),
so they show whether the tuning generalises; report them apart from :data:`TASKS`."""

HELDOUT_TASKS: list[Task] = [
    Task("todo-count", "Read todo.md. How many items are on the list?", answer_has_any("3", "three")),
    Task("logs-what", "Read README.md. What does the weather station log?", answer_has("temperature")),
    Task("config-host", "Read config.json. What is the host?", answer_has("localhost")),
    Task("warmest-city", "Read data.csv. Which city is the warmest?", answer_has("cairo")),
    Task(
        "debug-enabled",
        "Is debug enabled in config.json? Answer yes or no.",
        answer_has_any("no", "false"),
    ),
    Task("src-count", "How many files are in the folder src?", answer_has_any("2", "two")),
    Task("helper-returns", "Read src/util.py. What does the function helper return?", answer_has("sorted")),
    Task("run-year", "Run the command: date +%Y. Which year does it print?", answer_has("20")),
    Task("shopping-day", "Read notes.txt. Which day is the shopping list for?", answer_has("saturday")),
    Task("find-greet", "Search for the word greet. Which file contains it?", answer_has("app.py")),
]
"""Answer tasks written after the answer pass was built and used only to decide whether the
command line turns it on (``--heldout`` runs them); never tuned against."""


def make_workspace(parent: Path, files: dict[str, str] | None = None) -> Path:
    """A workspace folder under ``parent`` holding ``files`` (relative path: text; default
    :data:`FILES`)."""
    workspace = parent / "ws"
    for relative, text in (FILES if files is None else files).items():
        target = workspace / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return workspace


def agentkit_command() -> list[str]:
    found = shutil.which("agentkit", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "agentkit"]


def server_running() -> bool:
    """Whether a kept local server runs (``agentkit server status``)."""
    done = subprocess.run(
        [*agentkit_command(), "server", "status"], capture_output=True, text=True, cwd=ROOT
    )
    return done.returncode == 0


def stop_server() -> None:
    subprocess.run([*agentkit_command(), "server", "stop"], capture_output=True, cwd=ROOT)


def run_task(
    task: Task,
    timeout: float,
    keep: Path | None = None,
    extra: tuple[str, ...] = (),
    files: dict[str, str] | None = None,
    max_turns: int = 6,
) -> dict[str, object]:
    """Run one task in a fresh workspace (``files``, default :data:`FILES`); its outcome,
    timings and tokens. With ``keep``, the run's JSON event lines and stderr are written to
    ``keep/<task>.jsonl`` and ``.err`` to study. ``extra`` are more options for
    ``agentkit run``."""
    with tempfile.TemporaryDirectory(prefix="agentkit-task-") as tmp:
        workspace = make_workspace(Path(tmp), files)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        argv = [
            *agentkit_command(),
            "run",
            task.prompt,
            "--workspace",
            str(workspace),
            "--yes",
            "--json",
            "--max-turns",
            str(max_turns),
            *extra,
        ]
        started = time.monotonic()
        done, first_request, timed_out = _run_timed(argv, timeout, env)
        total = time.monotonic() - started
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{task.name}.jsonl").write_text(done.stdout, encoding="utf-8")
            (keep / f"{task.name}.err").write_text(done.stderr, encoding="utf-8")
        answer, first_token, tool_calls, errors = "", None, [], []
        tokens = {"input": 0, "cache_read": 0, "output": 0, "requests": 0}
        for line in done.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("type")
            if kind == "progress" and event.get("phase") == "first_event" and first_token is None:
                first_token = event.get("waited_s")
            elif kind == "message_end" and event.get("message", {}).get("role") == "assistant":
                message = event["message"]
                text = "".join(c.get("text", "") for c in message.get("content", []))
                if text.strip():
                    answer = text
                if message.get("error_message"):
                    errors.append(message["error_message"])
                usage = message.get("usage") or {}
                tokens["input"] += int(usage.get("input") or 0)
                tokens["cache_read"] += int(usage.get("cache_read") or 0)
                tokens["output"] += int(usage.get("output") or 0)
                tokens["requests"] += 1
            elif kind == "tool_execution_start":
                tool_calls.append(event.get("tool_name"))
        ok = done.returncode == 0 and not timed_out and task.check(workspace, answer)
        return {
            "task": task.name,
            "ok": ok,
            **({"why": f"timeout after {timeout:g} s"} if timed_out else {}),
            "rc": done.returncode,
            "total_s": round(total, 2),
            "first_token_s": first_token,
            "to_first_request_s": first_request,
            "server": "started" if "starting the local model" in done.stderr else "reused",
            "tools": tool_calls,
            "tokens": tokens,
            "answer": answer[:300],
            "errors": errors,
            "stderr": done.stderr[-300:] if done.returncode else "",
        }


def _run_timed(
    argv: list[str], timeout: float, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float | None, bool]:
    """Run the command, killed after ``timeout`` seconds; also the seconds from its start to
    its first model request (its first ``progress``/``waiting`` line: Python, the CLI, and
    starting or finding the model), and whether it was killed (what it printed is kept)."""
    started = time.monotonic()
    first_request: float | None = None
    lines: list[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT, env=env
        )
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if first_request is None and '"phase": "waiting"' in line:
                    first_request = round(time.monotonic() - started, 2)
            process.wait()
        finally:
            timer.cancel()
        timed_out = time.monotonic() - started >= timeout
        errors.seek(0)
        done = subprocess.CompletedProcess(argv, process.returncode, "".join(lines), errors.read())
    return done, first_request, timed_out


def _median(results: list[dict[str, object]], key: str) -> float | None:
    values = [float(r[key]) for r in results if r.get(key) is not None]  # type: ignore[arg-type]
    return round(statistics.median(values), 2) if values else None


def summarise(results: list[dict[str, object]]) -> dict[str, object]:
    ran = [r for r in results if "total_s" in r or "why" in r]
    ok = [r for r in ran if r["ok"]]
    totals = [float(r["total_s"]) for r in ran if "total_s" in r]  # type: ignore[arg-type]
    firsts = [float(r["first_token_s"]) for r in ran if r.get("first_token_s") is not None]  # type: ignore[arg-type]
    return {
        "tasks": len(ran),
        "succeeded": len(ok),
        "success_rate": round(len(ok) / len(ran), 3) if ran else None,
        "median_total_s": round(statistics.median(totals), 2) if totals else None,
        "median_first_token_s": round(statistics.median(firsts), 2) if firsts else None,
        "median_to_first_request_s": _median(ran, "to_first_request_s"),
        "first_run_total_s": ran[0].get("total_s") if ran else None,
        "runs_after_the_first_median_total_s": (
            round(statistics.median(totals[1:]), 2) if len(totals) > 1 else None
        ),
        "failed": [r["task"] for r in ran if not r["ok"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", action="append", default=[], help="only tasks whose name has this")
    parser.add_argument("--only", action="append", default=[], help="only the task of this name")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per task")
    parser.add_argument("--out", default="bench_tasks.jsonl", help="where results are appended")
    parser.add_argument("--fresh", action="store_true", help="run the fresh tasks instead")
    parser.add_argument("--heldout", action="store_true", help="run the held-out answer tasks")
    parser.add_argument("--keep", help="a folder to keep each task's event lines and stderr in")
    parser.add_argument("--report", help="only summarise this JSONL file of earlier results")
    parser.add_argument(
        "--system-file", help="run with the system prompt in this file instead of the default"
    )
    parser.add_argument("--repeat", type=int, default=1, help="run the chosen tasks N times")
    parser.add_argument(
        "--model", help="the model to run (e.g. local:qwen2.5-coder-1.5b); default: the embedded one"
    )
    parser.add_argument(
        "--cold", action="store_true", help="stop the kept server first: the first run starts it"
    )
    parser.add_argument(
        "--no-keep-server", action="store_true", help="give every run a server of its own"
    )
    args = parser.parse_args()
    if args.report:
        lines = Path(args.report).read_text(encoding="utf-8").splitlines()
        print(json.dumps(summarise([json.loads(x) for x in lines if x.strip()]), indent=2))
        return
    pool = HELDOUT_TASKS if args.heldout else FRESH_TASKS if args.fresh else TASKS
    chosen = [t for t in pool if not args.k or any(word in t.name for word in args.k)]
    chosen = [t for t in chosen if not args.only or t.name in args.only]
    chosen = chosen * max(1, args.repeat)
    extra: tuple[str, ...] = ("--no-keep-server",) if args.no_keep_server else ()
    if args.model:
        extra += ("--model", args.model)
    if args.system_file:
        extra += ("--system", Path(args.system_file).read_text(encoding="utf-8").strip())
    if args.cold:
        stop_server()
    was_running = server_running()
    results = []
    with open(args.out, "a", encoding="utf-8") as out:
        for task in chosen:
            keep = Path(args.keep) if args.keep else None
            result = run_task(task, args.timeout, keep, extra)
            results.append(result)
            out.write(json.dumps(result) + "\n")
            out.flush()
            mark = "ok  " if result["ok"] else "FAIL"
            took = (
                f"{result.get('total_s', '-')} s, first request at "
                f"{result.get('to_first_request_s')} s, first token "
                f"{result.get('first_token_s')} s after it"
            )
            print(f"{mark} {task.name:18} {took} ({result.get('server')})", flush=True)
    if not was_running:
        stop_server()
    print(json.dumps(summarise(results), indent=2))


if __name__ == "__main__":
    main()
