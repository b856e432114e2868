"""Failed tool results on the embedded model: marked in the request so that the shipped template
words them as a call to correct, not as a result to answer from (the rendering itself is tested
against the real server in ``test_local.py``)."""

from __future__ import annotations

from typing import Any

from agentkit import Agent, tool
from agentkit.local import mark_failed_results, with_constrained_tool_calls
from agentkit.local.template import FAILED_RESULT_PREFIX
from agentkit.testing import SCRIPTED_MODEL, ScriptedModel, reply, tool_call
from agentkit.types import Context, ImageContent, TextContent, ToolResultMessage, UserMessage

LOCAL = SCRIPTED_MODEL.model_copy(update={"api": "openai-completions", "provider": "local"})


def result(text: str, is_error: bool) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id="c1", tool_name="read_file", content=[TextContent(text=text)], is_error=is_error
    )


def test_only_failed_results_are_marked_and_the_original_is_kept() -> None:
    failed, fine = result("no such file: a.txt", True), result("hello", False)
    context = Context(messages=[UserMessage(content="read a.txt"), fine, failed])
    marked = mark_failed_results(context)
    assert marked.messages[0] is context.messages[0] and marked.messages[1] is fine
    assert marked.messages[2].content[0].text == FAILED_RESULT_PREFIX + "no such file: a.txt"
    assert failed.content[0].text == "no such file: a.txt"  # the transcript is not changed
    assert mark_failed_results(marked).messages[2].content[0].text == (
        marked.messages[2].content[0].text  # never marked twice
    )


def test_a_context_without_failed_results_is_returned_as_is() -> None:
    context = Context(messages=[UserMessage(content="hi"), result("hello", False)])
    assert mark_failed_results(context) is context


def test_a_failed_result_without_text_gets_the_mark_as_its_text() -> None:
    image = ImageContent(data="aGk=", mime_type="image/png")
    failed = ToolResultMessage(
        tool_call_id="c1", tool_name="shot", content=[image], is_error=True
    )
    marked = mark_failed_results(Context(messages=[failed])).messages[0]
    assert marked.content[0].text == FAILED_RESULT_PREFIX.rstrip()
    assert marked.content[1] == image


def test_the_model_reads_a_failure_as_one_and_corrects_its_call() -> None:
    """The scripted model retries only when the result it reads is marked as failed, as the
    template asks the real one to; without the mark it would answer from the error text."""
    ran: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        if path != "notes.txt":
            raise FileNotFoundError(f"no such file: {path}")
        return "milk, eggs"

    def after_result(context: Context, options: Any) -> Any:
        last = context.messages[-1]
        if last.content[0].text.startswith(FAILED_RESULT_PREFIX):
            return reply(tool_call("read_file", {"path": "notes.txt"}))
        return "The call failed, so I cannot tell."

    model = ScriptedModel(
        [reply(tool_call("read_file", {"path": "note.txt"})), after_result, "It says milk, eggs."],
        model=LOCAL,
    )
    agent = Agent(model=LOCAL, stream_fn=with_constrained_tool_calls(model), tools=[read_file])
    answer = agent.prompt("What does notes.txt say?")[-1]
    assert answer.text == "It says milk, eggs."
    assert ran == ["note.txt", "notes.txt"]
    failed = [m for m in agent.state.messages if m.role == "tool_result"][0]
    assert failed.is_error and failed.content[0].text == "no such file: note.txt"


def test_other_apis_get_the_context_unmarked() -> None:
    model = ScriptedModel([reply(tool_call("boom", {})), "done"])

    @tool
    def boom() -> str:
        """Fail."""
        raise RuntimeError("it broke")

    agent = Agent(model=model.model, stream_fn=with_constrained_tool_calls(model), tools=[boom])
    agent.prompt("go")
    assert model.requests[1].messages[-1].content[0].text == "it broke"
