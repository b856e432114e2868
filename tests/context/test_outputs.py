"""Tool-output limits over real HTTP: an oversized result reaches the model as a preview, is
kept whole (in the session, read back in a new process), and is read with the retrieval tool;
hostile sizes, bytes, caps, ids and ranges get clear answers and lose nothing."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent, current_run_context, tool
from agentkit.context import OUTPUT_ROLE, ToolOutputLimit, output_records
from agentkit.sessions import Session
from agentkit.transcript import COMPACTION_ROLE
from agentkit.types import AgentToolResult, ImageContent, TextContent, ToolResultMessage, role_of
from tests.providers.replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    call_delta,
    chat_sse,
    make_model,
)

ROOT = Path(__file__).resolve().parents[2]
NEEDLE = "2026-12-03T10:17:42Z ERROR order 48213 failed: card declined (code Z7Q)"


def log_text(lines: int, needle_at: int) -> str:
    """A log of ``lines`` lines with :data:`NEEDLE` as line ``needle_at`` (from 1)."""
    rows = [f"2026-12-03T10:{n // 600 % 60:02d}:{n // 10 % 60:02d}Z INFO worker-{n % 7} "
            f"request {n} served in {n % 97} ms" for n in range(1, lines + 1)]  # fmt: skip
    rows[needle_at - 1] = NEEDLE
    return "\n".join(rows)


def calls(*items: tuple[str, str, dict[str, Any]]) -> Reply:
    """A Chat Completions reply calling each (id, tool, arguments)."""
    deltas = []
    for index, (call_id, name, args) in enumerate(items):
        delta = call_delta(call_id, name, args)
        delta["tool_calls"][0]["index"] = index
        deltas.append(delta)
    return Reply(body=chat_sse(*deltas, finish="tool_calls"))


def says(text: str) -> Reply:
    return Reply(body=chat_sse({"content": text}))


def agent_for(server: ReplayServer, output: str, **options: Any) -> Agent:
    @tool
    def read_log() -> str:
        """Read the service's log."""
        return output

    policy = options.pop("policy", None) or ToolOutputLimit()
    return Agent(
        model=make_model("openai-completions", server.url, context_window=4096),
        tools=[read_log], policies=[policy], api_key=API_KEY, retry_base_delay_ms=1,
        max_retries=0, timeout=(5, 5), **options,
    )  # fmt: skip


def kept_id(preview: str) -> str:
    """The id a preview says its output is kept as."""
    found = re.search(r'kept as "(out-[0-9a-f]{8})"', preview)
    assert found is not None, preview[-400:]
    return found.group(1)


def tool_names(server: ReplayServer, index: int) -> list[str]:
    """The tools a recorded request declared."""
    return [d["function"]["name"] for d in request_body(server, index)["tools"]]


def tool_results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def request_body(server: ReplayServer, index: int) -> dict[str, Any]:
    return server.requests[index].json  # type: ignore[no-any-return]


