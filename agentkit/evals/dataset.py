"""Cases and datasets: what to evaluate, from code, from a file, or from recorded sessions.

A :class:`Case` is one or more user turns to send to a fresh agent (after an optional
``history``), with a reference: an ``expected_output``, a :class:`Recording` of what the agent
once did (its messages, answer and tool calls, which a replay plays back), or both. A
:class:`Dataset` is named cases plus the evaluators every case is judged by.

Files are the pydantic-evals dataset format, in YAML or JSON: ``name``, ``cases`` (each with
``name``, ``inputs``, ``metadata``, ``expected_output`` and ``evaluators``) and ``evaluators``.
``inputs`` is the prompt (a string) or ``{turns: [...], history: [...]}``; a recording rides in
``metadata.recording``, where pydantic-evals keeps it as data. Reading a file validates all of
it and names the first problem; nothing is half-loaded.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from .._serialize import to_jsonable
from ..results import RunUsage
from ..types import AssistantMessage, Message, TextContent, UserMessage
from .evaluators import (
    CaseRun,
    Evaluator,
    ToolCallRecord,
    as_evaluator,
    evaluator_from_spec,
    evaluator_types,
    tool_calls_of,
)

if TYPE_CHECKING:
    from .report import Report

Turn = str | UserMessage | list[UserMessage]
"""What one user turn says: a text, a user message (images too), or several messages sent as
one prompt."""

_MESSAGES = TypeAdapter(list[Message])
_USER_MESSAGES = TypeAdapter(list[UserMessage])

DATASET_KEYS = frozenset({"$schema", "name", "cases", "evaluators", "report_evaluators"})
CASE_KEYS = frozenset({"name", "inputs", "metadata", "expected_output", "evaluators"})


def turn_messages(turn: Turn) -> list[UserMessage]:
    """The user messages a turn sends, as ``agent.prompt()`` makes them."""
    if isinstance(turn, str):
        return [UserMessage(content=[TextContent(text=turn)])]
    if isinstance(turn, UserMessage):
        return [turn]
    return list(turn)


class Recording(BaseModel):
    """What an agent once did for a case: the messages that followed the case's first prompt
    (its replies, tool results and, for a whole session, the later prompts), and the system
    prompt it ran with (``None`` when the session did not store one)."""

    messages: list[Message] = Field(default_factory=list)
    system_prompt: str | None = None

    @property
    def assistant_messages(self) -> list[AssistantMessage]:
        """The recorded model replies, in order: what a replay plays back."""
        return [m for m in self.messages if isinstance(m, AssistantMessage)]

    @property
    def answer(self) -> str:
        """The text of the last recorded reply that has any."""
        for message in reversed(self.assistant_messages):
            if message.text:
                return message.text
        return ""

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """The recorded tool calls, with their recorded results."""
        return tool_calls_of(self.messages)

    @property
    def stop_reason(self) -> str | None:
        """Why the last recorded reply ended."""
        replies = self.assistant_messages
        return replies[-1].stop_reason if replies else None

    @property
    def usage(self) -> RunUsage:
        """The recorded replies' usage added up (their cost included)."""
        total = RunUsage()
        for message in self.assistant_messages:
            total.add(message.usage)
            total.requests += 1
        total.tool_calls = len(self.tool_calls)
        return total


