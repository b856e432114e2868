"""The workspace tools the ``agentkit`` command gives a model: read, list, search, write and
edit files confined to one folder, and run commands in a sandbox.
"""

from .tools import (
    MUTATING_TOOLS,
    TOOL_NAMES,
    Workspace,
    WorkspaceError,
    compact_tools,
    is_sandboxed,
    sandbox_available,
    workspace_tools,
)

__all__ = [
    "MUTATING_TOOLS",
    "TOOL_NAMES",
    "Workspace",
    "WorkspaceError",
    "compact_tools",
    "is_sandboxed",
    "sandbox_available",
    "workspace_tools",
]
