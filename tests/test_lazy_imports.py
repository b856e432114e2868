"""``import agentkit`` loads only what a plain run needs; the rest loads on first use (issue 8)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentkit


def test_import_leaves_the_catalog_and_approvals_unloaded() -> None:
    code = (
        "import sys, agentkit\n"
        "from agentkit import Agent, Model, tool\n"
        "loaded = [m for m in ('agentkit.approvals', 'agentkit.providers', 'requests', 'jsonschema',"
        " 'logging', 'concurrent.futures')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from agentkit import Approvals, get_model\n"
        "assert 'agentkit.approvals' in sys.modules and 'agentkit.providers' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lazy_names_are_the_modules_own() -> None:
    from agentkit import approvals
    from agentkit.providers import catalog

    assert agentkit.Approvals is approvals.Approvals
    assert agentkit.ApprovalRequest is approvals.ApprovalRequest
    assert agentkit.ApprovalDecision is approvals.ApprovalDecision
    assert agentkit.get_model is catalog.get_model
    for name in agentkit.__all__:
        assert getattr(agentkit, name) is not None, name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        agentkit.NoSuchName  # noqa: B018
