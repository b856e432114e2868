"""Settings for the sample: no database, no apps, no middleware; the session store is
``$AGENTKIT_SESSIONS`` (a SQLite file beside the sample by default; ``redis://...`` or
``postgresql://...`` for workers on several machines)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SECRET_KEY = "agentkit-sample-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "django_runs.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, Any] = {}
USE_TZ = True

AGENTKIT_SESSIONS = os.environ.get(
    "AGENTKIT_SESSIONS", f"sqlite:///{Path(__file__).resolve().parent / 'runs.db'}"
)
