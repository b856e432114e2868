"""Two task sets for ``agentkit run`` on a small model: twelve everyday tasks of one step and
twelve of two or more, in a workspace of their own, each with an automatic verdict.

They were written for issue 37 ("the embedded agent finishes what it is asked") and kept apart
from :mod:`bench_tasks`'s tasks and from the issue's examples. A verdict reads the workspace
after the run (a file written, a line changed, a script that now runs right) and the final
answer; it never asks the model. ``bench_harness.py`` runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_tasks import Check, Task, answer_has, answer_has_any, file_has

FILES: dict[str, str] = {
    "letter.txt": (
        "Dear Sam,\n"
        "The team meeting moves to Thursday at 10.\n"
        "Please bring the budget sheet.\n"
        "Best,\n"
        "Rita\n"
    ),
    "settings.ini": "[server]\nport = 5000\nworkers = 4\n\n[log]\nlevel = info\n",
    "inventory.csv": "item,qty,price\napples,12,0.5\npears,5,0.8\nplums,30,0.2\nfigs,3,2.0\n",
    "people.json": '{\n  "name": "Ada",\n  "city": "Lyon",\n  "role": "engineer"\n}\n',
    "names.txt": "Ana\nBen\nCleo\nDev\n",
    "version.txt": "2.4.1\n",
    "release/VERSION": "2.5.0\n",
    "scripts/greet.sh": '#!/bin/sh\necho "Good morning"\n',
    "calc.py": (
        "values = [4, 8, 12]\n"
        "total = 0\n"
        "for v in values:\n"
        "    total = v\n"
        'print("total:", total)\n'
    ),
    "logs/app.log": (
        "2024-05-01 10:00:01 INFO service started\n"
        "2024-05-01 10:00:07 WARN disk 81% full\n"
        "2024-05-01 10:01:12 ERROR timeout talking to db\n"
        "2024-05-01 10:02:40 INFO request served\n"
        "2024-05-01 10:03:05 ERROR timeout talking to db\n"
        "2024-05-01 10:04:19 WARN slow response 2.3 s\n"
        "2024-05-01 10:05:55 ERROR cache miss storm\n"
        "2024-05-01 10:06:02 INFO request served\n"
    ),
    "docs/intro.md": "# Intro\n\nThis service keeps a list of orders.\n",
    "docs/deploy.md": "# Deploy\n\nStart it with `make up`; the service listens on port 7070.\n",
    "docs/faq.md": "# FAQ\n\nQ: Where are the logs?\nA: In the logs folder.\n",
    "src/geo/regions.py": 'def region_code():\n    return "EU-WEST-3"\n',
    "src/geo/__init__.py": "",
    "src/shop/cart.py": "def cart_total(items):\n    return sum(i.price for i in items)\n",
}
"""The workspace every task starts from (a fresh copy each run)."""


def json_file_is(path: str, expected: dict[str, object]) -> Check:
    """The verdict: ``path`` holds JSON equal to ``expected``."""

    def check(ws: Path, answer: str) -> bool:
        try:
            return bool(json.loads((ws / path).read_text(encoding="utf-8")) == expected)
        except (OSError, ValueError):
            return False

    return check


def both(first: Check, second: Check) -> Check:
    """The verdict: both checks hold."""
    return lambda ws, answer: first(ws, answer) and second(ws, answer)


def file_words(path: str, *numbers: str) -> Check:
    """The verdict: ``path`` exists and each of ``numbers`` is a whole word of it (``50`` in
    ``total: 50``, never in ``150``)."""

    def check(ws: Path, answer: str) -> bool:
        target = ws / path
        if not target.is_file():
            return False
        words = target.read_text(encoding="utf-8", errors="replace").replace(":", " ").split()
        return all(n in (w.strip(".,;") for w in words) for n in numbers)

    return check


def script_prints(path: str, expected: str) -> Check:
    """The verdict: ``python path`` runs and its output contains ``expected``."""

    def check(ws: Path, answer: str) -> bool:
        if not (ws / path).is_file():
            return False
        try:
            done = subprocess.run(
                [sys.executable, path], cwd=ws, capture_output=True, text=True, timeout=30
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and expected in done.stdout

    return check


def last_line_is(path: str, line: str, keeps: tuple[str, ...]) -> Check:
    """The verdict: the last non-empty line of ``path`` is ``line`` and ``keeps`` are still
    there."""

    def check(ws: Path, answer: str) -> bool:
        target = ws / path
        if not target.is_file():
            return False
        lines = [x.strip() for x in target.read_text(encoding="utf-8").splitlines() if x.strip()]
        return bool(lines) and lines[-1] == line and all(k in lines for k in keeps)

    return check


def lines_are(path: str, wanted: str, unwanted: tuple[str, ...]) -> Check:
    """The verdict: ``path`` has the log lines holding ``wanted`` and none holding ``unwanted``."""
    expected = [x for x in FILES["logs/app.log"].splitlines() if wanted in x]

    def check(ws: Path, answer: str) -> bool:
        target = ws / path
        if not target.is_file():
            return False
        text = target.read_text(encoding="utf-8")
        return all(x in text for x in expected) and not any(u in text for u in unwanted)

    return check


ONE_STEP: list[Task] = [
    Task(
        "meeting-day",
        "According to letter.txt, which day does the meeting move to?",
        answer_has("thursday"),
    ),
    Task(
        "ini-workers",
        "How many workers does settings.ini configure?",
        answer_has_any("4", "four"),
    ),
    Task(
        "write-motto",
        "Create a file motto.txt containing the text: Keep it simple.",
        file_has("motto.txt", "Keep it simple."),
    ),
    Task(
        "run-greet",
        "Run the command: sh scripts/greet.sh and tell me what it prints.",
        answer_has("good morning"),
    ),
    Task(
        "edit-level",
        "In settings.ini, change the log level from info to debug.",
        file_has("settings.ini", "level = debug", "port = 5000", absent=("info",)),
    ),
    Task(
        "list-scripts",
        "Which files are in the scripts folder?",
        answer_has("greet.sh"),
    ),
    Task(
        "search-budget",
        "Search the workspace for the word budget. Which file mentions it?",
        answer_has("letter.txt"),
    ),
    Task("json-city", "Read people.json. Which city does it list?", answer_has("lyon")),
    Task("version", "What version number is written in version.txt?", answer_has("2.4.1")),
    Task(
        "write-json",
        'Create a file point.json with this content: {"x": 1, "y": 2}',
        json_file_is("point.json", {"x": 1, "y": 2}),
    ),
    Task(
        "run-wc",
        "Run the command: wc -l names.txt. How many lines does names.txt have?",
        answer_has_any("4", "four"),
    ),
    Task(
        "largest-qty",
        "Read inventory.csv. Which item has the largest qty?",
        answer_has("plums"),
    ),
]
"""Twelve everyday tasks of one step: read and answer, write a file, run a command, edit a
line, list a folder, search."""

MULTI_STEP: list[Task] = [
    Task(
        "find-port",
        "One of the files in the docs folder says which port the service listens on. Find that "
        "file and tell me the port.",
        answer_has("7070"),
    ),
    Task(
        "letter-summary",
        "Read letter.txt, then write a one-line summary of it to summary.txt.",
        file_has("summary.txt", "Thursday"),
    ),
    Task(
        "count-errors",
        "Count the lines of logs/app.log that contain ERROR and write that number to "
        "errors.txt.",
        file_words("errors.txt", "3"),
    ),
    Task(
        "fix-calc",
        "calc.py should print the sum of its values but prints the wrong total. Fix the bug, "
        "then run python3 calc.py and tell me what it prints.",
        both(script_prints("calc.py", "total: 24"), answer_has("24")),
    ),
    Task(
        "rename-key",
        "In people.json, rename the key role to job, keeping its value.",
        json_file_is("people.json", {"name": "Ada", "city": "Lyon", "job": "engineer"}),
    ),
    Task(
        "append-name",
        "Add the name Zoe as a new last line of names.txt, then tell me how many names the "
        "file has now.",
        both(last_line_is("names.txt", "Zoe", ("Ana", "Dev")), answer_has_any("5", "five")),
    ),
    Task(
        "script-square",
        "Write a Python script square.py that prints 7 squared, then run it with python3 and "
        "tell me its output.",
        both(script_prints("square.py", "49"), answer_has("49")),
    ),
    Task(
        "two-versions",
        "Read version.txt and release/VERSION and tell me the version number in each.",
        answer_has("2.4.1", "2.5.0"),
    ),
    Task(
        "region-code",
        "Find which file under src defines the function region_code, then read it and tell me "
        "the value that function returns.",
        answer_has("eu-west-3"),
    ),
    Task(
        "sum-qty",
        "Add up the qty column of inventory.csv and write the total to total.txt.",
        file_words("total.txt", "50"),
    ),
    Task(
        "filter-warn",
        "Copy the lines of logs/app.log that contain WARN into a new file warnings.txt.",
        lines_are("warnings.txt", "WARN", ("INFO", "ERROR")),
    ),
    Task(
        "ini-to-json",
        "Read settings.ini, then create settings.json holding its port and workers as numbers, "
        'like {"port": ..., "workers": ...}.',
        json_file_is("settings.json", {"port": 5000, "workers": 4}),
    ),
]
"""Twelve everyday tasks of two or more steps: find then answer, read then write, count then
write, fix then run, rename a key, append then count, write then run, compare two files, search
then read, sum a column into a file, filter lines into a file, read one format and write
another."""

SETS: dict[str, list[Task]] = {"one-step": ONE_STEP, "multi-step": MULTI_STEP}