class Case:
    """One thing to evaluate: ``prompt`` (one turn) or ``turns`` (several, sent in order to the
    same agent), after ``history`` (messages the agent starts from, its system message aside).

    ``expected_output`` is the reference answer or typed output, ``recording`` what an agent
    once did (a replay needs one), ``metadata`` free data (cases from sessions carry
    ``session``, ``turn``, ``started_at``, ``tags``, ``stop_reason`` and ``tools``, which
    :meth:`Dataset.filter` reads), ``evaluators`` checks for this case only.
    """

    def __init__(
        self,
        name: str,
        prompt: Turn | None = None,
        *,
        turns: Sequence[Turn] | None = None,
        history: Sequence[Any] = (),
        expected_output: Any = None,
        metadata: Mapping[str, Any] | None = None,
        evaluators: Iterable[Evaluator | Callable[[CaseRun], Any]] = (),
        recording: Recording | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a case needs a name, got {name!r}")
        if (prompt is None) == (turns is None):
            raise ValueError(f"case {name!r}: give either prompt or turns")
        self.name = name
        self.turns: list[Turn] = [prompt] if prompt is not None else list(turns or [])
        if not self.turns:
            raise ValueError(f"case {name!r} has no turn to send")
        for turn in self.turns:
            if not (isinstance(turn, (str, UserMessage)) or (
                isinstance(turn, list) and turn and all(isinstance(m, UserMessage) for m in turn)
            )):  # fmt: skip
                raise TypeError(
                    f"case {name!r}: a turn is a str, a UserMessage or a list of them, not "
                    f"{turn!r}"
                )
        self.history = list(history)
        self.expected_output = expected_output
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.evaluators = [as_evaluator(e) for e in evaluators]
        self.recording = recording

    def __repr__(self) -> str:
        return f"Case({self.name!r}, turns={len(self.turns)})"

    # --- the file form -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The case as a dataset file holds it (pydantic-evals' case fields)."""
        turns = [_turn_data(turn) for turn in self.turns]
        inputs: Any = turns[0] if len(turns) == 1 and isinstance(turns[0], str) else {"turns": turns}
        if self.history:
            inputs = {"turns": turns, "history": [_message_data(m) for m in self.history]}
        data: dict[str, Any] = {"name": self.name, "inputs": inputs}
        metadata = dict(self.metadata)
        if self.recording is not None:
            metadata["recording"] = self.recording.model_dump(mode="json", exclude_none=True)
        if metadata:
            data["metadata"] = to_jsonable(metadata)
        if self.expected_output is not None:
            data["expected_output"] = to_jsonable(self.expected_output)
        if self.evaluators:
            data["evaluators"] = [e.spec() for e in self.evaluators]
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], types: Mapping[str, type[Evaluator]] | None = None
    ) -> Case:
        """A case from a dataset file's data; a bad field raises ``ValueError`` naming it."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a case is a mapping, not {data!r}")
        unknown = sorted(set(data) - CASE_KEYS)
        name = data.get("name")
        label = f"case {name!r}" if name else "a case"
        if unknown:
            raise ValueError(f"{label}: unknown field(s) {', '.join(unknown)}")
        if "inputs" not in data:
            raise ValueError(f"{label} has no inputs")
        turns, history = _read_inputs(data["inputs"], label)
        metadata = dict(data.get("metadata") or {})
        recording = None
        if "recording" in metadata:
            try:
                recording = Recording.model_validate(metadata.pop("recording"))
            except ValidationError as exc:
                raise ValueError(f"{label}: a bad recording: {_first_error(exc)}") from None
        table = types if types is not None else evaluator_types()
        return cls(
            str(name) if name else "",
            turns=turns,
            history=history,
            expected_output=data.get("expected_output"),
            metadata=metadata,
            evaluators=[evaluator_from_spec(spec, table) for spec in data.get("evaluators") or []],
            recording=recording,
        )


def _turn_data(turn: Turn) -> Any:
    if isinstance(turn, str):
        return turn
    if isinstance(turn, UserMessage):
        text = _plain_text(turn)
        return text if text is not None else _message_data(turn)
    return [_message_data(m) for m in turn]


def _plain_text(message: UserMessage) -> str | None:
    """The text of a user message that is only text in one block, else ``None``."""
    content = message.content
    if isinstance(content, str):
        return content
    if len(content) == 1 and isinstance(content[0], TextContent):
        return content[0].text
    return None


def _message_data(message: Any) -> Any:
    return message.model_dump(mode="json") if isinstance(message, BaseModel) else message


def _read_inputs(inputs: Any, label: str) -> tuple[list[Turn], list[Any]]:
    """The turns and history a file's ``inputs`` holds."""
    if isinstance(inputs, str):
        return [inputs], []
    if not isinstance(inputs, Mapping) or not ({"turns", "prompt"} & set(inputs)):
        raise ValueError(
            f"{label}: inputs is a prompt (a string) or a mapping with 'prompt' or 'turns' "
            f"(and 'history'), not {inputs!r}"
        )
    raw = [inputs["prompt"]] if "prompt" in inputs else inputs["turns"]
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{label}: 'turns' is a non-empty list")
    try:
        turns: list[Turn] = []
        for item in raw:
            if isinstance(item, str):
                turns.append(item)
            elif isinstance(item, list):
                turns.append(_USER_MESSAGES.validate_python(item))
            else:
                turns.append(UserMessage.model_validate(item))
        history = _MESSAGES.validate_python(inputs.get("history") or [])
    except ValidationError as exc:
        raise ValueError(f"{label}: a bad message in inputs: {_first_error(exc)}") from None
    return turns, list(history)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


