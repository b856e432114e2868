"""Look before answering: which tasks name something the tools can look at."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit.local.looking import asks_to_look, names_to_look_at
from agentkit.types import AssistantMessage, TextContent, ToolResultMessage, UserMessage


def _workspace(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "util.py").write_text("def helper(v):\n    return sorted(v)\n")
    (tmp_path / "notes.txt").write_text("milk\n")
    return tmp_path


def test_names_of_workspace_files_and_folders(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    text = "Read src/util.py, then ./notes.txt. Is notes.txt long? What is in the folder src?"
    assert names_to_look_at(text, ws) == ["src/util.py", "notes.txt", "src"]
    assert names_to_look_at("Create a file hello.txt containing hi.", ws) == []
    assert names_to_look_at("Read ../../etc/passwd and / and . please", ws) == []
    assert names_to_look_at("What is the capital of France?", ws) == []


def test_a_command_or_a_named_file_asks_for_a_look_until_a_result_comes(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    asked = UserMessage(content=[TextContent(text="Is coffee in notes.txt? Answer yes or no.")])
    assert asks_to_look([asked], ws)
    looked = ToolResultMessage(tool_call_id="c", tool_name="read_file", content=[])
    assert not asks_to_look([asked, AssistantMessage(), looked], ws)
    for command in ("Run the command: date +%Y.", "Please execute `ls -la` for me."):
        assert asks_to_look([UserMessage(content=command)], ws)
    assert not asks_to_look([UserMessage(content="Thanks, that is all.")], ws)
    assert not asks_to_look([], ws)


@pytest.mark.parametrize(
    "text",
    [
        "Search the workspace for the word budget. Which file mentions it?",
        "Which files contain TODO?",
        "List the files of the project.",
        "Find the folder that holds the logs.",
    ],
)
def test_a_search_of_the_workspace_asks_for_a_look(tmp_path: Path, text: str) -> None:
    assert asks_to_look([UserMessage(content=text)], tmp_path)


@pytest.mark.parametrize(
    "text", ["What is a budget?", "Find me a good name for a cat.", "Tell me a joke about files."]
)
def test_a_question_that_searches_nothing_asks_for_no_look(tmp_path: Path, text: str) -> None:
    assert not asks_to_look([UserMessage(content=text)], tmp_path)
