"""Cases from recorded sessions: real traffic as a regression suite.

Each user turn of a session (or each whole session) becomes a :class:`~agentkit.evals.Case`
whose reference is what the agent recorded then: its replies, tool calls and results, answer,
and typed output. A turn starts at a user message that follows the end of a reply (not a user
message injected between a tool batch and the next request, which belongs to the turn it
steered). Turns that never got a reply are left out: there is nothing to compare them with.

Sessions carry no labels of their own, so tags are records in the session:
:func:`tag_session` appends ``{"role": "tags", "tags": [...]}``, which the agent's model never
sees (only system, user, assistant and tool-result messages reach it) and which every reader
of the session keeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from .._serialize import LLM_ROLES, to_jsonable
from ..errors import SessionConflictError
from ..sessions import Session, SessionInfo, SessionStore, decode_message, open_store, read_jsonl
from ..sessions.order import read_in_turn_order
from ..sessions.session import CONFLICT_RETRIES
from ..transcript import get_current_system_prompt
from ..types import AssistantMessage, UserMessage, now_ms, role_of
from .cases import Case, case_filter, epoch_ms
from .recording import Recording, Turn

TAGS_ROLE = "tags"
"""The role of a session's tag record (see :func:`tag_session`)."""


def tag_session(session: Session, *tags: str) -> None:
    """Label ``session`` with ``tags`` (appended as one record, durable like any message);
    :meth:`Dataset.from_sessions(tags=[...]) <agentkit.evals.Dataset.from_sessions>` filters
    on them."""
    if not tags or not all(isinstance(t, str) and t and t == t.strip() for t in tags):
        raise ValueError(f"tags are non-empty strings without outer spaces, got {tags!r}")
    record = {"role": TAGS_ROLE, "tags": sorted(set(tags)), "timestamp": now_ms()}
    for _ in range(CONFLICT_RETRIES):
        session.load()  # its current version: the record goes at the end
        try:
            session.append(record)
            return
        except SessionConflictError:
            continue  # a run appended meanwhile: read again
    raise SessionConflictError(session.name, session.version, session.version)


def session_tags(messages: Iterable[Any]) -> list[str]:
    """Every tag the session's tag records give it, sorted."""
    found: set[str] = set()
    for message in messages:
        if isinstance(message, dict) and message.get("role") == TAGS_ROLE:
            found.update(t for t in message.get("tags") or () if isinstance(t, str))
    return sorted(found)


def cases_from_sessions(
    store: SessionStore | str | os.PathLike[str] | None = None,
    *,
    per: Literal["turn", "session"] = "turn",
    output_type: Any = None,
    **criteria: Any,
) -> list[Case]:
    """The cases of every session of ``store`` (see the module) that match ``criteria`` (see
    :func:`~agentkit.evals.cases.case_filter`), by session name then turn. ``store`` may also
    be the path of one session's JSONL export (``agentkit sessions export``)."""
    if per not in ("turn", "session"):
        raise ValueError(f"per is 'turn' or 'session', not {per!r}")
    keep = case_filter(**criteria)
    if isinstance(store, (str, os.PathLike)) and os.fspath(store).endswith(".jsonl"):
        name, messages = read_export(store)
        found = cases_from_messages(name, messages, per=per, output_type=output_type)
        return [case for case in found if keep(case)]
    opened = not isinstance(store, SessionStore)
    backend = store if isinstance(store, SessionStore) else open_store(store)
    since = criteria.get("since")
    try:
        cases: list[Case] = []
        for info in backend.list():
            if since is not None and _untouched_since(info, epoch_ms(since)):
                continue  # every turn of it is older
            messages = Session(info.name, backend).load()
            found = cases_from_messages(info.name, messages, per=per, output_type=output_type)
            cases.extend(case for case in found if keep(case))
        return cases
    finally:
        if opened:
            backend.close()


def read_export(path: str | os.PathLike[str]) -> tuple[str, list[Any]]:
    """The name and the messages (in turn order, as a session loads them) of a session's JSONL
    export (``agentkit sessions export``); a bad file raises
    :class:`~agentkit.sessions.SessionImportError` naming its line."""
    with open(path, encoding="utf-8") as file:
        header, records = read_jsonl(file.read())
    messages, _ = read_in_turn_order([decode_message(record) for record in records])
    return str(header.get("name") or Path(path).stem), messages


