"""Compaction: keeping a long conversation inside the model's context window without losing it.

The transcript stays append-only and whole (the audit record, and a session's): a compaction is
one more entry in it, a :class:`~agentkit.transcript.CompactionRecord` of role
``"compaction"``, holding a summary of the older messages and the index of the first message it
keeps. Before each request the loop shows the model :func:`~agentkit.transcript.compacted_view`:
the system messages, the latest summary, and the messages from its first kept one on. A reload
in another process reads the same entries and so sees the same view.

With ``Agent(compaction=Compaction())`` (or ``compaction="summarize"``) the loop compacts

- when the next request's estimated input (the last response's reported input tokens plus an
  estimate of what was added since, :func:`estimate_tokens`) crosses ``threshold`` of the
  model's context window (the catalog's ``Model.context_window``; for the embedded model, the
  server's context size); and
- when the provider refuses a request as too long (:class:`~agentkit.errors.ContextOverflowError`,
  recognised in each API's own words): it compacts, then sends that request once more. A second
  overflow ends the run with an error that says what to do.

The cut is pair-safe by construction (:func:`choose_cut`): it never falls between an assistant
message's tool calls and their results, never drops a system message (they always lead the
view), and never drops the messages the current turn brings (a prompt, a steering message).

Strategies: ``"summarize"`` asks the same model for a summary (through the run's stream
function, abort signal, budgets and usage), ``"trim"`` drops the oldest messages and says so
(cheap: the embedded model's choice), or a function of the user's own that takes a
:class:`CompactionJob` and returns the summary text. ``agent.compact()`` compacts on demand.
Each compaction emits ``compaction_start`` and ``compaction_end`` around its record's
``message_start``/``message_end``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._serialize import LLM_ROLES
from .errors import AbortError, CompactionError, ContextOverflowError, ProviderError
from .events import (
    AgentEvent,
    CompactionEndEvent,
    CompactionStartEvent,
    MessageEndEvent,
    MessageStartEvent,
)
from .policy import ModelRequest, RequestHandler, RunPolicy, RunScope
from .transcript import (
    COMPACTION_ROLE,
    SUMMARY_TEXT,
    CompactionRecord,
    compacted_view,
    first_kept,
    latest_compaction,
    user_message,
)
from .types import (
    AssistantMessage,
    FieldsEqRepr,
    ImageContent,
    Model,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    role_of,
)

__all__ = [
    "Compaction",
    "CompactionJob",
    "CompactionPolicy",
    "CompactionRecord",
    "ModelAccess",
    "SUMMARY_TEXT",
    "choose_cut",
    "compact",
    "estimate_tokens",
    "is_compaction",
    "message_tokens",
    "summarize",
    "trim",
]

CHARS_PER_TOKEN = 4
"""The estimate's rule of thumb for text the model has not counted yet."""

IMAGE_TOKENS = 1200
"""What one image is estimated to cost."""

RESULT_CHARS = 4000
"""How much of one tool result a summary request shows (the rest is cut, and says so)."""

SUMMARY_SYSTEM = (
    "You keep the working memory of an assistant whose conversation no longer fits its context "
    "window. Write a summary it can carry on from: what the user wants, the decisions taken, the "
    "facts learnt (names, numbers, file paths, what the tools returned), what was done and what "
    "is still open. Be specific and brief, in short bullet points. Invent nothing. Do not "
    "address the user and do not call tools."
)
"""The system prompt of a ``summarize`` request."""

OVERFLOW_ADVICE = (
    "The conversation does not fit the model's context window{window} even after compaction "
    "({detail}). The system prompt and this turn's own messages are never compacted: shorten "
    "them (a smaller prompt or smaller tool results), lower Compaction(keep_tokens=...), or use "
    "a model with a larger context window."
)
"""The error a second overflow ends the run with."""

Strategy = Literal["summarize", "trim"] | Callable[["CompactionJob"], str]


