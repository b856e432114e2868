"""Where API keys come from: the environment variables each vendor documents.

The variables live in the provider table (:mod:`agentkit.providers.table`); this module keeps the
names callers already use.
"""

from __future__ import annotations

from .table import PROVIDERS, env_var_names, get_env_api_key

ENV_KEYS: dict[str, tuple[str, ...]] = {
    name: info.env_keys for name, info in PROVIDERS.items() if info.env_keys
}
"""Provider name to the environment variables holding its key, in order of preference."""

__all__ = ["ENV_KEYS", "env_var_names", "get_env_api_key"]
