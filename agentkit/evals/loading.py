"""Naming code on a command line: ``module:attribute`` (``myapp.agents:make_agent``), what
``agentkit eval --agent`` and the pytest plugin's ``--eval-agent`` take, and evaluator specs
written as text."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any


def load_object(spec: str, what: str = "object") -> Any:
    """The object ``module:attribute`` names (dotted attributes allowed); the current folder
    is importable, as it is for ``python -m``. A bad spec raises ``ValueError`` saying why."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"the {what} is MODULE:NAME (e.g. myapp.agents:make_agent), not {spec!r}")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"the {what} {spec}: cannot import {module_name}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"the {what} {spec}: {module_name} has no {attribute}") from None
    return value


def evaluator_from_text(text: str) -> Any:
    """An evaluator written as a dataset file would (``SameToolCalls``, ``{"Contains":
    "Paris"}``, ``{Contains: Paris}`` in YAML when PyYAML is installed)."""
    from .cases import evaluator_types
    from .evaluators import evaluator_from_spec

    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml

            spec = yaml.safe_load(text)
        except ImportError:
            spec = text
        except Exception as exc:
            raise ValueError(f"not an evaluator: {text!r} ({exc})") from None
    return evaluator_from_spec(spec, evaluator_types())
