"""The ``agentkit`` logger, for every module that logs a failure."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging


def agentkit_logger() -> logging.Logger:
    """The ``agentkit`` logger. Only failures are logged (a raising callback or listener), so
    ``logging`` is imported at the first one rather than with agentkit (a few ms of import)."""
    import logging

    return logging.getLogger("agentkit")