def _untouched_since(info: SessionInfo, start_ms: int) -> bool:
    return 0 < info.updated_ms < start_ms


def cases_from_messages(
    session: str,
    messages: Sequence[Any],
    *,
    per: Literal["turn", "session"] = "turn",
    output_type: Any = None,
) -> list[Case]:
    """The cases of one session's ``messages`` (as :meth:`Session.load` gives them)."""
    tags = session_tags(messages)
    llm = [m for m in messages if role_of(m) in LLM_ROLES]
    turns = _turns(llm)
    if not turns:
        return []
    spec = _output_spec(output_type)
    if per == "session":
        first, last = turns[0], turns[-1]
        return [
            _case(session, None, llm, first[0], first[1], last[2], [t[0:2] for t in turns],
                  tags, spec)  # fmt: skip
        ]
    return [
        _case(session, number, llm, start, prompt_end, end, [(start, prompt_end)], tags, spec)
        for number, (start, prompt_end, end) in enumerate(turns, 1)
    ]


def _turns(llm: Sequence[Any]) -> list[tuple[int, int, int]]:
    """Each answered turn of the transcript ``llm``: (where its prompt starts, where the prompt
    ends, where the turn ends), as indices."""
    starts: list[int] = []
    previous: Any = None
    for index, message in enumerate(llm):
        role = role_of(message)
        if role == "system":
            continue
        if role == "user" and role_of(previous) != "user" and _reply_ended(previous):
            starts.append(index)
        previous = message
    found = []
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(llm)
        prompt_end = start
        while prompt_end < end and role_of(llm[prompt_end]) in ("user", "system"):
            prompt_end += 1
        if any(isinstance(m, AssistantMessage) for m in llm[prompt_end:end]):
            found.append((start, prompt_end, end))
    return found


def _reply_ended(previous: Any) -> bool:
    """Whether a user message after ``previous`` starts a turn: at the start, or after a reply
    that ended (a user message after tool results or a reply with calls steers the turn)."""
    if previous is None:
        return True
    return isinstance(previous, AssistantMessage) and previous.stop_reason != "tool_use"


def _case(
    session: str,
    number: int | None,
    llm: Sequence[Any],
    start: int,
    prompt_end: int,
    end: int,
    prompts: Sequence[tuple[int, int]],
    tags: list[str],
    spec: Any,
) -> Case:
    """One case: the prompts at ``prompts`` (index ranges), the messages before ``start`` as
    history, and what followed the first prompt up to ``end`` as the recording."""
    history = [m for m in llm[:start] if role_of(m) != "system"]
    turns = [_turn([m for m in llm[a:b] if role_of(m) == "user"]) for a, b in prompts]
    recorded = [m for m in llm[prompt_end:end] if role_of(m) != "system"]
    system = [m for m in llm[:prompt_end] if role_of(m) == "system"]
    recording = Recording(
        messages=recorded, system_prompt=get_current_system_prompt(system) if system else None
    )
    first_prompt = llm[start]
    calls = recording.tool_calls
    metadata: dict[str, Any] = {"session": session}
    if number is not None:
        metadata["turn"] = number
    metadata.update(
        started_at=int(getattr(first_prompt, "timestamp", 0) or 0),
        tags=tags,
        stop_reason=recording.stop_reason,
        tools=sorted({c.name for c in calls}),
    )
    expected: Any = recording.answer
    if spec is not None:
        try:
            expected = to_jsonable(spec.validate_text(recording.answer))
        except Exception as exc:  # the recorded answer does not fit the type: say so, keep it
            metadata["output_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            expected = None
    name = session if number is None else f"{session}#{number}"
    return Case(
        name, turns=turns, history=history, expected_output=expected, metadata=metadata,
        recording=recording,
    )  # fmt: skip


def _turn(messages: list[UserMessage]) -> Turn:
    """A turn from its user messages: the text alone when that is all it says."""
    if len(messages) == 1:
        content = messages[0].content
        if isinstance(content, str):
            return content
        if len(content) == 1 and getattr(content[0], "type", None) == "text":
            return str(content[0].text)  # type: ignore[union-attr]
        return messages[0]
    return messages


def _output_spec(output_type: Any) -> Any:
    if output_type is None:
        return None
    from ..output import OutputSpec

    return OutputSpec.of(output_type)
