"""Cases: what to evaluate, one by one, in code or in a dataset file's form.

A :class:`Case` is one or more user turns to send to a fresh agent (after an optional
``history``), with a reference: an ``expected_output``, a :class:`~agentkit.evals.recording.
Recording` of what the agent once did (its messages, answer and tool calls, which a replay
plays back), or both, and the evaluators that judge it alone. :func:`case_filter` picks cases
by their metadata (from recorded sessions: when, tags, stop reason, tools, session).

A case's file form is pydantic-evals' (see :mod:`agentkit.evals.dataset`): ``name``,
``inputs`` (the prompt, a string, or ``{turns: [...], history: [...]}``), ``metadata`` (a
recording rides in ``metadata.recording``, where pydantic-evals keeps it as data),
``expected_output`` and ``evaluators``, which name the classes :func:`evaluator_types` lists.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, time
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .._serialize import to_jsonable
from ..types import Message, TextContent, UserMessage
from .evaluators import BUILTIN, CaseRun, Evaluator, as_evaluator, evaluator_from_spec
from .judge import LLMJudge
from .recording import Recording, Turn

_MESSAGES = TypeAdapter(list[Message])
_USER_MESSAGES = TypeAdapter(list[UserMessage])

CASE_KEYS = frozenset({"name", "inputs", "metadata", "expected_output", "evaluators"})


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


# --- the evaluators a file may name -----------------------------------------------------------


def evaluator_types(extra: Iterable[type[Evaluator]] = ()) -> dict[str, type[Evaluator]]:
    """The evaluators a file may name, by name: the built-ins, the judge and ``extra``."""
    known: tuple[type[Evaluator], ...] = (*BUILTIN, LLMJudge)
    table = {cls.serial_name(): cls for cls in known}
    for cls in extra:
        if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
            raise TypeError(f"{cls!r} is not an Evaluator subclass")
        table[cls.serial_name()] = cls
    return table
