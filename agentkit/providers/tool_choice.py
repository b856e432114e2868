"""The portable ``tool_choice`` and its form on each wire API.

Portable values: ``"auto"``, ``"none"``, ``"required"`` (``"any"`` is taken as a synonym) and
``{"name": "<tool>"}`` (that tool must be called). Any other dict is the API's own value and is
sent as it is.
"""

from __future__ import annotations

from typing import Any


def wire_tool_choice(api: str, choice: str | dict[str, Any] | None) -> Any:
    """``choice`` as ``api`` spells it (``None`` stays ``None``: the API's default)."""
    if choice is None:
        return None
    named = choice.get("name") if isinstance(choice, dict) and set(choice) == {"name"} else None
    if isinstance(choice, dict) and named is None:
        return choice
    if isinstance(choice, str):
        choice = "required" if choice == "any" else choice
    if api == "anthropic-messages":
        if named is not None:
            return {"type": "tool", "name": named}
        return {"type": "any" if choice == "required" else choice}
    if api == "google-generative-ai":
        if named is not None:
            return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [named]}}
        mode = "ANY" if choice == "required" else str(choice).upper()
        return {"functionCallingConfig": {"mode": mode}}
    if named is not None:
        if api == "openai-responses":
            return {"type": "function", "name": named}
        return {"type": "function", "function": {"name": named}}
    return choice
