"""One run of ``agentkit run``: a reply that could not be read asked for again, and notes on
stderr when a budget or a repeated failure ended the run; its exit status."""

from __future__ import annotations

import re
from typing import Any

from ..agent import Agent
from ..results import RunResult
from ..transcript import user_message as prompt_message
from .approval import note_unanswered
from .console import EXIT_INTERRUPTED, Console
from .render import PARSE_FAILURE

PARSE_RETRIES = 2
"""How often a reply the server could not parse (a malformed tool call) is sampled again."""
RESAMPLE_TEMPERATURE = 0.7
"""The temperature of a re-sample: at temperature 0 the model would repeat the same reply."""
CALL_FORMAT_NOTE = (
    "Your last reply could not be read. To call a tool, reply with one line of JSON and nothing "
    'else, no code fence: {"name": "<tool name>", "arguments": {...}}. Otherwise answer in '
    "plain text."
)
"""What the model is told after a reply the server could not parse."""


def run_once(agent: Agent, task: str, io: Console) -> int:
    """One run; exit status 0 when it ended normally, 1 on an error, 130 when interrupted.

    A reply that failed to parse is dropped and asked for again (up to :data:`PARSE_RETRIES`
    times): first with a note that says how to write a tool call (:data:`CALL_FORMAT_NOTE`),
    then sampled at :data:`RESAMPLE_TEMPERATURE`, so a small model's malformed tool call does
    not end the task."""
    try:
        messages = agent.prompt(task)
        for attempt in range(PARSE_RETRIES):
            last = messages[-1] if messages else None
            if not _unparsed_reply(last) or agent.state.messages[-1] is not last:
                break
            io.err("agentkit: the model's reply could not be read; asking again")
            kept = agent.state.messages[:-1]
            previous = agent.temperature
            if attempt == 0:
                note = prompt_message(CALL_FORMAT_NOTE)
                agent.state.messages = [*kept, note]
            else:
                agent.state.messages = kept
                agent.temperature = RESAMPLE_TEMPERATURE
            try:
                messages = agent.continue_()
            finally:
                agent.temperature = previous
    except KeyboardInterrupt:
        abort_quietly(agent)
        io.err("agentkit: interrupted; the run was aborted")
        return EXIT_INTERRUPTED
    note_budget(agent, messages, io)
    if messages.stop_reason == "approval":  # asked where nobody could answer
        note_unanswered(io, messages.pending_approvals)
        return 1
    last = messages[-1] if messages else None
    if _note_repeated_failure(last, io):
        return 1
    return 1 if getattr(last, "stop_reason", None) in ("error", "aborted") else 0


def note_budget(agent: Agent, result: RunResult, io: Console) -> None:
    """Say on stderr that a run was ended by its turn budget (``--max-turns``)."""
    if result.budget == "max_turns" and agent.budgets is not None:
        io.err(f"agentkit: stopped after --max-turns {agent.budgets.max_turns}")


def _note_repeated_failure(last: Any, io: Console) -> bool:
    """Say on stderr that the run was stopped because the model repeated a failing call
    (:func:`agentkit.local.repair.stop_repeated_failures`); whether it was."""
    from ..local.repair import REPEATED_FAILURE

    details = getattr(last, "details", None)
    if getattr(last, "role", None) != "tool_result" or not isinstance(details, dict):
        return False
    repeats = details.get(REPEATED_FAILURE)
    if repeats is None:
        return False
    io.err(
        f"agentkit: stopped: the model called {last.tool_name} {repeats} times in a row with "
        "the same arguments, and it failed the same way each time"
    )
    return True


_TOOL_LIST_ECHO = re.compile(r'<tools>|\{\s*"type"\s*:\s*"function"\s*,\s*"function"\s*:')
"""A tool declaration as the prompt lists it: a reply quoting one echoes the tool list."""


def _unparsed_reply(message: Any) -> bool:
    """Whether ``message`` is an assistant reply that ended because it could not be parsed,
    or an answer that quotes the tool list's declarations (a small model echoes the prompt
    now and then instead of calling a tool): neither is an answer to give the user."""
    if getattr(message, "role", None) != "assistant":
        return False
    reason = getattr(message, "stop_reason", None)
    if reason == "stop":
        return bool(_TOOL_LIST_ECHO.search(getattr(message, "text", "") or ""))
    return bool(
        reason == "error" and PARSE_FAILURE.search(getattr(message, "error_message", None) or "")
    )


def abort_quietly(agent: Agent) -> None:
    """Abort the agent's run and wait for it to end, even through more Ctrl-Cs."""
    while True:
        try:
            agent.abort()
            agent.wait_for_idle()
            return
        except KeyboardInterrupt:
            continue
