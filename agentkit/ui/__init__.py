"""``agentkit ui``: a local web page over the session store (the ``ui`` extra).

The sessions and their transcripts as a person reads them, runs streaming in as they happen
(started from the page's chat box, or on Celery workers), steer and abort buttons. It listens on
127.0.0.1 only and answers only to the per-launch secret in the URL it prints. See docs/ui.md.
"""

from .app import create_app
from .live import BuildAgent, LiveRun, LiveRuns
from .security import Guard
from .server import UiServer

__all__ = ["BuildAgent", "Guard", "LiveRun", "LiveRuns", "UiServer", "create_app"]
