"""The guardrails policy: :class:`Guardrails` puts guardrails on a run's four points, as a run
policy on the seam (:mod:`agentkit.policy`).

======================  =========================================================================
point                   hook, and what a trip stops
======================  =========================================================================
``input``               ``wrap_request``: the new user messages, before the request (guardrails
                        with ``beside=False``) or beside it on a thread of its own, the answer
                        held until the check passes; a trip aborts the request at once
``tool_calls``          ``review_calls``: each call's arguments (as JSON text) before it runs;
                        a trip refuses the batch's calls
``tool_results``        ``wrap_tool_call``, on the tool's thread: each result's text before the
                        model (or a session) sees it; a trip withholds it and aborts the batch
``output``              the request's stream, gated (:mod:`agentkit.guardrails._gate`): text
                        reaches listeners only once checked; a trip aborts the request
======================  =========================================================================

A trip ends the run with stop reason ``"guardrail"`` (``RunResult.budget`` names the guardrail,
``RunResult.ending.detail`` holds ``guardrail``, ``reason`` and ``point``); a guardrail that
raises ends it with ``"error"`` and a :class:`~agentkit.errors.GuardrailError`. Either way, and
for each redaction, a :class:`~agentkit.guardrails.GuardrailRecord` is appended to the
transcript. The policy is ``outermost``: it sees a request before the built-ins change it and
reviews calls before an approver is asked.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._request import side_options
from ..abort import ABORTED_TEXT, AbortController, AbortSignal
from ..errors import AbortError, EndRun, GuardrailError, GuardrailTrippedError
from ..policy import (
    BatchHandler,
    BatchOutcome,
    CallHandler,
    ModelRequest,
    PreparedCall,
    RequestHandler,
    RunPolicy,
    RunScope,
    ToolBatchRun,
    ToolCallRun,
)
from ..types import (
    AgentToolResult,
    AssistantMessage,
    Context,
    Model,
    OutputSchema,
    TextContent,
    ToolCall,
    Usage,
    UserMessage,
    as_model,
    role_of,
)
from ._apply import Redaction, Stop, apply
from ._gate import GatedRequest, OutputGate
from ._input import JOIN_GRACE, InputCheck, InputText
from .base import Check, Guardrail, Point
from .records import GuardrailRecord, InputRecords

DEFAULT_CHUNK = 400
"""Characters of a streamed answer checked at once when no sentence ends sooner."""
DEFAULT_MAX_HELD = 64 * 1024
"""The most characters the guardrails' ``hold`` may keep back before they are checked anyway."""


def _guardrails(value: Guardrail | Sequence[Guardrail], point: str) -> list[Guardrail]:
    items = [value] if isinstance(value, Guardrail) else list(value)
    for item in items:
        if not isinstance(item, Guardrail):
            raise TypeError(
                f"{point} guardrails must be Guardrail objects (subclass "
                f"agentkit.guardrails.Guardrail); got {type(item).__name__}"
            )
    return items


class Guardrails(RunPolicy):
    """Guardrails on a run's four points: ``input`` (the user's messages), ``tool_calls``
    (each call's arguments), ``tool_results`` (each result, before the model reads it) and
    ``output`` (the answer, gated as it streams). Give it to an agent as a policy::

        Agent(..., policies=[Guardrails(input=[PII(action="redact")], output=[Secrets()])])

    ``chunk`` is how much streamed text waits for a check when no sentence ends sooner;
    ``max_held`` bounds what a guardrail's ``hold`` keeps back. See the module for what each
    point does and how a trip ends the run."""

    name = "guardrails"
    outermost = True

    def __init__(
        self,
        *,
        input: Guardrail | Sequence[Guardrail] = (),  # noqa: A002 - the point's name
        tool_calls: Guardrail | Sequence[Guardrail] = (),
        tool_results: Guardrail | Sequence[Guardrail] = (),
        output: Guardrail | Sequence[Guardrail] = (),
        chunk: int = DEFAULT_CHUNK,
        max_held: int = DEFAULT_MAX_HELD,
    ) -> None:
        if chunk < 1 or max_held < chunk:
            raise ValueError(f"need 1 <= chunk <= max_held, got chunk={chunk}, max_held={max_held}")
        self.input = _guardrails(input, "input")
        self.tool_calls = _guardrails(tool_calls, "tool_calls")
        self.tool_results = _guardrails(tool_results, "tool_results")
        self.output = _guardrails(output, "output")
        self.chunk, self.max_held = chunk, max_held

    def for_run(self, run: RunScope) -> RunPolicy:
        """A fresh object per run: it keeps the run's checked input and uncounted usage."""
        return _GuardrailRun(self, run)