class Compaction(BaseModel):
    """When and how a run compacts its transcript (``Agent(compaction=...)``).

    ``strategy`` is ``"summarize"``, ``"trim"`` or a function ``(job: CompactionJob) -> str``
    giving the summary. ``threshold`` is the fraction of the context window the next request's
    estimated input may reach before the loop compacts; ``keep_tokens`` how many tokens of the
    latest messages a compaction keeps as they are (default: 30% of the window).
    ``context_window`` overrides the model's (0 or less turns the threshold off, leaving the
    overflow retry and ``agent.compact()``). ``summary_tokens`` bounds a summary's length
    (default: an eighth of the window, at most 2048). ``retry_on_overflow`` compacts and retries
    a request the provider refused as too long.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    strategy: Strategy = "summarize"
    threshold: float = Field(default=0.8, gt=0, le=1)
    keep_tokens: int | None = Field(default=None, gt=0)
    context_window: int | None = None
    summary_tokens: int | None = Field(default=None, gt=0)
    retry_on_overflow: bool = True

    @classmethod
    def of(cls, value: Any) -> Compaction | None:
        """Accept a :class:`Compaction`, a dict of its fields, a strategy (``"summarize"``,
        ``"trim"`` or a function), ``True`` (the defaults), or ``None``/``False`` (off)."""
        if value is None or value is False:
            return None
        if isinstance(value, Compaction):
            return value
        if value is True:
            return cls()
        if isinstance(value, dict):
            return cls.model_validate(value)
        if isinstance(value, str) or callable(value):
            return cls(strategy=value)
        raise TypeError(
            "compaction must be a Compaction, a dict of its fields, 'summarize', 'trim', a "
            f"function of a CompactionJob, True or None; got {type(value).__name__}"
        )

    @property
    def strategy_name(self) -> str:
        """``"summarize"``, ``"trim"``, or the name of the user's function."""
        if isinstance(self.strategy, str):
            return self.strategy
        return str(getattr(self.strategy, "__name__", "custom"))

    def window_for(self, model: Model) -> int:
        """The context window compaction keeps to: ``context_window``, else the model's."""
        if self.context_window is not None:
            return self.context_window
        return int(model.context_window or 0)

    def keep_for(self, window: int, tokens: int) -> int:
        """How many tokens of the latest messages to keep (``tokens``: the estimate now)."""
        if self.keep_tokens is not None:
            return self.keep_tokens
        return max(window * 3 // 10, 1) if window > 0 else max(tokens // 4, 1)

    def summary_limit(self, window: int) -> int:
        """The output token limit of a summary request."""
        if self.summary_tokens is not None:
            return self.summary_tokens
        return min(2048, max(256, window // 8)) if window > 0 else 2048


# --- estimating -------------------------------------------------------------------------------


def _text_chars(content: Any) -> tuple[int, int]:
    """Characters and images of a message's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    for block in content or ():
        if isinstance(block, TextContent):
            chars += len(block.text)
        elif isinstance(block, ThinkingContent):
            chars += len(block.thinking)
        elif isinstance(block, ToolCall):
            chars += len(block.name) + len(json.dumps(block.arguments, ensure_ascii=False))
        elif isinstance(block, ImageContent):
            images += 1
        elif isinstance(block, dict):
            chars += len(json.dumps(block, ensure_ascii=False, default=str))
    return chars, images


def message_tokens(message: Any) -> int:
    """An estimate of the tokens ``message`` costs a request (characters / 4, an image 1200,
    a few for the message's framing); 0 for a role the model does not read."""
    role = role_of(message)
    if role not in LLM_ROLES:
        return 0
    if isinstance(message, SystemMessage):
        chars, images = _text_chars(message.content)
        chars += sum(len(v or "") for v in (message.sections or {}).values())
        for decl in message.tools_added or ():
            chars += len(json.dumps(decl.model_dump(mode="json"), ensure_ascii=False))
    elif isinstance(message, (UserMessage, AssistantMessage, ToolResultMessage)):
        chars, images = _text_chars(message.content)
    else:  # a dict of a model role
        chars, images = len(json.dumps(message, ensure_ascii=False, default=str)), 0
    return chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS + 4


def _reported_input(message: Any) -> int:
    """The context a response reported it read and wrote (0 for none, or a failed request)."""
    if not isinstance(message, AssistantMessage) or message.stop_reason in ("error", "aborted"):
        return 0
    usage = message.usage
    seen = usage.input + usage.cache_read + usage.cache_write
    return seen + usage.output if seen > 0 else 0


def estimate_tokens(messages: Sequence[Any]) -> int:
    """The estimated input of the next request over the transcript ``messages``: the last
    response's reported input and output tokens plus an estimate of the messages after it;
    the whole view estimated when no response since the latest compaction reported usage."""
    found = latest_compaction(messages)
    floor = found[0] if found is not None else -1
    for index in range(len(messages) - 1, floor, -1):
        reported = _reported_input(messages[index])
        if reported:
            return reported + sum(message_tokens(m) for m in messages[index + 1 :])
    return sum(message_tokens(m) for m in compacted_view(list(messages)))


# --- where to cut -----------------------------------------------------------------------------


def _unsafe_cuts(messages: Sequence[Any]) -> set[int]:
    """The indexes a cut must not fall on: every index after an assistant message with tool
    calls up to its last result, so a call and its result are always on the same side."""
    called_at: dict[str, int] = {}
    unsafe: set[int] = set()
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCall):
                    called_at[block.id] = index
        elif isinstance(message, ToolResultMessage):
            unsafe.add(index)
            at = called_at.get(message.tool_call_id)
            if at is not None:
                unsafe.update(range(at + 1, index + 1))
    return unsafe


def compaction_start(messages: Sequence[Any]) -> int:
    """Where the messages a compaction may drop begin: the latest compaction's first kept
    message, else the transcript's first message that is not a system message."""
    found = latest_compaction(messages)
    if found is not None:
        return first_kept(*found)
    for index, message in enumerate(messages):
        if role_of(message) != "system":
            return index
    return len(messages)


def choose_cut(
    messages: Sequence[Any], start: int, protect_from: int, keep_tokens: int
) -> int | None:
    """The index of the first message to keep, or ``None`` when nothing can be dropped.

    Candidates are user and assistant messages after ``start`` and no later than
    ``protect_from`` (the current turn's own messages are kept), never between a tool call and
    its result. Of those, the earliest whose kept tail fits ``keep_tokens`` wins; when none
    fits, the latest (the most that can be dropped).
    """
    limit = min(protect_from, len(messages) - 1)
    unsafe = _unsafe_cuts(messages)
    candidates = [
        index
        for index in range(start + 1, limit + 1)
        if role_of(messages[index]) in ("user", "assistant") and index not in unsafe
    ]
    if not candidates:
        return None
    tail = 0
    fits: int | None = None
    next_index = len(messages)
    for index in reversed(candidates):
        tail += sum(message_tokens(m) for m in messages[index:next_index])
        next_index = index
        if tail > keep_tokens:
            break
        fits = index
    return fits if fits is not None else candidates[-1]


# --- reaching the model -----------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class ModelAccess(FieldsEqRepr):
    """How a compaction reaches the run's model: its ``model`` and ``request``, the run's one
    request path (:meth:`~agentkit.policy.RunScope.complete`: its abort, deadline and usage), so
    a summary request is one of the run's requests."""

    model: Model
    request: Callable[[list[Any], int], AssistantMessage]
    """``request(messages, max_tokens)``: the final message, an ``error`` or ``aborted`` one
    when the request failed."""

    def complete(self, messages: list[Any], max_tokens: int) -> AssistantMessage:
        """One request without tools; the final message. A failed or aborted request raises
        :class:`CompactionError` with its message."""
        final = self.request(messages, max_tokens)
        if final.stop_reason in ("error", "aborted"):
            raise CompactionError(f"the summary request failed: {final.error_message}")
        return final


@dataclass(eq=False, repr=False)
class CompactionJob(FieldsEqRepr):
    """What a strategy is given: the ``messages`` to compact away (oldest first), the
    ``previous_summary`` they follow (``None`` for the first compaction), and a way to ask the
    run's model (:meth:`complete`), whose requests count in the run's usage and budgets."""

    messages: list[Any]
    previous_summary: str | None
    previous_strategy: str | None
    context_window: int
    summary_tokens: int
    reason: str
    access: ModelAccess | None = None
    tokens_before: int = 0
    usage: Usage = field(default_factory=Usage)
    requests: int = 0

    def complete(self, messages: list[Any], max_tokens: int | None = None) -> AssistantMessage:
        """Ask the run's model (no tools); raises :class:`CompactionError` when it fails."""
        if self.access is None:
            raise CompactionError("this compaction has no model to ask")
        final = self.access.complete(messages, max_tokens or self.summary_tokens)
        self.requests += 1
        _add_usage(self.usage, final.usage)
        return final

    def render(self, max_chars: int) -> list[str]:
        """The messages as plain text, in pieces of at most ``max_chars`` characters (a long
        tool result is cut to :data:`RESULT_CHARS` first)."""
        pieces: list[str] = []
        current = ""
        for message in self.messages:
            for line in _render_message(message):
                line = line[: max(max_chars - 1, 1)]
                if current and len(current) + len(line) + 1 > max_chars:
                    pieces.append(current)
                    current = ""
                current = f"{current}\n{line}" if current else line
        if current:
            pieces.append(current)
        return pieces


def _add_usage(total: Usage, more: Usage) -> None:
    total.input += more.input
    total.output += more.output
    total.cache_read += more.cache_read
    total.cache_write += more.cache_write
    total.total_tokens += more.total_tokens
    total.cost.input += more.cost.input
    total.cost.output += more.cost.output
    total.cost.cache_read += more.cost.cache_read
    total.cost.cache_write += more.cost.cache_write
    total.cost.total += more.cost.total


def _cut_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters not shown]"


def _blocks_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [b.text if isinstance(b, TextContent) else "[image]" for b in content or ()]
    return "\n".join(parts)


def _render_message(message: Any) -> list[str]:
    """One message as lines of a transcript a summary request reads."""
    if isinstance(message, UserMessage):
        return [f"User: {_blocks_text(message.content)}"]
    if isinstance(message, AssistantMessage):
        if message.stop_reason in ("error", "aborted"):
            return []
        lines = [f"Assistant: {message.text}"] if message.text else []
        for block in message.content:
            if isinstance(block, ToolCall):
                arguments = json.dumps(block.arguments, ensure_ascii=False)
                lines.append(f"Assistant called {block.name}({_cut_text(arguments, 1000)})")
        return lines
    if isinstance(message, ToolResultMessage):
        failed = " (error)" if message.is_error else ""
        text = _cut_text(_blocks_text(message.content), RESULT_CHARS)
        return [f"Result of {message.tool_name}{failed}: {text}"]
    return []


# --- the strategies ---------------------------------------------------------------------------


def summarize(job: CompactionJob) -> str:
    """The ``summarize`` strategy: the same model writes the summary, the previous one folded
    in. Messages too long for one request are summarised piece by piece, each piece updating
    the summary so far."""
    window = job.context_window
    budget = window - job.summary_tokens - 600 if window > 0 else 24000
    if window <= 0 or job.reason == "overflow":
        # the window is unknown, or smaller than believed: well under what was refused
        budget = min(budget, max(job.tokens_before // 2, 1000))
    summary = job.previous_summary
    # characters at 3 per token: text the model counts more densely than the estimate still fits
    max_chars = max(budget - len(summary or "") // CHARS_PER_TOKEN, 500) * 3
    for piece in job.render(max_chars):
        before = (
            f"The summary so far (update it with what follows; keep what still matters):\n"
            f"<summary>\n{summary}\n</summary>\n\n"
            if summary
            else ""
        )
        prompt = (
            f"{before}The conversation to summarise:\n<conversation>\n{piece}\n</conversation>\n\n"
            "Write the summary now."
        )
        answer = job.complete([SystemMessage(content=SUMMARY_SYSTEM), user_message(prompt)])
        summary = answer.text.strip() or summary
        max_chars = max(budget - len(summary or "") // CHARS_PER_TOKEN, 500) * 3
    return summary or "(nothing to summarise)"


def trim(job: CompactionJob) -> str:
    """The ``trim`` strategy: no request; the oldest messages are dropped and the model is told
    how many (a summary written by another strategy before is kept)."""
    dropped = sum(1 for m in job.messages if role_of(m) in ("user", "assistant", "tool_result"))
    previous = job.previous_summary if job.previous_strategy != "trim" else None
    if job.previous_strategy == "trim" and job.previous_summary:
        dropped += _trimmed_count(job.previous_summary)
    note = TRIM_TEXT.format(count=dropped)
    return f"{previous}\n\n{note}" if previous else note


TRIM_TEXT = (
    "{count} earlier messages of this conversation were dropped to fit the context window; "
    "they were not summarised. Ask the user if something from before matters."
)
"""The summary a ``trim`` compaction leaves."""


def _trimmed_count(summary: str) -> int:
    head = summary.split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


_STRATEGIES: dict[str, Callable[[CompactionJob], str]] = {"summarize": summarize, "trim": trim}


# --- one compaction ---------------------------------------------------------------------------


def compact(
    messages: list[Any],
    settings: Compaction,
    access: ModelAccess | None,
    emit: Callable[[AgentEvent], None],
    append: Callable[[CompactionRecord], None],
    *,
    reason: str,
    protect_from: int | None = None,
) -> CompactionRecord:
    """Compact ``messages`` (a transcript) once: emit ``compaction_start``, make the summary,
    hand the record to ``append`` (which adds it to the transcript with its message events),
    emit ``compaction_end``, and return the record.

    Messages from ``protect_from`` on are kept whatever their size (the current turn's). When
    nothing can be dropped or the strategy fails, ``compaction_end`` carries the error, the
    transcript is unchanged and :class:`CompactionError` is raised; any other exception a
    user's strategy raises also ends the compaction and then propagates.
    """
    model = access.model if access is not None else None
    window = settings.window_for(model) if model is not None else (settings.context_window or 0)
    before = estimate_tokens(messages)
    emit(CompactionStartEvent(reason, settings.strategy_name, before, window))
    try:
        record = _make_record(messages, settings, access, window, before, reason, protect_from)
    except CompactionError as exc:
        emit(CompactionEndEvent(reason, None, str(exc)))
        raise
    except (ProviderError, AbortError) as exc:
        emit(CompactionEndEvent(reason, None, str(exc)))
        raise CompactionError(str(exc)) from exc
    except Exception as exc:
        emit(CompactionEndEvent(reason, None, f"{type(exc).__name__}: {exc}"))
        raise
    append(record)
    emit(CompactionEndEvent(reason, record))
    return record


def compact_now(
    messages: Sequence[Any],
    settings: Compaction,
    model: Model,
    request: Callable[[list[Any], int], AssistantMessage],
    emit: Callable[[AgentEvent], None],
) -> CompactionRecord | CompactionError:
    """``agent.compact()``'s work, outside a run: compact ``messages`` once (``request`` makes
    the summary requests), the record announced with its message events through ``emit``;
    the record, or the :class:`CompactionError` that says why there is none (a user's strategy
    or a listener that raised is one too, its cause kept)."""

    def append(record: CompactionRecord) -> None:
        emit(MessageStartEvent(record))
        emit(MessageEndEvent(record))

    access = ModelAccess(model, request)
    try:
        return compact(list(messages), settings, access, emit, append, reason="manual")
    except CompactionError as exc:
        return exc
    except Exception as exc:  # a user's strategy or a listener: the caller gets it
        failure = CompactionError(f"the compaction failed: {type(exc).__name__}: {exc}")
        failure.__cause__ = exc
        return failure


def _make_record(
    messages: list[Any],
    settings: Compaction,
    access: ModelAccess | None,
    window: int,
    before: int,
    reason: str,
    protect_from: int | None,
) -> CompactionRecord:
    start = compaction_start(messages)
    keep = settings.keep_for(window, before)
    if reason == "overflow":  # refused: the window is smaller than believed, keep less
        keep = min(keep, max(before // 4, 1))
    protect = len(messages) if protect_from is None else protect_from
    cut = choose_cut(messages, start, protect, keep)
    if cut is None:
        raise CompactionError(
            "nothing to compact: every message left is this turn's own, a system message, or "
            "part of a tool call with its result"
        )
    found = latest_compaction(messages)
    previous = found[1] if found is not None else None
    job = CompactionJob(
        messages=[m for m in messages[start:cut] if role_of(m) in LLM_ROLES - {"system"}],
        previous_summary=previous.summary if previous is not None else None,
        previous_strategy=previous.strategy if previous is not None else None,
        context_window=window,
        summary_tokens=settings.summary_limit(window),
        reason=reason,
        access=access,
        tokens_before=before,
    )
    strategy = settings.strategy
    run = _STRATEGIES[strategy] if isinstance(strategy, str) else strategy
    summary = run(job)
    if not isinstance(summary, str) or not summary.strip():
        raise CompactionError(f"the {settings.strategy_name} strategy gave no summary")
    record = CompactionRecord(
        summary=summary,
        first_kept_index=cut,
        index=len(messages),
        tokens_before=before,
        strategy=settings.strategy_name,
        reason=reason,
        usage=job.usage,
        requests=job.requests,
    )
    # the estimate before, less what left the view, plus the new summary: on the scale of what
    # the provider reported, as ``tokens_before`` is
    dropped = sum(message_tokens(m) for m in messages[start:cut] if role_of(m) != "system")
    if previous is not None:
        dropped += message_tokens(user_message(SUMMARY_TEXT.format(summary=previous.summary)))
    added = message_tokens(user_message(SUMMARY_TEXT.format(summary=summary)))
    record.tokens_after = max(before - dropped, 0) + added
    return record


# --- the loop's side --------------------------------------------------------------------------


class CompactionPolicy(RunPolicy):
    """The built-in compaction policy (``Agent(compaction=...)``), around each model request:
    it compacts first when the request nears the context window, and when the provider refuses
    the request as too long it compacts and sends it once more; a second refusal ends the run
    saying what to do. The messages of the current turn (from ``run.turn_start``) are always
    kept; a summary request is one of the run's (``run.complete``)."""

    name = "compaction"

    def __init__(self, settings: Compaction) -> None:
        self.settings = settings

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        if request.purpose != "turn":
            return call_next(request)  # its own summary request, or another policy's
        settings = self.settings
        access = ModelAccess(run.model, lambda m, n: run.complete(m, max_tokens=n))
        window = settings.window_for(run.model)
        messages = run.context.messages
        if window > 0 and estimate_tokens(messages) > settings.threshold * window:
            try:
                compact(
                    messages, settings, access, run.emit, _appender(run),
                    reason="threshold", protect_from=run.turn_start,
                )  # fmt: skip
                request = dataclasses.replace(request, context=run.view())
            except CompactionError:
                pass  # reported in compaction_end; an overflow gets its own try
        message = call_next(request)
        if not self._overflowed(message, run.result.error):
            return message
        try:
            compact(
                messages, settings, access, run.emit, _appender(run),
                reason="overflow", protect_from=run.turn_start,
            )  # fmt: skip
            failed = None
        except CompactionError as exc:
            failed = str(exc)
        if failed is None:
            run.result.error = None  # the refused request stays on record; try once more
            message = call_next(dataclasses.replace(request, context=run.view()))
            if not self._overflowed(message, run.result.error):
                return message
        self._give_up(run, message, window, failed)
        return message

    def _overflowed(self, message: AssistantMessage, error: BaseException | None) -> bool:
        """Whether ``message`` is a request the provider refused as over the context window."""
        if message.stop_reason != "error" or not self.settings.retry_on_overflow:
            return False
        if isinstance(error, ContextOverflowError):
            return True
        if isinstance(error, ProviderError):
            return False
        from .providers.overflow import any_api_overflow  # the providers load when first needed

        return any_api_overflow(message.error_message or "")  # a stream function without one

    @staticmethod
    def _give_up(
        run: RunScope, message: AssistantMessage, window: int, failed: str | None
    ) -> None:
        """End the run on an overflow compaction could not cure, saying what to do
        (``failed``: why the compaction itself failed, if it did)."""
        size = f" ({window} tokens)" if window > 0 else ""
        detail = (
            f"the compaction failed: {failed}"
            if failed
            else f"the request was refused again: {message.error_message}"
        )
        text = OVERFLOW_ADVICE.format(window=size, detail=detail)
        error = ContextOverflowError(text, status=getattr(run.result.error, "status", None))
        run.end("error", text, error=error)


def _appender(run: RunScope) -> Callable[[CompactionRecord], None]:
    """How a compaction record joins the run's transcript: with its message events."""
    return lambda record: run.append([record])


def is_compaction(message: Any) -> bool:
    """Whether ``message`` is a compaction entry."""
    return role_of(message) == COMPACTION_ROLE
