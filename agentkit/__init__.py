"""agentkit: a synchronous, thread-based LLM agent framework.

Plain threads, plain blocking calls, plain iterators: ``Agent.prompt()`` works in scripts,
web and task workers, and notebooks alike.
"""

from typing import TYPE_CHECKING, Any

from .abort import AbortController, AbortSignal
from .agent import Agent, AgentRunStream, AgentState, PendingMessageQueue, Run
from .budgets import DEFAULT_MAX_TURNS, Budgets
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
from .event_stream import AssistantMessageEventStream, EventStream, StreamEndedError
from .events import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
    TurnStartEvent,
    event_to_dict,
)
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    RequestContext,
    ToolCallOutcome,
    TurnContext,
    TurnUpdate,
)
from .loop import (
    AgentContext,
    AgentLoopConfig,
    agent_loop,
    agent_loop_continue,
    default_convert_to_llm,
    get_default_stream_fn,
    run_agent_loop,
    run_agent_loop_continue,
    run_tool_call,
    set_default_stream_fn,
)
from .output import OutputSpec
from .results import (
    BudgetExceededError,
    OutputValidationError,
    RunResult,
    RunStopReason,
    RunUsage,
)
from .tools import (
    AgentTool,
    AgentToolResult,
    RunContext,
    current_run_context,
    tool,
    validate_tool_arguments,
)
from .transcript import (
    get_current_system_message,
    get_current_system_prompt,
    get_current_tools,
)
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

_LAZY = {
    "get_model": "agentkit.providers.catalog",
    "register_model": "agentkit.providers.catalog",
    "ApprovalDecision": "agentkit.approvals",
    "ApprovalRequest": "agentkit.approvals",
    "Approvals": "agentkit.approvals",
}
"""Public names whose module loads on first use, which keeps ``import agentkit`` quick: the
catalog (with the providers and ``requests``) when a program names a model or makes a request,
the approvals broker when a program makes one (a run without a broker never needs it)."""


def __getattr__(name: str) -> Any:
    """A name of :data:`_LAZY`, imported from its module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "AfterToolCallContext",
    "AfterToolCallResult",
    "Agent",
    "AgentBusyError",
    "AgentContext",
    "AgentEndEvent",
    "AgentError",
    "AgentEvent",
    "AgentLoopConfig",
    "AgentRunStream",
    "AgentStartEvent",
    "AgentState",
    "AgentTool",
    "AgentToolResult",
    "AnthropicOptions",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "AssistantMessage",
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "BudgetExceededError",
    "Budgets",
    "CannotContinueError",
    "Context",
    "Cost",
    "DEFAULT_MAX_TURNS",
    "DoneEvent",
    "ErrorEvent",
    "EventStream",
    "GoogleOptions",
    "ImageContent",
    "Message",
    "MessageEndEvent",
    "MessageStartEvent",
    "MessageUpdateEvent",
    "Model",
    "ModelCost",
    "NoStreamFunctionError",
    "OpenAIOptions",
    "OutputSpec",
    "OutputValidationError",
    "PendingMessageQueue",
    "ProviderError",
    "RequestContext",
    "Run",
    "RunContext",
    "RunResult",
    "RunStopReason",
    "RunUsage",
    "StartEvent",
    "StopReason",
    "StreamEndedError",
    "StreamOptions",
    "SystemMessage",
    "TextContent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingContent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingLevel",
    "ThinkingStartEvent",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallOutcome",
    "ToolCallStartEvent",
    "ToolExecutionEndEvent",
    "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent",
    "ToolResultMessage",
    "ToolRetry",
    "TurnContext",
    "TurnEndEvent",
    "TurnStartEvent",
    "TurnUpdate",
    "Usage",
    "UserMessage",
    "agent_loop",
    "agent_loop_continue",
    "current_run_context",
    "default_convert_to_llm",
    "event_to_dict",
    "get_current_system_message",
    "get_current_system_prompt",
    "get_current_tools",
    "get_default_stream_fn",
    "get_model",
    "register_model",
    "run_agent_loop",
    "run_agent_loop_continue",
    "run_tool_call",
    "set_default_stream_fn",
    "tool",
    "validate_tool_arguments",
]
