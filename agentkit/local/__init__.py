"""The embedded offline model: Qwen2.5-Coder-0.5B-Instruct served by llama.cpp (the ``local``
extra).

:mod:`.model` holds the weights, the in-process server and the grammar that holds a reply to a
declared call; :mod:`.kept` the server kept in the background between command runs;
:mod:`.repair` the argument repair and text-call reading a small model needs.
"""

from .model import (
    LocalModel,
    LocalModelError,
    LocalModelIntegrityError,
    LocalModelNotInstalledError,
    get_local_model,
    get_local_server,
    local_model,
    mark_failed_results,
    prepare_weights,
    start_local_model,
    stop_local_servers,
    tool_call_grammar,
    with_constrained_tool_calls,
)

__all__ = [
    "LocalModel",
    "LocalModelError",
    "LocalModelIntegrityError",
    "LocalModelNotInstalledError",
    "get_local_model",
    "get_local_server",
    "local_model",
    "mark_failed_results",
    "prepare_weights",
    "start_local_model",
    "stop_local_servers",
    "tool_call_grammar",
    "with_constrained_tool_calls",
]
