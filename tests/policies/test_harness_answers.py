"""The harness's checks of the answer itself (agentkit.harness.answers: a call described
instead of made, a fix that changed nothing, a file cited that nothing read), the "then read
it" step, and the column facts added to a read of a table (agentkit.harness.tables); on a real
loop over a scripted model, with the real workspace tools in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit import UserMessage
from agentkit.harness import CompletionCheck, Step, TableFacts, task_steps
from agentkit.harness.edits import suggested_edit
from agentkit.harness.tables import column_facts
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.policies.test_harness import agent_for, texts


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "letter.txt").write_text("Dear Sam,\nPlease bring the budget sheet.\n")
    (tmp_path / "calc.py").write_text("total = 0\nfor v in [1, 2]:\n    total = v\nprint(total)\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deploy.md").write_text("It listens on port 7070.\n")
    (tmp_path / "docs" / "intro.md").write_text("Welcome.\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "geo.py").write_text("def region_code():\n    return 'eu-west-3'\n")
    (tmp_path / "inventory.csv").write_text(
        "item,qty,price\napples,12,0.5\npears,5,0.8\nplums,30,0.2\nfigs,3,2.0\n"
    )
    return tmp_path


def test_a_described_call_is_sent_back_asking_for_that_tool(ws: Path) -> None:
    model = ScriptedModel(
        [
            "To search for budget, I will use the `search_text` function with pattern budget.",
            reply(tool_call("search_text", {"pattern": "budget"})),
            "letter.txt mentions it.",
        ]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt(
        "Search the workspace for the word budget. Which file mentions it?"
    )
    assert result.text == "letter.txt mentions it."
    sent_back = model.requests[1].messages[-1]
    assert isinstance(sent_back, UserMessage)
    assert "You described a call of search_text instead of making it" in texts(sent_back)
    assert model.requests[1].options.tool_choice == {"name": "search_text"}
    # the answer after the search names letter.txt, which the search showed: it stands
    assert len(model.requests) == 3


def test_an_answer_naming_a_tool_after_calls_is_not_a_described_call(ws: Path) -> None:
    model = ScriptedModel(
        [reply(tool_call("read_file", {"path": "letter.txt"})), "I used read_file: budget."]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt("What does letter.txt ask for?")
    assert result.text == "I used read_file: budget." and len(model.requests) == 2


def test_an_answer_citing_a_file_only_a_listing_showed_is_sent_back_to_read_it(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("list_folder", {"path": "docs"})),
            'The port is listed in the "deploy.md" file.',  # found by name, never read
            reply(tool_call("read_file", {"path": "docs/deploy.md"})),
            "The port is 7070.",
        ]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt(
        "One of the files in the docs folder says which port the service listens on. Find "
        "that file and tell me the port."
    )
    assert result.text == "The port is 7070."
    sent_back = texts(model.requests[2].messages[-1])
    assert "Your answer names docs/deploy.md, but you have not read it" in sent_back
    assert model.requests[2].options.tool_choice == {"name": "read_file"}


def test_a_file_a_search_found_a_line_in_counts_as_seen(ws: Path) -> None:
    model = ScriptedModel(
        [reply(tool_call("search_text", {"pattern": "budget"})), "letter.txt mentions budget."]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt("Which file mentions budget?")
    assert result.text == "letter.txt mentions budget." and len(model.requests) == 2


def test_a_name_that_is_not_one_file_of_the_workspace_is_not_checked(ws: Path) -> None:
    (ws / "src" / "intro.md").write_text("Another.\n")  # two files called intro.md
    model = ScriptedModel(
        [reply(tool_call("list_folder", {"path": "."})), "See intro.md, or nothing.md, or ../x.md."]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt("What is in the workspace?")
    assert result.text.startswith("See intro.md") and len(model.requests) == 2


def test_then_read_it_is_a_step_a_search_alone_does_not_do(ws: Path) -> None:
    task = (
        "Find which file under src defines the function region_code, then read it and tell "
        "me the value that function returns."
    )
    assert task_steps(task, ws) == [Step("look", "src", folder=True), Step("look", "")]
    model = ScriptedModel(
        [
            reply(tool_call("search_text", {"pattern": "def region_code", "path": "src"})),
            "It is defined in src/geo.py at line 1.",
            reply(tool_call("read_file", {"path": "src/geo.py"})),
            "It returns eu-west-3.",
        ]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt(task)
    assert result.text == "It returns eu-west-3."
    assert "the file you found was not read (call read_file)" in texts(model.requests[2].messages[-1])


def test_a_fix_that_changes_no_output_is_sent_back(ws: Path) -> None:
    useless = {"path": "calc.py", "old_text": "total = 0", "new_text": "total = 0  # start"}
    fix = {"path": "calc.py", "old_text": "total = v", "new_text": "total += v"}
    model = ScriptedModel(
        [
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            reply(tool_call("edit_file", useless)),
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            "It prints 2.",  # what it printed before the change
            reply(tool_call("edit_file", fix)),
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            "It prints 3.",
        ]
    )
    result = agent_for(ws, model, CompletionCheck(ws)).prompt(
        "calc.py prints the wrong total. Fix the bug, then run python3 calc.py."
    )
    assert result.text == "It prints 3."
    sent_back = texts(model.requests[4].messages[-1])
    assert "`python3 calc.py` prints exactly what it printed before it" in sent_back
    assert model.requests[4].options.tool_choice == {"name": "edit_file"}
    assert "total += v" in (ws / "calc.py").read_text()


def test_the_answer_checks_respect_max_sendbacks(ws: Path) -> None:
    model = ScriptedModel(["I will call search_text.", "I would call search_text."])
    result = agent_for(ws, model, CompletionCheck(ws, max_sendbacks=1)).prompt(
        "Which file mentions budget?"
    )
    assert result.text == "I would call search_text." and len(model.requests) == 2


# --- the column facts of a table --------------------------------------------------------------


def test_a_whole_read_of_a_csv_gets_its_column_facts(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("read_file", {"path": "inventory.csv"})), "plums"])
    agent_for(ws, model, TableFacts()).prompt("Read inventory.csv. Which has the largest qty?")
    shown = texts(model.requests[1].messages[-1])
    assert shown.startswith("item,qty,price\napples,12,0.5")  # the file as it is, first
    assert "qty: largest 30 (plums), smallest 3 (figs), sum 50" in shown
    assert "price: largest 2.0 (figs), smallest 0.2 (plums), sum 3.5" in shown


@pytest.mark.parametrize(
    "text",
    [
        "item,qty\napples,12\n",  # one data row: nothing to compare
        "item,qty\napples,12\npears\n",  # ragged rows
        "item,qty\napples,many\npears,few\n",  # no numeric column
        "item,qty\napples,nan\npears,inf\n",  # not finite
        "a,b\n1,2\n3,4\n[showing lines 1-3 of 90]\n",  # a part of the file
        "",
        "\x00\x01,\xff\n,,\n",
    ],
)
def test_what_is_not_a_whole_table_gets_no_facts(text: str) -> None:
    assert column_facts(text) is None


def test_facts_of_a_table_without_labels_huge_values_and_tabs() -> None:
    facts = column_facts("a\tb\n1\t1e300\n2\t-1e300\n3\t5\n", "\t")
    assert facts is not None
    assert "a: largest 3 (row 3), smallest 1 (row 1), sum 6" in facts
    assert "b: largest 1e300 (row 1), smallest -1e300 (row 2), sum 5" in facts


def test_a_read_from_an_offset_or_of_another_kind_gets_no_facts(ws: Path) -> None:
    (ws / "inventory.txt").write_text((ws / "inventory.csv").read_text())
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "inventory.csv", "offset": 2})),
            reply(tool_call("read_file", {"path": "inventory.txt"})),
            "done",
        ]
    )
    agent_for(ws, model, TableFacts()).prompt("Look at the inventory.")
    assert "Column facts" not in texts(model.requests[1].messages[-1])
    assert "Column facts" not in texts(model.requests[2].messages[-1])


# --- the edit a failed edit meant -------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "meant"),
    [
        ("log level = info", "log level = debug", ("level = info", "level = debug")),
        ("workers=4", "workers=8", ("workers = 4", "workers = 8")),
        ("port: 5000", "port: 6000", ("port = 5000", "port = 6000")),
        ("nothing like any line", "x", None),  # no line alike enough
        ("level = info", "level = info", None),  # no change to make
        ("[log]\nlevel = info", "[log]\nlevel = debug", None),  # over lines
        ("", "x", None),
    ],
)
def test_the_edit_a_failed_edit_meant(old: str, new: str, meant: tuple[str, str] | None) -> None:
    text = "[server]\nport = 5000\nworkers = 4\n\n[log]\nlevel = info\n"
    assert suggested_edit(text, old, new) == meant


def test_no_edit_is_suggested_between_two_equal_lines() -> None:
    assert suggested_edit("a = 1\nb = 2\na = 1\n", "a = 1 ", "a = 2") is None


def test_a_failed_edit_says_the_edit_it_meant_and_its_repeat_says_it_again(ws: Path) -> None:
    (ws / "settings.ini").write_text("[log]\nlevel = info\n")
    wrong = {"path": "settings.ini", "old_text": "log level = info", "new_text": "log level = debug"}
    right = {"path": "settings.ini", "old_text": "level = info", "new_text": "level = debug"}
    model = ScriptedModel(
        [
            reply(tool_call("edit_file", wrong)),
            reply(tool_call("edit_file", wrong)),  # the same failing edit again
            reply(tool_call("edit_file", right)),
            "Changed it to debug.",
        ]
    )
    agent_for(ws, model).prompt("In settings.ini, change the log level from info to debug.")
    meant = 'Did you mean old_text "level = info" and new_text "level = debug"?'
    first, repeat = (
        texts(next(m for m in reversed(model.requests[i].messages) if m.role == "tool_result"))
        for i in (1, 2)
    )
    assert meant in first
    assert meant in repeat and "already called with these arguments" in repeat
    assert (ws / "settings.ini").read_text() == "[log]\nlevel = debug\n"