class _GuardrailRun(RunPolicy):
    """One run's guardrails (made by :meth:`Guardrails.for_run`, on the run's thread)."""

    def __init__(self, spec: Guardrails, run: RunScope) -> None:
        self.spec = spec
        self.name = spec.name
        self.run: RunScope | None = run
        self.request: ModelRequest | None = None  # the last request, for a judge's requests
        self.records = InputRecords()
        self.checked = 0  # how much of the run's new messages the input check has seen
        # Guards _usage, _notes and _batch: tool threads and the input thread write them.
        self._lock = threading.Lock()
        self._usage: list[Usage] = []  # judges' requests not yet counted in the run's usage
        self._notes: list[tuple[Stop | None, list[Redaction], str]] = []  # tool results'
        self._batch: AbortController | None = None

    # --- the input and the answer ---

    def start(self, run: RunScope) -> None:
        """Read the input records the transcript holds (from earlier runs too)."""
        self.records.read(run.context.messages)

    def _viewed(self, request: ModelRequest) -> ModelRequest:
        """``request`` with a stream function that sends the input as the records say (the
        redacted text; nothing of input refused), whatever context an inner policy hands it
        (a compaction's retry recomputes the view)."""
        if self.records.empty and not self.spec.input:
            return request  # nothing recorded, and nothing this run could record
        inner, records = request.stream_fn, self.records

        def stream_fn(model: Model, context: Context, options: Any) -> Any:
            messages = records.apply(context.messages)
            if messages is not context.messages:
                context = context.model_copy(update={"messages": messages})
            return inner(model, context, options)

        return dataclasses.replace(request, stream_fn=stream_fn)

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """Check the new input (before, then beside the request), gate the answer. A request
        beside the turns (a summary's) is only sent the input as the records say."""
        if request.purpose != "turn":
            return call_next(self._viewed(request))
        self.request = request
        spec = self.spec
        fresh = self._fresh_input(run) if spec.input else []
        before = [g for g in spec.input if not g.beside]
        if fresh and before:
            self._check_before(run, before, fresh)
        beside = [g for g in spec.input if g.beside] if fresh else []
        request = self._viewed(request)
        if not beside and not spec.output:
            return call_next(request)
        return self._send(run, request, call_next, beside, fresh)

    def _send(
        self,
        run: RunScope,
        request: ModelRequest,
        call_next: RequestHandler,
        beside: list[Guardrail],
        fresh: list[InputText],
    ) -> AssistantMessage:
        """Make the request under a signal of its own, gated; act on the verdicts."""
        controller = AbortController()
        outer = request.signal
        unlink = outer.add_callback(lambda: controller.abort(outer.reason))

        def stop_request() -> None:
            controller.abort(AbortError("stopped by a guardrail"))

        check = None
        if beside:
            check = InputCheck(
                beside, fresh, lambda g, signal: self._check(run, g, "input", signal),
                run.signal, stop_request,
            )  # fmt: skip
        make_gate = None
        if self.spec.output:
            make_gate = self._output_gate(run)
        gated = GatedRequest(request.stream_fn, make_gate, check, stop_request)
        sent = dataclasses.replace(request.with_signal(controller.signal), stream_fn=gated)
        failed = True
        try:
            if check is not None:
                check.start()
            message = call_next(sent)
            failed = message.stop_reason in ("error", "aborted")
        finally:
            if check is not None:
                check.finish(stop=failed)
            unlink()
            self._fold(run)
        if check is not None and (check.stop is not None or check.redactions):
            self._record_input(run, fresh, check.stop, check.stopped_at)
            if check.stop is not None:
                self._end(run, check.stop)
                return message
            if not check.aborted and not run.signal.aborted:  # sent again, redacted
                return self._send(run, request, call_next, [], [])
        for redaction in gated.redactions:
            self._record(run, redaction.guardrail, "output", "redact", redaction.reason,
                         count=redaction.count)  # fmt: skip
        stop = gated.stop
        if stop is not None:
            self._record(run, stop.guardrail, "output", stop.action, stop.reason)
            self._end(run, stop)
        return message

    def _output_gate(self, run: RunScope) -> Callable[[], OutputGate]:
        """What makes the output gate of each stream of a request."""
        spec = self.spec

        def check_for(guardrail: Guardrail, before: str, final: bool) -> Check:
            return self._check(run, guardrail, "output", run.signal, before=before, final=final)

        return lambda: OutputGate(spec.output, check_for, spec.chunk, spec.max_held)

    def _fresh_input(self, run: RunScope) -> list[InputText]:
        """The text blocks of the user messages the run added since the last check."""
        texts: list[InputText] = []
        new = run.result[self.checked :]
        self.checked = len(run.result)
        for message in new:
            if role_of(message) != "user":
                continue
            content = as_model(UserMessage, message).content
            if isinstance(content, str):
                texts.append(InputText(message, None, content))
                continue
            for index, block in enumerate(content):
                if isinstance(block, TextContent):
                    texts.append(InputText(message, index, block.text))
        return texts

    def _check_before(
        self, run: RunScope, guardrails: list[Guardrail], texts: list[InputText]
    ) -> None:
        """The input guardrails that run before the request; a stop ends the run here."""
        stop: Stop | None = None
        at = 0
        try:
            for at, item in enumerate(texts):  # noqa: B007 - ``at`` says which text stopped
                applied = apply(
                    guardrails, item.text, lambda g: self._check(run, g, "input", run.signal)
                )
                if applied.redactions:
                    item.text, item.changed = applied.text, True
                if applied.stop is not None:
                    stop = applied.stop
                    break
        except AbortError:
            raise EndRun("aborted", ABORTED_TEXT) from None
        finally:
            self._fold(run)
        self._record_input(run, texts, stop, at)
        if stop is not None:
            raise self._end(run, stop)
        for item in texts:
            item.changed = False  # recorded: the check beside the request starts from here

    def _record_input(
        self, run: RunScope, texts: list[InputText], stop: Stop | None, at: int
    ) -> None:
        """Record the redacted input (the content the model is to be sent instead) and the
        input that stopped the run (``texts[at]``'s message: the model is never sent it)."""
        messages: list[Any] = []
        for item in texts:
            if item.changed and not any(m is item.message for m in messages):
                messages.append(item.message)
        for message in messages:
            content = _redacted_content(message, [t for t in texts if t.message is message])
            self._record(
                run, "input", "input", "redact", "part of the input was redacted",
                target=message, content=content,
            )  # fmt: skip
        if stop is not None:
            target = texts[min(at, len(texts) - 1)].message if texts else None
            self._record(run, stop.guardrail, "input", stop.action, stop.reason, target=target)

    # --- tool calls and their results ---

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        """Check each call's arguments (as JSON text) before it runs or an approver sees it."""
        guardrails = self.spec.tool_calls
        if not guardrails:
            return
        for call in calls:
            if call.verdict in ("deny", "defer"):
                continue
            self._review(run, call, guardrails)

    def _review(self, run: RunScope, call: PreparedCall, guardrails: list[Guardrail]) -> None:
        tool_call = call.tool_call
        args = call.arguments if call.arguments is not None else tool_call.arguments
        try:
            applied = apply(
                guardrails, json.dumps(args, ensure_ascii=False),
                lambda g: self._check(run, g, "tool_call", run.signal, tool_call=tool_call),
            )  # fmt: skip
        except AbortError:
            return  # the run was aborted: the batch ends as the abort says
        finally:
            self._fold(run)
        stop = applied.stop
        if stop is None and applied.redactions:
            try:
                edited = json.loads(applied.text)
                if not isinstance(edited, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                names = ", ".join(r.guardrail for r in applied.redactions)
                stop = Stop(names, "tool_call", "error", f"its redaction is no arguments ({exc})")
                stop.error = GuardrailError(stop.message)
            else:
                call.arguments = edited
                call.tool_call = tool_call.model_copy(update={"arguments": edited})
                for redaction in applied.redactions:
                    self._record(run, redaction.guardrail, "tool_call", "redact",
                                 redaction.reason, tool_call_id=tool_call.id)  # fmt: skip
        if stop is not None:
            self._record(run, stop.guardrail, "tool_call", stop.action, stop.reason,
                         tool_call_id=tool_call.id)  # fmt: skip
            raise self._end(run, stop)

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        """Run the batch under a signal a tool result's trip aborts; record what its
        results' checks did."""
        if not self.spec.tool_results:
            return call_next(batch)
        if self.request is None:  # a batch resumed before the run's first request
            from ..loop import build_request

            self.request = build_request(cast(Any, run))
        controller = AbortController()
        outer = batch.signal
        unlink = outer.add_callback(lambda: controller.abort(outer.reason))
        batch.signal = controller.signal
        with self._lock:
            self._batch = controller
        try:
            return call_next(batch)
        finally:
            with self._lock:
                self._batch = None
                notes, self._notes = self._notes, []
            unlink()
            self._fold(run)
            self._record_results(run, notes)

    def _record_results(
        self, run: RunScope, notes: list[tuple[Stop | None, list[Redaction], str]]
    ) -> None:
        first: Stop | None = None
        for stop, redactions, call_id in notes:
            for redaction in redactions:
                self._record(run, redaction.guardrail, "tool_result", "redact", redaction.reason,
                             tool_call_id=call_id)  # fmt: skip
            if stop is not None:
                self._record(run, stop.guardrail, "tool_result", stop.action, stop.reason,
                             tool_call_id=call_id)  # fmt: skip
                first = first or stop
        if first is not None:
            self._end(run, first)

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        """On the tool's thread: check the result's text before anyone sees it; redact it,
        or withhold it (an error result) and abort the batch."""
        result = call_next(call)
        guardrails = self.spec.tool_results
        if not guardrails:
            return result
        tool_call = call.tool_call
        content = list(result.content)
        redactions: list[Redaction] = []
        for index, block in enumerate(content):
            if not isinstance(block, TextContent):
                continue
            applied = apply(
                guardrails,
                block.text,
                lambda g: self._check(run, g, "tool_result", call.signal, tool_call=tool_call),
            )  # fmt: skip - an AbortError goes up: the call ends aborted, its result unseen
            redactions += applied.redactions
            if applied.stop is not None:
                self._note(applied.stop, redactions, tool_call.id)
                stop = applied.stop
                if stop.action == "trip":
                    raise GuardrailTrippedError(
                        f"The result of {tool_call.name} was withheld. {stop.message}",
                        stop.guardrail, stop.reason, "tool_result",
                    )  # fmt: skip
                raise GuardrailError(f"The result of {tool_call.name} was withheld. {stop.message}")
            if applied.text != block.text:
                content[index] = block.model_copy(update={"text": applied.text})
        if redactions:
            self._note(None, redactions, tool_call.id)
            return result.model_copy(update={"content": content})
        return result

    def _note(self, stop: Stop | None, redactions: list[Redaction], call_id: str) -> None:
        """Keep what a tool result's check did for the batch's end; a stop aborts the batch."""
        with self._lock:
            self._notes.append((stop, redactions, call_id))
            batch = self._batch
        if stop is not None and batch is not None:
            batch.abort(AbortError(stop.message))

    # --- the run's own requests, records and ending ---

    def _check(
        self,
        run: RunScope,
        guardrail: Guardrail,
        point: Point,
        signal: AbortSignal,
        *,
        tool_call: ToolCall | None = None,
        before: str = "",
        final: bool = True,
    ) -> Check:
        return Check(point, signal, run, tool_call, before, final, self._complete)

    def _complete(
        self,
        messages: list[Any],
        *,
        signal: AbortSignal,
        max_tokens: int | None = None,
        output_schema: OutputSchema | None = None,
        model: Model | None = None,
    ) -> AssistantMessage:
        """A judge's request, made aside (``RunScope.send_aside``: the policies'
        ``wrap_side_request``, a spend ledger's among them) from whichever thread the check
        runs on: with the run's key and stream function, the check's signal, the run's
        deadline; its usage is counted in the run's on the run's thread, at the policy's next
        hook."""
        request, run = self.request, self.run
        if request is None or run is None:
            raise GuardrailError("the run has no request to make a judge's request from")
        options = side_options(request.options, None, signal, max_tokens)
        update: dict[str, Any] = {"output_schema": output_schema}
        if model is not None and model.provider != request.model.provider:
            update["api_key"] = None  # the run's key is another provider's
        options = options.model_copy(update=update)
        judged = ModelRequest(
            model or request.model, Context(messages=messages), options, request.stream_fn,
            signal, "judge",
        )  # fmt: skip
        final = run.send_aside(judged, JOIN_GRACE)
        with self._lock:
            self._usage.append(final.usage)
        return final

    def _fold(self, run: RunScope) -> None:
        """Count the judges' requests made since in the run's usage (on the run's thread)."""
        with self._lock:
            usages, self._usage = self._usage, []
        for usage in usages:
            run.result.usage.requests += 1
            run.result.usage.add(usage)

    def _record(
        self,
        run: RunScope,
        guardrail: str,
        point: str,
        action: str,
        reason: str,
        *,
        count: int = 1,
        tool_call_id: str | None = None,
        target: Any = None,
        content: list[Any] | None = None,
    ) -> None:
        """Append a record to the transcript (its events reach listeners and the session)."""
        offset = None
        if target is not None:
            messages = run.context.messages
            index = next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is target)
            offset = len(messages) - index
        record = GuardrailRecord(
            guardrail=guardrail, point=point, action=cast(Any, action), reason=reason,
            count=count, tool_call_id=tool_call_id, target=offset, content=content,
        )  # fmt: skip
        run.append([record])
        if target is not None:
            self.records.read(run.context.messages)  # every request from now on honours it

    def _end(self, run: RunScope, stop: Stop) -> EndRun:
        """End the run as ``stop`` says; the :class:`EndRun` a hook may raise to stop at once."""
        if stop.action == "trip":
            run.end("guardrail", stop.message, budget=stop.guardrail, detail=stop.detail)
            return EndRun("guardrail", stop.message, budget=stop.guardrail, detail=stop.detail)
        run.end("error", stop.message, error=stop.error, detail=stop.detail)
        return EndRun("error", stop.message, detail=stop.detail)

    def end(self, run: RunScope, result: Any) -> None:
        """Count what is left of the judges' usage; let go of the run."""
        self._fold(run)
        self.run = self.request = None


def _redacted_content(message: Any, texts: list[InputText]) -> list[Any]:
    """The content of ``message`` with its redacted text blocks in place."""
    content = as_model(UserMessage, message).content
    if isinstance(content, str):
        return [TextContent(text=texts[0].text)]
    blocks = list(content)
    for item in texts:
        if item.block is not None:
            blocks[item.block] = TextContent(text=item.text)
    return blocks
