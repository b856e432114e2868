"""``import agentkit`` loads only what a plain run needs; the rest loads on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentkit


def in_a_fresh_interpreter(code: str) -> None:
    """Run ``code`` in a new interpreter (nothing imported yet); its assertions must hold."""
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.processes
def test_import_leaves_the_catalog_and_approvals_unloaded() -> None:
    in_a_fresh_interpreter(
        "import sys, agentkit\n"
        "from agentkit import Agent, Model, tool\n"
        "loaded = [m for m in ('agentkit.approvals', 'agentkit.providers', 'requests', 'jsonschema',"
        " 'logging', 'concurrent.futures')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from agentkit import Approvals, get_model\n"
        "assert 'agentkit.approvals' in sys.modules and 'agentkit.providers' in sys.modules\n"
    )


def test_lazy_names_are_the_modules_own() -> None:
    from agentkit import approvals
    from agentkit.providers import catalog

    assert agentkit.Approvals is approvals.Approvals
    assert agentkit.ApprovalRequest is approvals.ApprovalRequest
    assert agentkit.ApprovalDecision is approvals.ApprovalDecision
    assert agentkit.get_model is catalog.get_model
    for name in agentkit.__all__:
        assert getattr(agentkit, name) is not None, name


def test_the_face_is_small_and_the_layers_below_stay_reachable() -> None:
    import importlib

    assert len(agentkit.__all__) <= 60
    assert len(set(agentkit.__all__)) == len(agentkit.__all__)
    for module, names in agentkit._ELSEWHERE.items():
        for name in names:
            assert getattr(agentkit, name) is getattr(importlib.import_module(module), name), name
    namespace: dict[str, object] = {}
    exec("from agentkit import *", namespace)
    assert "Agent" in namespace and "get_model" in namespace
    assert "TextDeltaEvent" not in namespace and "run_agent_loop" not in namespace
    from agentkit import TextDeltaEvent, TurnContext  # the flat spelling still imports

    assert TextDeltaEvent.__module__ == "agentkit.events"
    assert TurnContext.__module__ == "agentkit.hooks"


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        agentkit.NoSuchName  # noqa: B018


@pytest.mark.processes
def test_a_request_loads_only_its_own_api() -> None:
    in_a_fresh_interpreter(
        "import sys\n"
        "from agentkit.providers import complete, registered_apis\n"
        "from agentkit.types import Context, Model\n"
        "apis = ('openai_completions', 'openai_responses', 'anthropic', 'google')\n"
        "loaded = lambda: [a for a in apis if 'agentkit.providers.' + a in sys.modules]\n"
        "assert loaded() == [], loaded()\n"
        "assert len(registered_apis()) == 4  # registered all along, loaded on first use\n"
        "model = Model(id='m', api='anthropic-messages', provider='anthropic',\n"
        "              base_url='http://127.0.0.1:1')  # nothing listens: the request fails\n"
        "message = complete(model, Context(messages=[]), {'api_key': 'k', 'max_retries': 0})\n"
        "assert message.stop_reason == 'error', message\n"
        "assert loaded() == ['anthropic'], loaded()\n"
    )


def test_an_unregistered_builtin_api_stays_unregistered() -> None:
    from agentkit.providers import get_api, register_api, registered_apis, unregister_api
    from agentkit.providers.google import reasoning_options, stream_google

    unregister_api("google-generative-ai")
    try:
        assert get_api("google-generative-ai") is None
        assert "google-generative-ai" not in registered_apis()
    finally:
        register_api("google-generative-ai", stream_google, reasoning_options)
    assert get_api("google-generative-ai") is stream_google
