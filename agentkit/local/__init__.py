"""The embedded offline model: Qwen2.5-Coder-1.5B-Instruct served by llama.cpp (the ``local``
extra), or the smaller, faster and weaker Qwen2.5-Coder-0.5B-Instruct (the ``local-0-5b``
extra, ``--model local:qwen2.5-coder-0.5b``).

:mod:`.constants` holds what the model is and the pinned versions and hashes; :mod:`.weights`
finds, joins and verifies the GGUF file; :mod:`.server` runs llama.cpp's server in this process
and makes the :class:`~agentkit.Model` objects that reach it; :mod:`.template` holds the shipped
chat template and how requests word things for it; :mod:`.grammar` the grammar that holds a
reply to a declared call; :mod:`.kept` the server kept in the background between command runs;
:mod:`.repair` the argument repair and text-call reading a small model needs.
"""

from .constants import (
    CODER_0_5B,
    CODER_1_5B,
    DEFAULT_WEIGHTS,
    EMBEDDED_MODELS,
    EmbeddedWeights,
)
from .grammar import constrain_tool_calls, tool_call_grammar, with_constrained_tool_calls
from .server import (
    LocalModel,
    embedded_model,
    get_local_model,
    get_local_server,
    start_local_model,
    stop_local_servers,
)
from .template import mark_failed_results
from .weights import (
    LocalModelError,
    LocalModelIntegrityError,
    LocalModelNotInstalledError,
    prepare_weights,
)

__all__ = [
    "CODER_0_5B",
    "CODER_1_5B",
    "DEFAULT_WEIGHTS",
    "EMBEDDED_MODELS",
    "EmbeddedWeights",
    "LocalModel",
    "LocalModelError",
    "LocalModelIntegrityError",
    "LocalModelNotInstalledError",
    "constrain_tool_calls",
    "embedded_model",
    "get_local_model",
    "get_local_server",
    "mark_failed_results",
    "prepare_weights",
    "start_local_model",
    "stop_local_servers",
    "tool_call_grammar",
    "with_constrained_tool_calls",
]
