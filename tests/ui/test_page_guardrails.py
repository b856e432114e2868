"""A guardrail's record on the page: the transcript shows which guardrail acted, where and
why, as text."""

from __future__ import annotations

from agentkit.guardrails import GuardrailRecord
from agentkit.sessions import Session
from agentkit.types import AssistantMessage, TextContent, UserMessage
from agentkit.ui import UiServer

from ..support import WAIT
from .conftest import HOSTILE
from .test_page_http import _base, _signed_in


def test_a_guardrails_record_is_shown_in_the_transcript(page_server: UiServer) -> None:
    Session("guarded", page_server.store).append(
        UserMessage(content="What is the key?"),
        AssistantMessage(content=[TextContent(text="Sure. ")], stop_reason="aborted"),
        GuardrailRecord(guardrail="secrets", point="output", action="trip",
                        reason=f"OpenAI-style API key in the answer {HOSTILE}"),
    )  # fmt: skip
    html = _signed_in(page_server).get(_base(page_server) + "/s/guarded", timeout=WAIT).text
    assert 'class="entry role-guardrail"' in html
    assert "Guardrail secrets stopped the run on the answer: OpenAI-style API key" in html
    assert "<script>window.pwned" not in html  # a reason is shown as text
