"""``agentkit eval``: run a dataset file against an agent factory, print the report, and exit
non-zero under a threshold (wired into the parser in :mod:`agentkit.cli.app`).

``agentkit eval cases.yaml --agent myapp:make_agent --mode replay`` runs the file;
``--from-sessions`` first writes the file from the recorded sessions (``--store``, filters), and
runs it when ``--agent`` is given too. ``--save`` keeps the report as JSON; ``--compare`` prints
how it differs from a saved one. Exit status: 0 when the report clears ``--min-pass-rate``
(every case by default) and ``--min-score``, 1 when it does not, 2 for a usage error, 130 after
Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .console import EXIT_INTERRUPTED, Console
from .sessions import STORE_HELP


def add_eval_command(commands: Any) -> None:
    """The ``agentkit eval`` command and its options."""
    parser = commands.add_parser(
        "eval", help="run a dataset of cases against an agent; build one from sessions"
    )
    parser.add_argument("dataset", help="the dataset file (.yaml, .yml or .json)")
    parser.add_argument("--agent", metavar="MODULE:FACTORY",
                        help="the function that makes the agent under test")  # fmt: skip
    parser.add_argument("--mode", choices=["live", "replay"], default="live",
                        help="ask the agent's model (live) or play the recordings (replay)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=4, help="cases at once (default 4)")
    parser.add_argument("--judge", metavar="MODULE:FACTORY",
                        help="the function that makes the agent an LLMJudge asks")  # fmt: skip
    parser.add_argument("--evaluator", action="append", default=[], metavar="SPEC",
                        help="judge every case by this too, e.g. SameToolCalls or "
                        "'{\"Contains\": \"Paris\"}' (repeatable)")  # fmt: skip
    parser.add_argument("--min-pass-rate", type=float, default=1.0, metavar="RATE",
                        help="fail under this share of passed cases (default 1.0: all)")  # fmt: skip
    parser.add_argument("--min-score", type=float, default=None, metavar="SCORE",
                        help="fail under this mean score")  # fmt: skip
    parser.add_argument("--name", help="the report's name, shown in its tables and pages and "
                        "in a comparison (default: the dataset's)")  # fmt: skip
    parser.add_argument("--save", metavar="REPORT.json", help="write the report as JSON")
    parser.add_argument("--compare", metavar="BASELINE.json",
                        help="print how this report differs from a saved one")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    sources = parser.add_argument_group("building the dataset from sessions")
    sources.add_argument("--from-sessions", action="store_true",
                         help="write DATASET from the recorded sessions first")  # fmt: skip
    sources.add_argument("--store", help=STORE_HELP)
    sources.add_argument("--per", choices=["turn", "session"], default="turn",
                         help="a case per user turn (default) or per session")  # fmt: skip
    sources.add_argument("--since", help="turns from this date or time on (ISO 8601)")
    sources.add_argument("--until", help="turns before this date or time (ISO 8601)")
    sources.add_argument("--tag", action="append", help="sessions with this tag (repeatable)")
    sources.add_argument("--stop-reason", action="append",
                         help="turns that ended this way: stop, length, error, ...")  # fmt: skip
    sources.add_argument("--tool", action="append", help="turns that called this tool")
    sources.add_argument("--session", action="append", metavar="PATTERN",
                         help="sessions whose name matches (fnmatch; repeatable)")  # fmt: skip


def run_eval_command(args: argparse.Namespace, io: Console) -> int:
    """Carry out ``agentkit eval``; return the exit status."""
    from ..evals import Dataset, EvalInterrupted, Report
    from ..evals.loading import evaluator_from_text, load_object
    from ..evals.progress import make_progress
    from ..evals.report import terminal_width, wants_color

    try:
        if args.from_sessions:
            dataset = _build(args)
            dataset.to_file(args.dataset)
            io.err(f"agentkit: wrote {len(dataset)} cases to {args.dataset}")
            if args.agent is None:
                return 0
        elif args.agent is None:
            raise ValueError("--agent MODULE:FACTORY is needed to run the dataset")
        dataset = Dataset.from_file(args.dataset)
        dataset.add_evaluator(*(evaluator_from_text(text) for text in args.evaluator))
        factory = load_object(args.agent, "agent factory")
        judge = load_object(args.judge, "judge factory") if args.judge else None
        baseline = Report.load(args.compare) if args.compare else None
    except (ValueError, TypeError, OSError, ImportError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    try:
        report = dataset.run(
            factory, mode=args.mode, concurrency=args.concurrency, judge=judge,
            progress=make_progress("auto", io.stderr), name=args.name,
        )  # fmt: skip
    except EvalInterrupted as interrupted:
        io.out(interrupted.report.table(terminal_width(io.stdout), wants_color(io.stdout)))
        io.err("agentkit: interrupted")
        return EXIT_INTERRUPTED
    except (ValueError, TypeError) as exc:
        io.err(f"agentkit: {exc}")
        return 2
    if args.save:
        report.save(args.save)
    if args.json:
        data: dict[str, Any] = report.to_dict()
        if baseline is not None:
            data["comparison"] = report.compare(baseline).to_dict()
        io.out(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        width, color = terminal_width(io.stdout), wants_color(io.stdout)
        io.out(report.table(width, color))
        if baseline is not None:
            io.out("")
            io.out(report.compare(baseline).table(width, color))
    if report.meets(args.min_pass_rate, args.min_score):
        return 0
    io.err(f"agentkit: below the threshold: {_threshold(report, args)}")
    return 1


def _build(args: argparse.Namespace) -> Any:
    from ..evals import Dataset

    criteria: dict[str, Any] = {
        "since": args.since,
        "until": args.until,
        "tags": args.tag,
        "stop_reasons": args.stop_reason,
        "tools": args.tool,
        "sessions": args.session,
    }
    criteria = {k: v for k, v in criteria.items() if v is not None}
    return Dataset.from_sessions(
        args.store, per=args.per, name=Path(args.dataset).stem, **criteria
    )


def _threshold(report: Any, args: argparse.Namespace) -> str:
    parts = [f"pass rate {report.pass_rate:.0%} (needs {args.min_pass_rate:.0%})"]
    if args.min_score is not None:
        score = "-" if report.score is None else f"{report.score:.2f}"
        parts.append(f"score {score} (needs {args.min_score:.2f})")
    return ", ".join(parts)