def test_a_50_mb_result_is_previewed_kept_whole_and_searched(server: ReplayServer) -> None:
    output = log_text(800_000, needle_at=412_345)
    assert len(output) > 50_000_000
    agent = agent_for(server, output)
    server.enqueue(calls(("c1", "read_log", {})))

    def answer(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "read_log":
            output_id = kept_id(event.result.content[0].text)
            server.enqueue(calls(("c2", "read_output", {"id": output_id, "search": "order 48213"})))
            server.enqueue(says("Line 412345: code Z7Q."))

    agent.subscribe(answer)  # the id is random: the next replies are queued once it is known
    result = agent.prompt("Why did order 48213 fail?")
    assert result.stop_reason == "stop", result.error_message
    cut, found = tool_results(result.messages)
    preview_text = cut.content[0].text
    cap = ToolOutputLimit().cap(agent.state.model)
    assert len(preview_text) <= cap and preview_text.startswith("[Output cut: ")
    assert "800,000 lines" in preview_text and NEEDLE not in preview_text
    assert preview_text.endswith("for a range of lines.]")  # how to read on: last, seen first
    assert found.content[0].text.splitlines()[1] == f"412345: {NEEDLE}"
    # What the model was sent: the preview and the found line, never the 50 MB.
    assert all(len(r.body) < 40_000 for r in server.requests)
    assert "412345: " + NEEDLE in json.dumps(request_body(server, 2))
    (record,) = output_records(agent.state.messages)
    assert record.text == output and record.chars == len(output)
    assert record.tool_call_id == "c1" and record.shown < cap
    assert tool_names(server, 1) == ["read_log", "read_output"]


def test_a_result_within_the_cap_is_left_as_it_is(server: ReplayServer) -> None:
    agent = agent_for(server, "short answer")
    server.enqueue(calls(("c1", "read_log", {})), says("ok"))
    result = agent.prompt("go")
    (only,) = tool_results(result.messages)
    assert only.content[0].text == "short answer"
    assert not output_records(agent.state.messages)
    assert tool_names(server, 1) == ["read_log"]


def test_undecodable_bytes_are_kept_readable_and_stored(
    tmp_path: Path, server: ReplayServer
) -> None:
    raw = bytes(range(256)) * 400 + b"\nthe line after the bytes\n" + b"\xff\xfe\x00" * 5000
    output = raw.decode("utf-8", "surrogateescape")  # lone surrogates, NULs, controls
    session = Session("bytes", str(tmp_path / "s.db"))
    agent = agent_for(server, output, session=session)
    server.enqueue(calls(("c1", "read_log", {})), says("seen"))
    assert agent.prompt("read it").stop_reason == "stop"
    (record,) = output_records(Session("bytes", str(tmp_path / "s.db")).load())
    assert "the line after the bytes" in record.text
    assert "\ufffd" in record.text and record.text.encode("utf-8")  # strict UTF-8 now
    assert record.chars == len(output)
    kept = agent.state.messages[-1]
    assert role_of(kept) == "assistant"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_chars": -5}, ValueError),
        ({"max_chars": 0}, ValueError),
        ({"max_tokens": math.nan}, ValueError),
        ({"max_tokens": math.inf}, ValueError),
        ({"max_chars": True}, TypeError),
        ({"max_chars": "4000"}, TypeError),
        ({"share": 0.0}, ValueError),
        ({"share": 1.5}, ValueError),
        ({"share": math.nan}, ValueError),
        ({"max_chars": 10, "max_tokens": 10}, ValueError),
    ],
)
def test_a_cap_that_cannot_be_is_refused_where_it_is_given(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        ToolOutputLimit(**options)
    assert str(raised.value)


def test_a_huge_cap_cuts_nothing_and_a_tiny_one_keeps_room_for_the_notice(
    server: ReplayServer,
) -> None:
    output = log_text(20_000, needle_at=7)
    agent = agent_for(server, output, policy=ToolOutputLimit(max_chars=10**30))
    server.enqueue(calls(("c1", "read_log", {})), says("ok"))
    (whole,) = tool_results(agent.prompt("go").messages)
    assert whole.content[0].text == output
    tiny = ToolOutputLimit(max_chars=1)
    assert tiny.cap(None) == 400
    assert ToolOutputLimit(max_tokens=1000).cap(None) == 2000
    model = make_model("openai-completions", server.url, context_window=4096)
    assert ToolOutputLimit().cap(model) == 1024 * 2


def test_reads_of_unknown_ids_and_out_of_bounds_ranges_say_what_is_there(
    server: ReplayServer,
) -> None:
    output = log_text(3_000, needle_at=1_500)
    agent = agent_for(server, output)
    ids: list[str] = []
    reads = [
        {"id": "out-nothere", "search": "x"},
        {"start_line": 5},  # no id at all
        {"id": "ID", "start_line": 99_999},
        {"id": "ID", "start_line": 10, "end_line": 3},
        {"id": "ID", "start_byte": 10**12},
        {"id": "ID", "start_byte": 50, "end_byte": 50},
        {"id": "ID", "search": "   "},
        {"id": "ID", "start_line": 2_999, "end_line": 10**9},
        {"id": "ID", "start_byte": 0, "end_byte": 10**9},
        {"id": "ID", "search": "no such words anywhere"},
    ]

    def answer(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "read_log":
            output_id = kept_id(event.result.content[0].text)
            ids.append(output_id)
            batch = [(f"r{i}", "read_output", {k: output_id if v == "ID" else v
                      for k, v in args.items()}) for i, args in enumerate(reads)]  # fmt: skip
            server.enqueue(calls(*batch), says("done"))

    agent.subscribe(answer)
    server.enqueue(calls(("c1", "read_log", {})))
    result = agent.prompt("go")
    assert result.stop_reason == "stop", result.error_message
    answers = tool_results(result.messages)[1:]
    said = [(a.is_error, a.content[0].text) for a in answers]
    assert said[0][0] and "No kept output 'out-nothere'; the kept ones: out-" in said[0][1]
    assert said[1][0]  # the schema asks for an id
    assert said[2] == (True, f"start_line 99999 is past the end: {ids[0]} has 3000 lines")
    assert said[3] == (True, "end_line 3 is before start_line 10")
    assert said[4][0] and "is past the end" in said[4][1]
    assert said[5] == (True, "end_byte 50 must be above start_byte 50")
    assert said[6] == (True, "search must be some text to look for")
    assert not said[7][0] and said[7][1].endswith("[lines 2999-3000 of 3000]")
    assert not said[8][0] and len(said[8][1]) < 2_200 and "[bytes 0-2048 of" in said[8][1]
    assert not said[9][0] and said[9][1].startswith("No line of out-")


def test_a_session_reloaded_in_a_new_process_reads_the_kept_output(
    tmp_path: Path, server: ReplayServer
) -> None:
    store = str(tmp_path / "s.db")
    output = log_text(40_000, needle_at=31_337)
    agent = agent_for(server, output, session=Session("log", store))
    server.enqueue(calls(("c1", "read_log", {})), says("I read the log."))
    assert agent.prompt("read the log").stop_reason == "stop"
    (record,) = output_records(Session("log", store).load())
    server.enqueue(calls(("c9", "read_output", {"id": record.id, "search": "order 48213"})))
    server.enqueue(says("found it"))
    child = subprocess.run(
        [sys.executable, "-m", "tests.context.outputs_child", store, "log", server.url],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    said = json.loads(child.stdout.strip().splitlines()[-1])
    assert said["stop"] == "stop" and not said["error"]
    assert f"31337: {NEEDLE}" in said["text"]
    # The new process declared the tool again before it was called: the request offered it.
    assert "read_output" in tool_names(server, -2)


def test_the_kept_output_outlives_a_compaction_and_its_pair_stays_whole(
    server: ReplayServer,
) -> None:
    output = log_text(10_000, needle_at=9_001)
    agent = agent_for(server, output, compaction="trim")
    server.enqueue(calls(("c1", "read_log", {})), says("read"))
    agent.prompt("read the log")
    for turn in range(3):
        server.enqueue(says(f"answer {turn}"))
        agent.prompt(f"question {turn} " + "padding " * 300)
    agent.compact()
    messages = agent.state.messages
    assert any(role_of(m) == COMPACTION_ROLE for m in messages)
    (record,) = output_records(messages)
    server.enqueue(calls(("c2", "read_output", {"id": record.id, "start_line": 9_001,
                                                "end_line": 9_001})))  # fmt: skip
    server.enqueue(says("found"))
    result = agent.prompt("which order failed?")
    assert result.stop_reason == "stop", result.error_message
    (found,) = tool_results(result.messages)
    assert found.content[0].text.startswith(f"9001: {NEEDLE}")
    # The model's view never shows a call without its result.
    sent = request_body(server, -1)["messages"]
    called = {c["id"] for m in sent for c in m.get("tool_calls") or []}
    answered = {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    assert called == answered


def test_the_record_follows_the_batch_in_the_session(tmp_path: Path, server: ReplayServer) -> None:
    store = str(tmp_path / "s.db")
    agent = agent_for(server, log_text(5_000, needle_at=2), session=Session("order", store))
    server.enqueue(calls(("c1", "read_log", {}), ("c2", "read_log", {})), says("ok"))
    agent.prompt("twice")
    stored = [role_of(m) for m in Session("order", store).load()]
    assert stored == ["system", "user", "assistant", "tool_result", "tool_result", OUTPUT_ROLE, OUTPUT_ROLE,
                      "system", "assistant"]  # fmt: skip


def test_read_after_cut_asks_the_next_request_for_a_read_once(server: ReplayServer) -> None:
    agent = agent_for(server, log_text(5_000, needle_at=9),
                      policy=ToolOutputLimit(read_after_cut=True))  # fmt: skip

    def answer(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "read_log":
            output_id = kept_id(event.result.content[0].text)
            server.enqueue(calls(("c2", "read_output", {"id": output_id, "search": "48213"})))
            server.enqueue(says("code Z7Q"))

    agent.subscribe(answer)
    server.enqueue(calls(("c1", "read_log", {})))
    assert agent.prompt("go").stop_reason == "stop"
    choices = [request_body(server, i).get("tool_choice") for i in range(3)]
    wanted = {"type": "function", "function": {"name": "read_output"}}
    assert choices == [None, wanted, None]


def test_an_error_result_is_cut_too_and_its_images_and_error_stay(server: ReplayServer) -> None:
    @tool
    def crash() -> AgentToolResult:
        """Fail loudly."""
        image = ImageContent(data="aGk=", mime_type="image/png")
        trace = "Traceback (most recent call last):\n" + "  frame\n" * 10_000
        return AgentToolResult(content=[TextContent(text=trace), image], is_error=True)

    agent = Agent(
        model=make_model("openai-completions", server.url, context_window=4096),
        tools=[crash], policies=[ToolOutputLimit()], api_key=API_KEY, retry_base_delay_ms=1,
        max_retries=0, timeout=(5, 5),
    )  # fmt: skip
    server.enqueue(calls(("c1", "crash", {})), says("it failed"))
    result = agent.prompt("go")
    (failed,) = tool_results(result.messages)
    assert failed.is_error and failed.content[0].text.startswith("[Output cut: ")
    assert [b.type for b in failed.content] == ["text", "image"]
    (record,) = output_records(agent.state.messages)
    assert record.text.count("frame") == 10_000


def test_a_batch_aborted_after_a_cut_still_keeps_the_output(
    tmp_path: Path, server: ReplayServer
) -> None:
    store = str(tmp_path / "s.db")
    released = threading.Event()

    @tool
    def wait_for_abort() -> str:
        """Wait until the run is aborted."""
        signal = current_run_context().signal
        signal.wait(30)
        released.set()
        return "stopped"

    output = log_text(20_000, needle_at=3)

    @tool
    def read_log() -> str:
        """Read the service's log."""
        return output

    agent = Agent(
        model=make_model("openai-completions", server.url, context_window=4096),
        tools=[read_log, wait_for_abort], policies=[ToolOutputLimit()],
        session=Session("aborted", store), api_key=API_KEY, retry_base_delay_ms=1,
        max_retries=0, timeout=(5, 5),
    )  # fmt: skip

    def abort_once_cut(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "read_log":
            agent.abort()

    agent.subscribe(abort_once_cut)
    server.enqueue(calls(("c1", "read_log", {}), ("c2", "wait_for_abort", {})))
    result = agent.prompt("go")
    assert result.stop_reason == "aborted" and released.is_set()
    (record,) = output_records(Session("aborted", store).load())
    assert record.text == output and record.tool_call_id == "c1"


def test_a_tool_that_returns_a_dict_is_cut_as_well(server: ReplayServer) -> None:
    from agentkit.types import AgentTool

    output = log_text(20_000, needle_at=5)
    dict_tool = AgentTool(
        name="read_log", description="Read the log.", parameters={"type": "object"},
        execute=lambda *_: {"content": [{"type": "text", "text": output}]},
    )  # fmt: skip
    agent = Agent(
        model=make_model("openai-completions", server.url, context_window=4096),
        tools=[dict_tool], policies=[ToolOutputLimit()], api_key=API_KEY,
        retry_base_delay_ms=1, max_retries=0, timeout=(5, 5),
    )  # fmt: skip
    server.enqueue(calls(("c1", "read_log", {})), says("ok"))
    (cut,) = tool_results(agent.prompt("go").messages)
    assert cut.content[0].text.startswith("[Output cut: ") and len(cut.content[0].text) <= 2_048
    assert output_records(agent.state.messages)[0].text == output


def test_the_run_log_says_what_was_kept_without_its_text(
    tmp_path: Path, server: ReplayServer
) -> None:
    from agentkit.sessions import open_store

    store = open_store(str(tmp_path / "s.db"))
    output = log_text(100_000, needle_at=5)  # about 5 MB
    agent = agent_for(server, output, session=Session("logged", store))
    server.enqueue(calls(("c1", "read_log", {})), says("ok"))
    run = agent.start("go")
    run.wait(30)
    agent.close()
    entries = store.run_log().read(run.id, 0, 10_000)
    logged = [json.loads(text) for _, text in entries]
    kept = [e for e in logged if (e.get("message") or {}).get("role") == OUTPUT_ROLE]
    assert [e["type"] for e in kept] == ["message_start", "message_end"]
    assert kept[0]["message"]["chars"] == len(output) and "text" not in kept[0]["message"]
    assert sum(len(text) for _, text in entries) < 100_000
