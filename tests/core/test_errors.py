"""agentkit's exceptions: one module defines them all, in one hierarchy, and the modules that
raise them keep the names importable."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agentkit
from agentkit import errors


def _modules() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages(agentkit.__path__, "agentkit.")]
    return [name for name in names if not name.endswith("__main__")]


def test_every_exception_is_defined_in_errors_under_agent_error() -> None:
    elsewhere = []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra that is not installed
            continue
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("agentkit")
                and value.__module__ != "agentkit.errors"
            ):
                elsewhere.append(f"{value.__module__}.{value.__name__}")
    assert not elsewhere
    for value in vars(errors).values():
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, errors.AgentError), value
            signal = value in (errors.ToolRetry, errors.BudgetReached, errors.EndRun, errors.EvalInterrupted)
            assert value.__name__.endswith("Error") or signal, value


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("agentkit.results", "BudgetExceededError"),
        ("agentkit.results", "OutputValidationError"),
        ("agentkit.budgets", "BudgetReached"),
        ("agentkit.event_stream", "StreamEndedError"),
        ("agentkit.sessions", "SessionConflictError"),
        ("agentkit.sessions.base", "SessionError"),
        ("agentkit.providers", "UnknownModelError"),
        ("agentkit.workspace", "WorkspaceError"),
        ("agentkit.local", "LocalModelError"),
        ("agentkit.local.repair", "PlaceholderArgumentsError"),
        ("agentkit.integrations.mcp", "MCPServerError"),
        ("agentkit.integrations.celery", "AgentRunFailedError"),
        ("agentkit.cli.app", "CliError"),
    ],
)
def test_the_raising_module_keeps_the_name(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_the_old_celery_name_is_the_new_class() -> None:
    celery = pytest.importorskip("agentkit.integrations.celery")
    assert celery.AgentRunFailed is errors.AgentRunFailedError


def test_two_errors_are_also_the_builtin_a_caller_may_catch() -> None:
    assert issubclass(errors.UnknownModelError, KeyError)
    assert issubclass(errors.PlaceholderArgumentsError, ValueError)
    assert str(errors.UnknownModelError("no model x")) == "no model x"