# --- filters ----------------------------------------------------------------------------------

When = datetime | date | float | int | str


def epoch_ms(value: When) -> int:
    """A moment as milliseconds since the epoch: an aware ``datetime`` (a naive one is local
    time), a ``date`` (its midnight, local time), epoch seconds, or an ISO 8601 text."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 date or time: {value!r}") from None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime.combine(value, time()).timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a moment is a datetime, a date, epoch seconds or ISO text, not {value!r}")
    return int(value * 1000)


def case_filter(
    *,
    since: When | None = None,
    until: When | None = None,
    tags: Iterable[str] | None = None,
    stop_reasons: Iterable[str] | None = None,
    tools: Iterable[str] | None = None,
    sessions: Iterable[str] | None = None,
    where: Callable[[Case], bool] | None = None,
) -> Callable[[Case], bool]:
    """A predicate on cases, from their metadata: started at or after ``since`` and before
    ``until``; tagged with any of ``tags``; whose recording ended with one of ``stop_reasons``;
    that called any of ``tools``; from a session whose name matches one of the ``sessions``
    patterns (``fnmatch``); and for which ``where(case)`` holds. A case without the metadata a
    filter reads does not match it."""
    start = epoch_ms(since) if since is not None else None
    end = epoch_ms(until) if until is not None else None
    tag_set = set(tags) if tags is not None else None
    stops = set(stop_reasons) if stop_reasons is not None else None
    tool_set = set(tools) if tools is not None else None
    patterns = list(sessions) if sessions is not None else None

    def matches(case: Case) -> bool:
        meta = case.metadata
        started = meta.get("started_at")
        if start is not None or end is not None:
            if not isinstance(started, int):
                return False
            if (start is not None and started < start) or (end is not None and started >= end):
                return False
        if tag_set is not None and not tag_set & set(meta.get("tags") or ()):
            return False
        if stops is not None and meta.get("stop_reason") not in stops:
            return False
        if tool_set is not None and not tool_set & set(meta.get("tools") or ()):
            return False
        if patterns is not None:
            name = meta.get("session")
            if not isinstance(name, str) or not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return False
        return where is None or bool(where(case))

    return matches


# --- the dataset ------------------------------------------------------------------------------


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
        from .evaluators import evaluator_types as known

        if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
            raise ValueError("a dataset is a mapping with a list of 'cases'")
        unknown = sorted(set(data) - DATASET_KEYS)
        if unknown:
            raise ValueError(f"unknown dataset field(s) {', '.join(unknown)}")
        if data.get("report_evaluators"):
            raise ValueError("report evaluators (pydantic-evals) are not supported; remove them")
        table = known(evaluator_types)
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
            "YAML dataset files need PyYAML: pip install 'agentkit[evals]' (or use .json)"
        ) from None
    return yaml

