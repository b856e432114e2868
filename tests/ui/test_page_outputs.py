"""A result cut by the tool-output limit on the page: its call says "cut: N of M", and the kept
output's megabytes are not sent to the browser."""

from __future__ import annotations

from agentkit.context import ToolOutputRecord
from agentkit.sessions import Session
from agentkit.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from agentkit.ui import UiServer

from ..support import WAIT
from .conftest import HOSTILE
from .test_page_http import _base, _signed_in


def test_a_cut_result_says_how_much_was_cut_and_the_page_stays_small(
    page_server: UiServer,
) -> None:
    whole = ("a log line " + HOSTILE + "\n") * 40_000  # about 4 MB
    Session("cut", page_server.store).append(
        UserMessage(content="read the log"),
        AssistantMessage(content=[ToolCall(id="c1", name="read_log", arguments={})],
                         stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="read_log",
                          content=[TextContent(text="[Output cut: ...] a log line")]),
        ToolOutputRecord(id="out-0badf00d", tool_call_id="c1", tool_name="read_log",
                         text=whole, chars=len(whole), shown=2_000),
        AssistantMessage(content=[TextContent(text="Done.")], stop_reason="stop"),
    )  # fmt: skip
    response = _signed_in(page_server).get(_base(page_server) + "/s/cut", timeout=WAIT)
    html = response.text
    assert f"cut: {len(whole) - 2_000:,} of {len(whole):,} characters" in html
    assert len(response.content) < 200_000
    assert "role-tool_output" not in html and "<script>window.pwned" not in html


def test_a_kept_output_without_its_call_is_a_line_not_its_text(page_server: UiServer) -> None:
    whole = "x" * 3_000_000
    Session("orphan", page_server.store).append(
        UserMessage(content="hi"),
        ToolOutputRecord(id="out-0badf00d", tool_call_id="gone", tool_name="read_log",
                         text=whole, chars=len(whole), shown=2_000),
    )  # fmt: skip
    response = _signed_in(page_server).get(_base(page_server) + "/s/orphan", timeout=WAIT)
    assert "A tool output kept whole (its call is not here)." in response.text
    assert len(response.content) < 200_000
