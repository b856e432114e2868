"""The workspace tools the ``agentkit`` command gives a model: read, list, search, write and
edit files confined to one folder, and run commands in a sandbox.

:mod:`.tools` holds the tools themselves (one method each) and :func:`workspace_tools`, which
builds them; :mod:`.paths` the path confinement (:class:`Workspace`); :mod:`.sandbox` the
command runner and its bubblewrap sandbox; :mod:`.search` the text search; :mod:`.text` how
files are read as text and how an edit finds what it replaces.
"""

from .paths import Workspace, WorkspaceError
from .sandbox import sandbox_available
from .tools import MUTATING_TOOLS, TOOL_NAMES, compact_tools, is_sandboxed, workspace_tools

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
