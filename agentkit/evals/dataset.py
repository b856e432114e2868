"""Datasets: named cases and the evaluators that judge them all, from code, from a file, or
from recorded sessions; and the way to run one (:meth:`Dataset.run`, the runner's face).

Files are the pydantic-evals dataset format, in YAML or JSON: ``name``, ``cases`` (each in its
file form, see :mod:`agentkit.evals.cases`) and ``evaluators``. Reading a file validates all of
it and names the first problem; nothing is half-loaded.

This module stands above the runner (:meth:`Dataset.run` calls it) and the sessions' cases
(:meth:`Dataset.from_sessions`); the cases, the evaluators and the recordings it holds are
below them all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._extras import needs_extra
from .cases import Case, case_filter
from .cases import evaluator_types as known_types
from .evaluators import CaseRun, Evaluator, as_evaluator, evaluator_from_spec

if TYPE_CHECKING:
    from .report import Report

DATASET_KEYS = frozenset({"$schema", "name", "cases", "evaluators", "report_evaluators"})


class Dataset:
    """Named cases and the evaluators that judge every one of them (each case may add its
    own). Build one in code, read one from a file (:meth:`from_file`), or make one from recorded
    sessions (:meth:`from_sessions`); run it with :meth:`run`."""

    def __init__(
        self,
        cases: Iterable[Case] = (),
        *,
        name: str = "dataset",
        evaluators: Iterable[Evaluator | Callable[[CaseRun], Any]] = (),
    ) -> None:
        self.name = name
        self.cases = list(cases)
        self.evaluators = [as_evaluator(e) for e in evaluators]
        seen: set[str] = set()
        for case in self.cases:
            if not isinstance(case, Case):
                raise TypeError(f"a dataset holds Case objects, not {case!r}")
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}; a report tells them apart "
                                 "by name")  # fmt: skip
            seen.add(case.name)

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __getitem__(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self.cases)} cases, {len(self.evaluators)} evaluators)"

    def add_evaluator(self, *evaluators: Evaluator | Callable[[CaseRun], Any]) -> Dataset:
        """Judge every case by ``evaluators`` too; return the dataset (for chaining)."""
        self.evaluators.extend(as_evaluator(e) for e in evaluators)
        return self

    def filter(self, **criteria: Any) -> Dataset:
        """The cases that match every criterion (see :func:`case_filter`: ``since``,
        ``until``, ``tags``, ``stop_reasons``, ``tools``, ``sessions``, ``where``), as a new
        dataset with the same evaluators."""
        keep = case_filter(**criteria)
        return Dataset(
            [c for c in self.cases if keep(c)], name=self.name, evaluators=self.evaluators
        )

    # --- sources -------------------------------------------------------------------------------

    @classmethod
    def from_sessions(
        cls,
        store: Any = None,
        *,
        per: Literal["turn", "session"] = "turn",
        output_type: Any = None,
        name: str = "sessions",
        evaluators: Iterable[Evaluator | Callable[[CaseRun], Any]] = (),
        **criteria: Any,
    ) -> Dataset:
        """Cases from the sessions of ``store`` (a :class:`~agentkit.sessions.SessionStore`, a
        URL or path, ``None`` for the default store): one per user turn (``per="turn"``, with
        the turns before it as history) or one per session. Each case's reference is what was
        recorded: the messages, the answer, the tool calls, and the typed output when
        ``output_type`` is given. ``criteria`` filter the cases (see :func:`case_filter`)."""
        from .sessions import cases_from_sessions

        cases = cases_from_sessions(store, per=per, output_type=output_type, **criteria)
        return cls(cases, name=name, evaluators=evaluators)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        evaluator_types: Iterable[type[Evaluator]] = (),
        default_name: str = "dataset",
    ) -> Dataset:
        """A dataset from a file's data (see the module); ``evaluator_types`` are your own
        :class:`Evaluator` classes the file may name."""
        if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
            raise ValueError("a dataset is a mapping with a list of 'cases'")
        unknown = sorted(set(data) - DATASET_KEYS)
        if unknown:
            raise ValueError(f"unknown dataset field(s) {', '.join(unknown)}")
        if data.get("report_evaluators"):
            raise ValueError("report evaluators (pydantic-evals) are not supported; remove them")
        table = known_types(evaluator_types)
        cases = []
        for index, item in enumerate(data["cases"]):
            case = Case.from_dict(
                {"name": f"case {index + 1}", **item} if isinstance(item, Mapping) and not
                item.get("name") else item, table,
            )  # fmt: skip
            cases.append(case)
        evaluators = [evaluator_from_spec(spec, table) for spec in data.get("evaluators") or []]
        return cls(cases, name=str(data.get("name") or default_name), evaluators=evaluators)

    @classmethod
    def from_text(
        cls,
        text: str,
        fmt: Literal["yaml", "json"] = "yaml",
        *,
        evaluator_types: Iterable[type[Evaluator]] = (),
        default_name: str = "dataset",
    ) -> Dataset:
        """A dataset from YAML or JSON text."""
        if fmt == "json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON: {exc}") from None
        else:
            yaml = _yaml()
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ValueError(f"not YAML: {exc}") from None
        return cls.from_dict(data, evaluator_types=evaluator_types, default_name=default_name)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, evaluator_types: Iterable[type[Evaluator]] = ()
    ) -> Dataset:
        """A dataset from a ``.yaml``/``.yml`` or ``.json`` file; its name defaults to the
        file's stem. A bad file raises ``ValueError`` naming the file and the problem."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        try:
            return cls.from_text(
                text, _format(path), evaluator_types=evaluator_types, default_name=path.stem
            )
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The dataset as a file holds it. A function evaluator raises ``TypeError``: a file
        cannot hold it."""
        data: dict[str, Any] = {"name": self.name, "cases": [c.to_dict() for c in self.cases]}
        if self.evaluators:
            data["evaluators"] = [e.spec() for e in self.evaluators]
        return data

    def to_text(self, fmt: Literal["yaml", "json"] = "yaml") -> str:
        """The dataset as YAML or JSON text."""
        data = self.to_dict()
        if fmt == "json":
            return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        return str(_yaml().safe_dump(data, sort_keys=False, allow_unicode=True))

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset to a ``.yaml``/``.yml`` or ``.json`` file (atomically: a failure
        leaves any earlier file as it was); return the path."""
        path = Path(path)
        text = self.to_text(_format(path))
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
        return path

    # --- running -------------------------------------------------------------------------------

    def run(self, agent: Callable[[], Any], **options: Any) -> Report:
        """Run every case on a fresh agent from ``agent()`` and judge it: see
        :func:`agentkit.evals.runner.run_dataset` for the options (``mode``, ``concurrency``,
        ``rate_limiter``, ``judge``, ``progress``, ...)."""
        from .runner import run_dataset

        return run_dataset(self, agent, **options)

    async def arun(self, agent: Callable[[], Any], **options: Any) -> Report:
        """:meth:`run` for asyncio callers: the runner's threads work while the event loop goes
        on; cancelling the awaiting task aborts the evaluation."""
        from .runner import arun_dataset

        return await arun_dataset(self, agent, **options)


def _format(path: Path) -> Literal["yaml", "json"]:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    raise ValueError(f"{path}: a dataset file ends in .yaml, .yml or .json")


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise ImportError(
            needs_extra("YAML dataset files (PyYAML)", "evals") + " (or use .json)"
        ) from None
    return yaml
