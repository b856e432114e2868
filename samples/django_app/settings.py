"""Settings for the sample: no database, no apps, no middleware; just the two views."""

from __future__ import annotations

from typing import Any

SECRET_KEY = "agentkit-sample-not-a-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "django_app.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, Any] = {}
USE_TZ = True

# The model the views run on. AGENTKIT_STREAM_FN: a stream function (tests put a ScriptedModel
# here) with AGENTKIT_MODEL_OBJECT its Model; both None: the offline demo model, or the real model
# that AGENTKIT_MODEL ("provider:model_id", or the environment variable of that name) names.
AGENTKIT_STREAM_FN = None
AGENTKIT_MODEL_OBJECT = None
AGENTKIT_MODEL = None
