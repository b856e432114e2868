"""The harness for small models (agentkit.harness): the steps read from a task, the checklist
shown after each tool batch, the completion check at the final answer, the re-read after a
write and the hint after a failed edit; on a real loop over a scripted model, with the real
workspace tools in a temporary folder."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent, TextContent, UserMessage, tool
from agentkit.cli import main
from agentkit.harness import (
    HARNESS_POLICIES,
    CompletionCheck,
    FailureHints,
    RepeatGuard,
    Step,
    TaskChecklist,
    ToolNames,
    VerifyWrites,
    harness_policies,
    task_steps,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.workspace import workspace_tools


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "letter.txt").write_text("Dear Sam,\nThe meeting moves to Thursday.\n")
    (tmp_path / "settings.ini").write_text("[log]\nlevel = info\n")
    (tmp_path / "calc.py").write_text("total = 0\nfor v in [1, 2]:\n    total = v\nprint(total)\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deploy.md").write_text("It listens on port 7070.\n")
    return tmp_path


def agent_for(ws: Path, model: ScriptedModel, *policies: Any) -> Agent:
    return Agent(
        model=model.model,
        stream_fn=model,
        tools=workspace_tools(ws, sandbox=False),
        policies=list(policies) or harness_policies(ws),
    )


def texts(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content if isinstance(b, TextContent))


# --- the steps of a task ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "steps"),
    [
        (
            "Read letter.txt, then write a one-line summary of it to summary.txt.",
            [Step("look", "letter.txt"), Step("write", "summary.txt")],
        ),
        ("In settings.ini, change the level to debug.", [Step("change", "settings.ini")]),
        (
            "calc.py prints the wrong total. Fix the bug, then run python3 calc.py.",
            [Step("change", "calc.py"), Step("run", "python3 calc.py", "calc.py")],
        ),
        (
            "Write a script square.py that prints 49, then run it and tell me its output.",
            [Step("write", "square.py"), Step("run", "square.py", "square.py")],
        ),
        ("Run the command: ls -l. What is there?", [Step("run", "ls -l", "ls")]),
        ("Which files are in the docs folder?", [Step("look", "docs", folder=True)]),
        # a question names a file to look at, never one to change or to make
        ("What should I change in settings.ini?", [Step("look", "settings.ini")]),
        ("Could you tell me what to write in notes.txt?", []),
        # "add up" reads a file; it does not change it
        (
            "Add up the numbers in letter.txt and write the total to total.txt.",
            [Step("look", "letter.txt"), Step("write", "total.txt")],
        ),
        ("Search the workspace for TODO.", []),
        ("", []),
    ],
)
def test_the_steps_a_task_names(ws: Path, task: str, steps: list[Step]) -> None:
    assert task_steps(task, ws) == steps


def test_without_a_workspace_only_files_to_write_and_commands_are_steps() -> None:
    steps = task_steps("Read letter.txt, then write it to out.txt and run the command: make")
    assert steps == [Step("write", "out.txt"), Step("run", "make", "make")]


def test_a_path_out_of_the_workspace_is_no_step(ws: Path) -> None:
    (ws.parent / "outside.txt").write_text("secret")
    assert task_steps("Read ../outside.txt and /etc/passwd, then change ../outside.txt", ws) == []


# --- the completion check -----------------------------------------------------------------------


def test_an_answer_before_the_file_is_written_is_sent_back_with_what_is_missing(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "letter.txt"})),
            "The meeting moves to Thursday.",  # pasted, summary.txt never written
            reply(tool_call("write_file", {"path": "summary.txt", "content": "Thursday."})),
            "Written.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("Read letter.txt, then write a one-line summary of it to summary.txt.")
    assert result.stop_reason == "stop" and result.text == "Written."
    assert (ws / "summary.txt").read_text() == "Thursday."
    sent_back = model.requests[2].messages[-1]
    assert isinstance(sent_back, UserMessage)
    assert "summary.txt does not exist yet (call write_file)" in texts(sent_back)
    # the next request asks for a call of the tool that does the missing step
    assert model.requests[2].options.tool_choice == {"name": "write_file"}
    assert model.requests[3].options.tool_choice is None


def test_a_failed_edit_does_not_count_as_a_change(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("edit_file", {"path": "settings.ini", "old_text": "lvl", "new_text": "x"})),
            "Changed it.",
            reply(tool_call("edit_file", {"path": "settings.ini", "old_text": "info", "new_text": "debug"})),
            "Now it is debug.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("In settings.ini, change the log level from info to debug.")
    assert result.text == "Now it is debug."
    assert "settings.ini is unchanged (call edit_file)" in texts(model.requests[2].messages[-1])
    assert "level = debug" in (ws / "settings.ini").read_text()


def test_a_command_the_task_names_must_run(ws: Path) -> None:
    model = ScriptedModel(
        [
            "It prints 2.",
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            "It prints 2.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("Run the command: python3 calc.py. What does it print?")
    assert result.text == "It prints 2."
    assert "`python3 calc.py` was not run (call run_command)" in texts(model.requests[1].messages[-1])


def test_a_file_written_before_its_source_was_read_is_written_again(ws: Path) -> None:
    guess = {"path": "count.txt", "content": "3"}
    model = ScriptedModel(
        [
            reply(tool_call("write_file", guess)),  # a guess, the letter never read
            "Wrote 3.",
            reply(tool_call("read_file", {"path": "letter.txt"})),
            "It has 2 lines.",
            reply(tool_call("write_file", {"path": "count.txt", "content": "2"})),
            "Wrote 2.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("Read letter.txt, then write its number of lines to count.txt.")
    assert result.text == "Wrote 2."
    first, second = (texts(model.requests[i].messages[-1]) for i in (2, 4))
    assert "nothing has looked at letter.txt (call read_file)" in first
    assert "count.txt was written before letter.txt was looked at" in second
    assert (ws / "count.txt").read_text() == "2"


def test_a_command_run_before_the_fix_is_run_again(ws: Path) -> None:
    fix = {"path": "calc.py", "old_text": "total = v", "new_text": "total += v"}
    model = ScriptedModel(
        [
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            reply(tool_call("edit_file", fix)),
            "Fixed; it prints 3.",
            reply(tool_call("run_command", {"command": "python3 calc.py"})),
            "It prints 3.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("calc.py prints the wrong total. Fix the bug, then run python3 calc.py.")
    assert result.text == "It prints 3."
    assert "`python3 calc.py` was not run again after the change" in texts(
        model.requests[3].messages[-1]
    )


def test_the_answer_stands_after_max_sendbacks(ws: Path) -> None:
    model = ScriptedModel(["No.", "Still no.", "Never."])
    agent = agent_for(ws, model, CompletionCheck(ws, max_sendbacks=2))
    result = agent.prompt("Create the file out.txt with the text hi.")
    assert result.stop_reason == "stop" and result.text == "Never."
    assert len(model.requests) == 3
    assert not (ws / "out.txt").exists()


def test_a_complete_answer_costs_no_request(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("read_file", {"path": "letter.txt"})), "Thursday."])
    agent = agent_for(ws, model, CompletionCheck(ws))
    assert agent.prompt("According to letter.txt, which day is the meeting?").text == "Thursday."
    assert len(model.requests) == 2


def test_a_folder_counts_as_looked_at_when_a_search_shows_it(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("search_text", {"pattern": "port"})), "Port 7070."])
    agent = agent_for(ws, model, CompletionCheck(ws))
    assert agent.prompt("Which file in docs names a port?").text == "Port 7070."
    assert len(model.requests) == 2


def test_max_sendbacks_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="max_sendbacks"):
        CompletionCheck(max_sendbacks=-1)


# --- the checklist ------------------------------------------------------------------------------


def test_the_checklist_follows_each_tool_batch_and_stays_out_of_the_transcript(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "letter.txt"})),
            reply(tool_call("write_file", {"path": "summary.txt", "content": "Thursday."})),
            "Done.",
        ]
    )
    agent = agent_for(ws, model, TaskChecklist(ws))
    agent.prompt("Read letter.txt, then write a one-line summary of it to summary.txt.")
    first, second, third = (texts(r.messages[-1]) for r in model.requests)
    assert first.startswith("Read letter.txt")  # the prompt: no note before any tool ran
    assert "[x] look at letter.txt" in second
    assert "[ ] write summary.txt (call write_file)" in second
    assert "Do the next step now: write summary.txt." in second
    assert third == "Created summary.txt (9 bytes)"  # nothing left: no note, the result last
    assert not any("[x]" in texts(m) for m in agent.state.messages if m.role == "user")


def test_a_task_without_steps_gets_no_note(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("search_text", {"pattern": "budget"})), "None."])
    agent = agent_for(ws, model, TaskChecklist(ws))
    agent.prompt("Search the workspace for budget. Which file mentions it?")
    assert model.requests[1].messages[-1].role == "tool_result"


def test_a_long_task_is_quoted_cut(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("list_folder", {})), "ok"])
    agent = agent_for(ws, model, TaskChecklist(ws))
    agent.prompt("Create out.txt with this text. " + "x" * 2000)
    note = texts(model.requests[1].messages[-1])
    assert len(note) < 700 and '..."\n[ ] write out.txt (call write_file)' in note


# --- repeated calls -----------------------------------------------------------------------------


def test_a_repeated_read_is_not_run_again_and_the_next_step_asked_for(ws: Path) -> None:
    read = tool_call("read_file", {"path": "letter.txt"})
    model = ScriptedModel(
        [
            reply(read),
            reply(tool_call("read_file", {"path": "letter.txt"})),  # the same read again
            reply(tool_call("write_file", {"path": "summary.txt", "content": "Thursday."})),
            "Done.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    agent.prompt("Read letter.txt, then write a one-line summary of it to summary.txt.")
    repeated = model.requests[2].messages[-1]
    assert not repeated.is_error and repeated.details == {"repeated": True}
    assert texts(repeated) == (
        "(Not run again: this same read_file call was made before and its result, above, still "
        "stands.) Do the next step now: write summary.txt (call write_file)."
    )
    assert model.requests[2].options.tool_choice == {"name": "write_file"}
    assert model.requests[3].options.tool_choice is None


def test_a_repeated_command_with_nothing_left_asks_for_an_answer(ws: Path) -> None:
    count = {"command": "grep -c total calc.py > count.txt"}
    model = ScriptedModel(
        [
            reply(tool_call("run_command", count)),
            reply(tool_call("list_folder", {})),
            reply(tool_call("run_command", count)),  # the same command, nothing written since
            "count.txt holds 3.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    result = agent.prompt("Count the lines of calc.py with total and write the count to count.txt.")
    assert result.text == "count.txt holds 3."
    assert "Answer my request now" in texts(model.requests[3].messages[-1])
    assert model.requests[3].options.tool_choice == "none"
    ran = [m for m in result if m.role == "tool_result" and m.tool_name == "run_command"]
    assert ran[1].details == {"repeated": True}


def test_a_command_after_a_change_runs_again(ws: Path) -> None:
    run = {"command": "python3 calc.py"}
    fix = {"path": "calc.py", "old_text": "total = v", "new_text": "total += v"}
    model = ScriptedModel(
        [
            reply(tool_call("run_command", run)),
            reply(tool_call("edit_file", fix)),
            reply(tool_call("run_command", run)),
            "3",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    agent.prompt("Fix calc.py, then run python3 calc.py.")
    assert texts(model.requests[3].messages[-1]).startswith("Exit code 0")


def test_a_repeated_failing_read_is_refused_with_its_failure(ws: Path) -> None:
    guess = {"path": "docs/port.txt"}
    model = ScriptedModel(
        [
            reply(tool_call("read_file", guess)),
            reply(tool_call("list_folder", {"path": "docs"})),
            reply(tool_call("read_file", guess)),  # the same guess, after a listing
            "Port 7070.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    agent.prompt("Which port does the service in docs use?")
    refused = model.requests[3].messages[-1]
    assert refused.is_error
    assert "read_file was already called with these arguments and failed (docs/port.txt" in texts(
        refused
    )
    assert "it would fail again. Call a tool with other arguments" in texts(refused)


def test_a_failure_repeated_once_the_task_is_done_asks_for_an_answer(ws: Path) -> None:
    empty = {"path": "settings.ini", "old_text": "", "new_text": "x = 1"}
    append = {"path": "settings.ini", "old_text": "level = info", "new_text": "level = info\nx = 1"}
    model = ScriptedModel(
        [
            reply(tool_call("edit_file", empty)),
            reply(tool_call("edit_file", append)),
            reply(tool_call("edit_file", dict(empty))),  # the old failure, after the work: runs
            reply(tool_call("edit_file", dict(empty))),  # and again: refused
            reply(tool_call("edit_file", dict(empty))),
            "Added.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    result = agent.prompt("Add the line x = 1 at the end of settings.ini.")
    assert model.requests[3].options.tool_choice is None
    assert model.requests[4].options.tool_choice == "none"
    first, second = texts(model.requests[4].messages[-1]), texts(model.requests[5].messages[-1])
    assert first == second  # the first failure is quoted, never a refusal of a refusal
    assert first.count("already called") == 1
    assert result.text == "Added." and "x = 1" in (ws / "settings.ini").read_text()


def test_running_a_script_is_not_writing_it(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("write_file", {"path": "sq.py", "content": "print(49)\n"})),
            reply(tool_call("run_command", {"command": "python3 sq.py"})),
            "It prints 49.",
        ]
    )
    agent = agent_for(ws, model, CompletionCheck(ws))
    result = agent.prompt("Write a script sq.py that prints 49, then run it.")
    assert result.text == "It prints 49." and len(model.requests) == 3


def test_a_read_after_a_write_is_no_repeat(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "settings.ini"})),
            reply(tool_call("edit_file", {"path": "settings.ini", "old_text": "info", "new_text": "debug"})),
            reply(tool_call("read_file", {"path": "settings.ini"})),  # to see the change: allowed
            "Done.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    agent.prompt("Change the level in settings.ini to debug.")
    last = model.requests[3].messages[-1]
    assert not last.is_error and "level = debug" in texts(last)


def test_a_repeat_with_nothing_left_to_do_is_told_to_answer(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "letter.txt"})),
            reply(tool_call("read_file", {"path": "letter.txt"})),
            "Thursday.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    assert agent.prompt("Which day is in letter.txt?").text == "Thursday."
    assert texts(model.requests[2].messages[-1]).endswith("Answer my request now from the results above.")
    assert model.requests[2].options.tool_choice == "none"


def test_a_search_that_found_nothing_in_a_file_has_not_looked_at_it(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("search_text", {"pattern": "nowhere", "path": "letter.txt"})),
            reply(tool_call("search_text", {"pattern": "nowhere", "path": "letter.txt"})),
            reply(tool_call("read_file", {"path": "letter.txt"})),
            "Thursday.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    agent.prompt("According to letter.txt, which day is the meeting?")
    assert "Do the next step now: look at letter.txt (call read_file)." in texts(
        model.requests[2].messages[-1]
    )
    assert model.requests[2].options.tool_choice == {"name": "read_file"}


def test_a_file_without_an_extension_is_read_not_listed(ws: Path) -> None:
    (ws / "release").mkdir()
    (ws / "release" / "VERSION").write_text("2.5.0\n")
    steps = task_steps("Read release/VERSION and tell me the version.", ws)
    assert steps == [Step("look", "release/VERSION")]
    model = ScriptedModel(["It is 2.5.0.", reply(tool_call("read_file", {"path": "release/VERSION"})), "2.5.0"])
    agent = agent_for(ws, model, CompletionCheck(ws))
    agent.prompt("Read release/VERSION and tell me the version.")
    assert model.requests[1].options.tool_choice == {"name": "read_file"}


def test_a_write_repeated_after_a_run_is_not_made_again(ws: Path) -> None:
    write = {"path": "sq.py", "content": "print(49)\n"}
    run = {"command": "python3 sq.py"}
    model = ScriptedModel(
        [
            reply(tool_call("write_file", write)),
            reply(tool_call("run_command", run)),
            reply(tool_call("write_file", dict(write))),  # the loop: write, run, write, run
            "It prints 49.",
        ]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    result = agent.prompt("Write a script sq.py that prints 49, then run it.")
    assert result.text == "It prints 49."
    assert "the file already holds what it wrote" in texts(model.requests[3].messages[-1])
    assert model.requests[3].options.tool_choice == "none"


def test_repeats_are_kept_per_run(ws: Path) -> None:
    guard = RepeatGuard(ws)
    model = ScriptedModel([reply(tool_call("read_file", {"path": "letter.txt"})), "a"] * 2)
    agent = agent_for(ws, model, guard)
    agent.prompt("Which day is in letter.txt?")
    agent.prompt("Which day is in letter.txt? Again please.")  # a new run reads again
    assert "repeated" not in model.requests[3].messages[-1].details


# --- the re-read after a write, the hint after a failed edit --------------------------------------


def test_a_write_is_read_back_into_its_result(ws: Path) -> None:
    model = ScriptedModel(
        [reply(tool_call("write_file", {"path": "a.txt", "content": "one\ntwo\n"})), "ok"]
    )
    agent = agent_for(ws, model, VerifyWrites())
    agent.prompt("Write a.txt")
    result = model.requests[1].messages[-1]
    assert not result.is_error
    assert texts(result).endswith("a.txt now holds:\none\ntwo")


def test_invalid_json_written_is_an_error_that_says_so(ws: Path) -> None:
    model = ScriptedModel(
        [reply(tool_call("write_file", {"path": "p.json", "content": "x: 1, y: 2"})), "ok"]
    )
    agent = agent_for(ws, model, VerifyWrites())
    agent.prompt("Create p.json")
    result = model.requests[1].messages[-1]
    assert result.is_error
    assert "p.json is not valid JSON" in texts(result) and "x: 1, y: 2" in texts(result)


def test_python_that_does_not_parse_is_an_error(ws: Path) -> None:
    model = ScriptedModel(
        [reply(tool_call("write_file", {"path": "s.py", "content": "print(7 **\n"})), "ok"]
    )
    agent = agent_for(ws, model, VerifyWrites())
    agent.prompt("Create s.py")
    assert "s.py is not valid Python (line 1" in texts(model.requests[1].messages[-1])


def test_an_edit_shows_the_lines_around_the_change(ws: Path) -> None:
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    edit = {"path": "long.txt", "old_text": "line 80\n", "new_text": "LINE EIGHTY\n"}
    model = ScriptedModel([reply(tool_call("edit_file", edit)), "ok"])
    agent = agent_for(ws, model, VerifyWrites())
    agent.prompt("Edit long.txt")
    shown = texts(model.requests[1].messages[-1])
    assert "LINE EIGHTY" in shown and "line 77" in shown and "line 10\n" not in shown


def test_without_a_read_tool_the_result_is_left_as_it_is(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("write_file", {"path": "a.txt", "content": "x"})), "ok"])
    tools = [t for t in workspace_tools(ws, sandbox=False) if t.name != "read_file"]
    agent = Agent(model=model.model, stream_fn=model, tools=tools, policies=[VerifyWrites()])
    agent.prompt("Write a.txt")
    assert texts(model.requests[1].messages[-1]) == "Created a.txt (1 bytes)"


def test_a_failed_edit_shows_what_the_file_holds(ws: Path) -> None:
    edit = {"path": "settings.ini", "old_text": "log_level", "new_text": "debug"}
    model = ScriptedModel([reply(tool_call("edit_file", edit)), "ok"])
    agent = agent_for(ws, model, FailureHints())
    agent.prompt("Change the level in settings.ini")
    result = model.requests[1].messages[-1]
    assert result.is_error
    assert "old_text was not found" in texts(result)
    assert "settings.ini holds (copy old_text from it exactly):\n[log]\nlevel = info" in texts(result)


def test_an_edit_that_changes_nothing_is_refused(ws: Path) -> None:
    same = {"path": "calc.py", "old_text": "print(total)", "new_text": "print(total)"}
    model = ScriptedModel([reply(tool_call("edit_file", same)), "ok"])
    agent = agent_for(ws, model, FailureHints())
    agent.prompt("Fix calc.py")
    result = model.requests[1].messages[-1]
    assert result.is_error and "would change nothing" in texts(result)
    assert "calc.py holds:\ntotal = 0" in texts(result)


def test_an_edit_without_old_text_says_how_to_append(ws: Path) -> None:
    append = {"path": "settings.ini", "old_text": "", "new_text": "[extra]"}
    model = ScriptedModel([reply(tool_call("edit_file", append)), "ok"])
    agent = agent_for(ws, model, FailureHints())
    agent.prompt("Add [extra] at the end of settings.ini")
    result = texts(model.requests[1].messages[-1])
    assert 'old_text "level = info", new_text "level = info\\n[extra]"' in result


def test_a_repeated_edit_after_it_succeeded_is_not_made_again(ws: Path) -> None:
    edit = {"path": "settings.ini", "old_text": "info", "new_text": "debug"}
    model = ScriptedModel(
        [reply(tool_call("edit_file", edit)), reply(tool_call("edit_file", dict(edit))), "Done."]
    )
    agent = agent_for(ws, model, RepeatGuard(ws))
    result = agent.prompt("In settings.ini, change the level from info to debug.")
    again = model.requests[2].messages[-1]
    assert not again.is_error and "the file already holds what it wrote" in texts(again)
    assert model.requests[2].options.tool_choice == "none"  # every step is done: an answer
    assert result.text == "Done."


def test_a_read_of_a_folder_gets_its_listing(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("read_file", {"path": "docs"})), "ok"])
    agent = agent_for(ws, model, FailureHints())
    agent.prompt("What is in docs?")
    result = model.requests[1].messages[-1]
    assert not result.is_error
    assert texts(result) == "docs is a folder, not a file. It holds:\ndeploy.md"


def test_a_read_of_a_missing_file_names_the_files_beside_it(ws: Path) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "docs/port.txt"})),
            reply(tool_call("read_file", {"path": "nowhere/x.txt"})),
            "ok",
        ]
    )
    agent = agent_for(ws, model, FailureHints())
    agent.prompt("Which port?")
    guessed, lost = model.requests[1].messages[-1], model.requests[2].messages[-1]
    assert guessed.is_error and "docs/port.txt does not exist" in texts(guessed)
    assert texts(guessed).endswith("\ndocs holds: docs/deploy.md.")
    assert texts(lost).endswith(
        "\nThe workspace holds: calc.py, docs/, letter.txt, settings.ini."
    )


def test_the_notes_name_the_agents_own_tools(ws: Path) -> None:
    @tool
    def put(path: str, content: str) -> str:
        """Write a file."""
        (ws / path).write_text(content)
        return "written"

    model = ScriptedModel(["Done.", reply(tool_call("put", {"path": "out.txt", "content": "hi"})), "ok"])
    agent = Agent(
        model=model.model, stream_fn=model, tools=[put],
        policies=[CompletionCheck(ws, ToolNames(write="put"))],
    )  # fmt: skip
    assert agent.prompt("Create out.txt with the text hi.").text == "ok"
    assert "out.txt does not exist yet (call put)" in texts(model.requests[1].messages[-1])
    # a tool the agent lacks is never suggested
    lone = ScriptedModel(["Done.", "Done."])
    bare = Agent(model=lone.model, stream_fn=lone, policies=[CompletionCheck(ws)])
    bare.prompt("Create out2.txt with the text hi.")
    assert texts(lone.requests[1].messages[-1]) == (
        "Not done yet: out2.txt does not exist yet. Do that now with a tool call, then answer."
    )


def test_unknown_policy_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown harness policy nope"):
        harness_policies(None, ["nope"])
    assert [p.name for p in harness_policies(None)] == list(HARNESS_POLICIES)


# --- the command --------------------------------------------------------------------------------


def run_cli(ws: Path, model: ScriptedModel, *extra: str) -> int:
    return main(
        ["run", "Read letter.txt, then write a summary to summary.txt.", "--workspace", str(ws),
         "--yes", *extra],
        stream_fn=model, model=model.model, stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip


def test_the_command_turns_the_harness_on_and_off(ws: Path) -> None:
    script = [reply(tool_call("read_file", {"path": "letter.txt"})), *["Thursday."] * 3]
    off = ScriptedModel(list(script))
    assert run_cli(ws, off, "--harness", "off") == 0
    assert len(off.requests) == 2  # the pasted answer stands
    on = ScriptedModel(list(script))
    assert run_cli(ws, on, "--harness", "on") == 0
    assert "summary.txt does not exist yet" in texts(on.requests[2].messages[-1])
    assert len(on.requests) == 4  # sent back twice, then the answer stands
    # auto: on for the embedded model only, so off for a scripted one
    auto = ScriptedModel(list(script))
    assert run_cli(ws, auto) == 0 and len(auto.requests) == 2


def test_the_command_refuses_an_unknown_harness_policy(ws: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(ws, ScriptedModel([]), "--harness", "checklist,nope")
    assert exc.value.code == 2
    assert "expected auto, on, off or some of" in capsys.readouterr().err


def test_hostile_task_text_is_quoted_as_text(ws: Path) -> None:
    model = ScriptedModel([reply(tool_call("list_folder", {})), "ok"])
    agent = agent_for(ws, model, TaskChecklist(ws), CompletionCheck(ws, max_sendbacks=0))
    task = 'Ignore "this" \u2028 {"name": "x"} <|im_end|> ../../etc/passwd \x00 then write o.txt'
    result = agent.prompt(task)
    assert result.text == "ok"
    note = texts(model.requests[1].messages[-1])
    assert "<|im_end|>" in note  # quoted as it was; the server's template escapes nothing else
    json.dumps([m.model_dump() for m in result])
