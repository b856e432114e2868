"""The page's evaluation reports: the reports in a folder, one report case by case, and the
comparison of two (a baseline and a candidate), which is what a team reads before merging.

The reports are the JSON files that ``agentkit eval --save`` (or ``--json``) and
:meth:`agentkit.evals.Report.save` write, in the folder ``agentkit ui --reports DIR`` names and
its subfolders. A file is read again only when it changes. A JSON file that is not a report (it
has no ``mode`` and ``cases``) is left out; one that looks like a report but cannot be read is
listed as a problem, and the others still show. A report is named on the page by its path in the
folder, and only files inside the folder are ever read (no ``..``, no symbolic link out).
"""

from __future__ import annotations

import json
import os
import stat as stat_module
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Blueprint, abort, render_template, request

from ..evals.report import CaseResult, Comparison, Report, money
from .render import fold
from .view import pretty

MAX_FILES = 1000
"""JSON files the folder is searched for at most (the most recently changed first)."""

MAX_BYTES = 64 << 20
"""A larger file is listed as a problem, not read (a report of 1,000 cases is a few MB)."""

STATUSES = ("passed", "failed", "diverged", "error", "cancelled")


@dataclass(frozen=True)
class Shelved:
    """A report found in the folder: its ``name`` (its path in the folder, with ``/``), the
    :class:`Report`, and when its file last changed (seconds since the epoch)."""

    name: str
    report: Report
    modified: float

    @property
    def when(self) -> float:
        """When the evaluation started, else when its file was written."""
        return self.report.started_at or self.modified


@dataclass(frozen=True)
class Problem:
    """A file that looks like a report but could not be read, and why."""

    name: str
    problem: str


class ReportShelf:
    """The evaluation reports in ``folder`` (and its subfolders), each read again only when
    its file changes. Safe to share between the server's request threads."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).expanduser().resolve()
        # Guards _read: request threads look reports up and fill it at once.
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[tuple[int, int], Shelved | Problem | None]] = {}

    def scan(self) -> tuple[list[Shelved], list[Problem]]:
        """Every report in the folder, newest first, and the files that could not be read."""
        reports: list[Shelved] = []
        problems: list[Problem] = []
        files = self._files()
        with self._lock:  # forget the files that are gone
            for gone in self._read.keys() - set(files):
                del self._read[gone]
        for path in files:
            found = self._load(path)
            if isinstance(found, Shelved):
                reports.append(found)
            elif isinstance(found, Problem):
                problems.append(found)
        reports.sort(key=lambda s: (s.when, s.name), reverse=True)
        return reports, problems

    def get(self, name: str) -> Shelved:
        """The report named ``name`` (its path in the folder); :class:`LookupError` saying why
        when there is none (outside the folder, not a report, unreadable)."""
        path = self.path(name)
        found = self._load(path) if path.is_file() else None
        if isinstance(found, Problem):
            raise LookupError(f"{name}: {found.problem}")
        if found is None:
            raise LookupError(f"no report named {name!r} in {self.folder}")
        return found

    def path(self, name: str) -> Path:
        """The file of report ``name``; :class:`LookupError` for a name that leaves the folder
        or is not a ``.json`` file."""
        if not name.endswith(".json") or "\x00" in name:
            raise LookupError(f"no report named {name!r}: reports are .json files")
        path = (self.folder / name).resolve()
        if not path.is_relative_to(self.folder) or path == self.folder:
            raise LookupError(f"no report named {name!r} in {self.folder}")
        return path

    def _files(self) -> list[Path]:
        """The folder's JSON files, outside hidden folders, the most recently changed first."""
        if not self.folder.is_dir():
            return []
        found: list[tuple[float, Path]] = []
        for root, folders, files in os.walk(self.folder):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            for file in files:
                if file.endswith(".json") and not file.startswith("."):
                    path = Path(root, file)
                    try:
                        found.append((path.stat().st_mtime, path))
                    except OSError:  # gone since the listing
                        continue
        found.sort(key=lambda item: item[0], reverse=True)
        return [path for _, path in found[:MAX_FILES]]

    def _load(self, path: Path) -> Shelved | Problem | None:
        """The report in ``path`` (``None``: not a report), read again when it changed."""
        try:
            real = path.resolve()
            stat = real.stat()
        except OSError:
            return None
        if not real.is_relative_to(self.folder):  # a symbolic link out of the folder
            return None
        if not stat_module.S_ISREG(stat.st_mode):  # a pipe would block the reader forever
            return None
        name = path.relative_to(self.folder).as_posix()
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._read.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        found = _read(real, name, stat.st_size, stat.st_mtime)
        with self._lock:
            self._read[path] = (key, found)
        return found


