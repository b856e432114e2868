"""Settling a session's tool calls that a crash interrupted, as the agent that resumes it would.

When an agent attaches to a session whose last batch has calls without results (its process
died mid-batch), the session asks the agent how to settle them: this module's
:func:`settle_interrupted`. A tool marked ``idempotent`` runs again (on this thread, with the
agent's ``deps``, without its hooks); any other gets the session's
:data:`~agentkit.sessions.session.CRASHED_TEXT` error result, so nothing that was not marked
idempotent runs twice. A call of a reply cut off by its token limit never runs.

A call that needs approval runs again only on a decision recorded in the session (a deferred
approval whose resumer died after claiming it), checked as a resume checks it: its expiry, the
broker's ``decision_ttl`` and ``revalidate``. A call approved live by a process that died left
no record, so it is not run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .approvals import Approvals
from .deferred import RecordedDecisions
from .sessions.decisions import WaitingBatch, recorded_decisions, waiting_call_ids
from .sessions.session import interrupted_tool_calls, unsettled_result
from .tool_calls import run_tool_call
from .types import AgentContext, AgentTool, AssistantMessage, ToolCall, ToolResultMessage

__all__ = ["settle_interrupted"]


def settle_interrupted(
    messages: Sequence[Any],
    tools: Sequence[AgentTool],
    deps: Any = None,
    approvals: Approvals | None = None,
) -> list[ToolResultMessage]:
    """Results for the tool calls a crash interrupted, in call order (see the module)."""
    assistant, calls = interrupted_tool_calls(messages)
    if not calls or assistant is None:
        return []
    waiting = waiting_call_ids(messages)  # durably waiting for a decision: not interrupted
    calls = [call for call in calls if call.id not in waiting]
    cut_off = assistant.stop_reason == "length"
    by_name = {t.name: t for t in tools}
    results: list[ToolResultMessage] = []
    for call in calls:
        tool = by_name.get(call.name)
        if cut_off or tool is None or not tool.idempotent:
            results.append(unsettled_result(call, cut_off))
            continue
        results.append(_run_again(call, tool, tools, assistant, messages, deps, approvals))
    return results


def _run_again(
    call: ToolCall,
    tool: AgentTool,
    tools: Sequence[AgentTool],
    assistant: AssistantMessage,
    messages: Sequence[Any],
    deps: Any,
    approvals: Approvals | None,
) -> ToolResultMessage:
    """Run an idempotent call again, reviewed by the decision recorded for it, if any."""
    requests, decisions = recorded_decisions(messages, assistant, [call.id])
    reviewer: Approvals | None = None
    if call.id in decisions:
        batch = WaitingBatch(assistant, [call], requests, decisions)
        reviewer = RecordedDecisions(batch, approvals)
        approved = decisions[call.id]
        if approved.approved and approved.arguments is not None:
            call = call.model_copy(update={"arguments": dict(approved.arguments)})
    else:
        needs = approvals.needs_approval(call, False) if approvals is not None else False
        if tool.requires_approval or needs:
            return unsettled_result(call)  # approved live, if at all: no record to run on
    outcome = run_tool_call(
        call,
        tools=tools,
        assistant_message=assistant,
        context=AgentContext(messages=list(messages), tools=list(tools)),
        deps=deps,
        approvals=reviewer,
    )
    result = outcome.result
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=list(result.content or []),
        details=result.details,
        usage=result.usage,
        is_error=outcome.is_error,
        duration_ms=outcome.duration_ms,
    )
