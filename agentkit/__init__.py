"""agentkit: a synchronous, thread-based LLM agent framework.

Plain threads, plain blocking calls, plain iterators: ``Agent.prompt()`` works in scripts,
web and task workers, and notebooks alike.

``__all__`` is the public face, what ``from agentkit import *`` gives and ``docs/api.md``
presents: the agent and its run, results, tools, the envelope, messages and content, the model
and its options, the errors. The layers below have their own modules: the events
(:mod:`agentkit.events`, :mod:`agentkit.event_stream`), the hook types (:mod:`agentkit.hooks`),
the low-level loop (:mod:`agentkit.loop`) and the transcript helpers
(:mod:`agentkit.transcript`). Their names are still attributes of ``agentkit``
(``agentkit.TextDeltaEvent``, ``from agentkit import TurnContext``), looked up in their module
on first use, because the documented API has always offered them here; new code imports them
from their modules, where type checkers see their types.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_names
from .abort import AbortController, AbortSignal
from .agent import Agent, AgentRunStream, AgentState, Run
from .budgets import Budgets
from .errors import (
    AbortError,
    AgentBusyError,
    AgentError,
    CannotContinueError,
    NoStreamFunctionError,
    ProviderError,
    ToolArgumentsError,
    ToolRetry,
)
from .loop import set_default_stream_fn
from .output import OutputSpec
from .policy import EndRun, RunPolicy, RunScope
from .results import (
    BudgetExceededError,
    OutputValidationError,
    RunResult,
    RunStopReason,
    RunUsage,
)
from .tools import AgentTool, AgentToolResult, RunContext, current_run_context, tool
from .types import (
    AnthropicOptions,
    AssistantMessage,
    Context,
    Cost,
    GoogleOptions,
    ImageContent,
    Message,
    Model,
    ModelCost,
    OpenAIOptions,
    StopReason,
    StreamOptions,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    Tool,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

if TYPE_CHECKING:
    from .approvals import ApprovalDecision, ApprovalRequest, Approvals
    from .providers import get_model, register_model

__version__ = "0.1.0"

_ELSEWHERE: dict[str, tuple[str, ...]] = {
    # Public, loaded on first use: the catalog (with the providers and ``requests``) when a
    # program names a model, the approvals broker when a program makes one.
    "agentkit.providers.catalog": ("get_model", "register_model"),
    "agentkit.approvals": ("ApprovalDecision", "ApprovalRequest", "Approvals"),
    # The layers below the face: attributes of agentkit, documented in their modules.
    "agentkit.events": (
        "AgentEndEvent",
        "AgentEvent",
        "AgentStartEvent",
        "AssistantMessageEvent",
        "DoneEvent",
        "ErrorEvent",
        "MessageEndEvent",
        "MessageStartEvent",
        "MessageUpdateEvent",
        "StartEvent",
        "TextDeltaEvent",
        "TextEndEvent",
        "TextStartEvent",
        "ThinkingDeltaEvent",
        "ThinkingEndEvent",
        "ThinkingStartEvent",
        "ToolCallDeltaEvent",
        "ToolCallEndEvent",
        "ToolCallStartEvent",
        "ToolExecutionEndEvent",
        "ToolExecutionStartEvent",
        "ToolExecutionUpdateEvent",
        "TurnEndEvent",
        "TurnStartEvent",
        "event_to_dict",
    ),
    "agentkit.event_stream": ("AssistantMessageEventStream", "EventStream", "StreamEndedError"),
    "agentkit.hooks": (
        "AfterToolCallContext",
        "AfterToolCallResult",
        "BeforeToolCallContext",
        "BeforeToolCallResult",
        "RequestContext",
        "ToolCallOutcome",
        "TurnContext",
        "TurnUpdate",
    ),
    "agentkit.loop": (
        "AgentContext",
        "AgentLoopConfig",
        "agent_loop",
        "agent_loop_continue",
        "default_convert_to_llm",
        "get_default_stream_fn",
        "run_agent_loop",
        "run_agent_loop_continue",
        "run_tool_call",
    ),
    "agentkit.transcript": (
        "get_current_system_message",
        "get_current_system_prompt",
        "get_current_tools",
    ),
    "agentkit.policy": (
        "BatchOutcome",
        "Ending",
        "ModelRequest",
        "PreparedCall",
        "ToolBatchRun",
        "ToolCallRun",
    ),
    "agentkit.agent": ("PendingMessageQueue",),
    "agentkit.budgets": ("DEFAULT_MAX_TURNS",),
    "agentkit.tools": ("validate_tool_arguments",),
}
"""Names that ``agentkit`` resolves from another module on first use, by module."""

__getattr__ = lazy_names("agentkit", _ELSEWHERE, globals())
"""A name of :data:`_ELSEWHERE`, imported from its module on first use."""


__all__ = [
    # the agent and its run
    "Agent",
    "AgentRunStream",
    "AgentState",
    "Run",
    # results
    "RunResult",
    "RunStopReason",
    "RunUsage",
    # tools
    "AgentTool",
    "AgentToolResult",
    "tool",
    # the envelope: budgets, typed output, approvals, the run's context, aborting
    "AbortController",
    "AbortSignal",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Budgets",
    "OutputSpec",
    "RunContext",
    "current_run_context",
    # the run seam: policies around a run (what their hooks get: agentkit.policy)
    "EndRun",
    "RunPolicy",
    "RunScope",
    # messages and content
    "AssistantMessage",
    "Cost",
    "ImageContent",
    "Message",
    "StopReason",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevel",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
    # the model and its options
    "AnthropicOptions",
    "Context",
    "GoogleOptions",
    "Model",
    "ModelCost",
    "OpenAIOptions",
    "StreamOptions",
    "Tool",
    "get_model",
    "register_model",
    "set_default_stream_fn",
    # errors
    "AbortError",
    "AgentBusyError",
    "AgentError",
    "BudgetExceededError",
    "CannotContinueError",
    "NoStreamFunctionError",
    "OutputValidationError",
    "ProviderError",
    "ToolArgumentsError",
    "ToolRetry",
]