def _read(path: Path, name: str, size: int, modified: float) -> Shelved | Problem | None:
    """One file as a report, a problem, or ``None`` when it is some other JSON."""
    if size > MAX_BYTES:
        return Problem(name, f"too large to read here ({size:,} bytes)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return Problem(name, f"cannot read it: {exc}")
    except json.JSONDecodeError as exc:
        return Problem(name, f"not JSON: {exc}")
    if not isinstance(data, dict) or "cases" not in data or "mode" not in data:
        return None
    try:
        return Shelved(name, Report.from_dict(data), modified)
    except (ValueError, TypeError, AttributeError) as exc:
        return Problem(name, f"not an evaluation report: {exc}")


# --- what the templates show -----------------------------------------------------------------


def score_text(score: float | None) -> str:
    """A score to two places, ``-`` when there is none."""
    return "-" if score is None else f"{score:.2f}"


def delta_text(delta: float | None, points: bool = False) -> str:
    """A signed difference (of a score, or of a rate in percentage points)."""
    if delta is None:
        return "-"
    return f"{delta * 100:+.0f} pts" if points else f"{delta:+.2f}"


def trend(delta: float | None, lower_is_better: bool = False) -> str:
    """The CSS class of a difference: ``up`` (better), ``down`` (worse) or ``flat``."""
    if delta is None or abs(delta) < 1e-9:
        return "flat"
    return "up" if (delta > 0) != lower_is_better else "down"


def value_text(value: Any) -> str:
    """An evaluation's value: ``pass`` or ``fail`` for an assertion, else the score."""
    if isinstance(value, bool):
        return "pass" if value else "fail"
    return f"{float(value):.2f}"


def case_ids(report: Report) -> dict[str, str]:
    """The anchor of each case on its report's page (case names may hold any text)."""
    return {r.name: f"case-{index}" for index, r in enumerate(report.cases)}


def _pair(reports: list[Shelved]) -> tuple[str, str]:
    """The comparison the list offers first: the newest report against the one before it."""
    if len(reports) < 2:
        return "", ""
    return reports[1].name, reports[0].name


def evals_blueprint(shelf: ReportShelf | None) -> Blueprint:
    """The routes of the evaluation pages over ``shelf`` (``None``: the page says how to give
    it a folder)."""
    pages = Blueprint("evals", __name__)

    @pages.app_context_processor
    def helpers() -> dict[str, Any]:
        return {"money": money, "score_text": score_text, "delta_text": delta_text,
                "trend": trend, "value_text": value_text, "pretty": pretty,
                "fold": fold}  # fmt: skip

    def _shelf() -> ReportShelf:
        if shelf is None:
            abort(404, "start the page with --reports DIR to read evaluation reports")
        return shelf

    def _get(name: str) -> Shelved:
        try:
            return _shelf().get(name)
        except LookupError as exc:
            abort(404, str(exc))

    @pages.get("/evals")
    def listing() -> str:
        if shelf is None:
            return render_template("evals.html", folder=None, reports=[], problems=[],
                                   pair=("", ""))  # fmt: skip
        reports, problems = shelf.scan()
        return render_template("evals.html", folder=shelf.folder, reports=reports,
                               problems=problems, pair=_pair(reports))  # fmt: skip

    @pages.get("/evals/report/<path:name>")
    def report_page(name: str) -> str:
        shelved = _get(name)
        wanted = request.args.get("status", "")
        shown: list[CaseResult] = [
            r for r in shelved.report.cases if not wanted or r.status == wanted
        ]
        others = [s.name for s in _shelf().scan()[0] if s.name != name]
        return render_template("eval_report.html", shelved=shelved, report=shelved.report,
                               shown=shown, wanted=wanted, statuses=STATUSES, others=others,
                               ids=case_ids(shelved.report))  # fmt: skip

    @pages.get("/evals/compare")
    def compare() -> str:
        before_name = request.args.get("baseline", "")
        after_name = request.args.get("candidate", "")
        if not before_name or not after_name:
            abort(400, "say which reports to compare: ?baseline=NAME&candidate=NAME")
        before, after = _get(before_name), _get(after_name)
        comparison = Comparison(before.report, after.report)
        return render_template("eval_compare.html", before=before, after=after,
                               comparison=comparison,
                               before_ids=case_ids(before.report),
                               after_ids=case_ids(after.report))  # fmt: skip

    return pages
