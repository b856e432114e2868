"""The gated answer, in process (the scripted model streams through the providers' own message
builder): checkpoints and holds, redaction across deltas, other blocks in order, a judge on
the answer, typed output, aborts and interrupts while a check runs."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel

from agentkit import Agent
from agentkit.events import MessageUpdateEvent, TextDeltaEvent
from agentkit.guardrails import (
    PII,
    Check,
    Guardrail,
    Guardrails,
    MaxLength,
    ModelJudge,
    Secrets,
    Verdict,
)
from agentkit.testing import ScriptedModel, reply, thinking, tool_call
from agentkit.types import Context, StreamOptions
from tests.support import Recorder

KEY = "ghp_" + "1234567890abcdefghijABCDEFGHIJ123456"


def gated(
    replies: list[Any], guardrails: Guardrails, chunk_size: int = 3, **options: Any
) -> tuple[Agent, ScriptedModel, list[str], list[str]]:
    """An agent on a scripted model whose answers stream ``chunk_size`` characters a delta;
    the released deltas and, at each, the streaming message's text."""
    model = ScriptedModel(replies, chunk_size=chunk_size)
    agent = Agent(model=model.model, stream_fn=model, policies=[guardrails], **options)
    deltas: list[str] = []
    partials: list[str] = []

    def listen(event: Any) -> None:
        if isinstance(event, MessageUpdateEvent) and isinstance(
            event.assistant_message_event, TextDeltaEvent
        ):
            deltas.append(event.assistant_message_event.delta)
            partials.append(event.message.text)

    agent.subscribe(listen)
    return agent, model, deltas, partials


def test_a_key_split_over_many_deltas_is_redacted_before_any_piece_is_seen() -> None:
    text = f"First sentence. The token {KEY} is here. Last."
    agent, _, deltas, partials = gated([text], Guardrails(output=[Secrets(action="redact")]))
    result = agent.prompt("go")
    assert result.text == "First sentence. The token [redacted: GitHub token] is here. Last."
    assert "".join(deltas) == result.text
    assert not any(piece in "".join(deltas) for piece in (KEY[:6], KEY[-6:]))
    assert partials == ["".join(deltas[: i + 1]) for i in range(len(deltas))]


def test_a_checkpoint_by_size_never_cuts_a_phone_number() -> None:
    text = "words " * 12 + "call +1 415 555 0100 or write " + "more words " * 10
    guardrails = Guardrails(output=[PII(action="redact")], chunk=16)
    agent, _, deltas, _ = gated([text], guardrails, chunk_size=2)
    result = agent.prompt("go")
    assert "[redacted: phone number]" in result.text and "415" not in "".join(deltas)
    assert len(deltas) > 5  # checked in many small chunks, none of them cutting the number


class HoldAll(Guardrail):
    """Holds the whole chunk back (a rule of its own: nothing before the end)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def check(self, text: str, check: Check) -> None:
        self.seen.append((text, check.final))

    def hold(self, text: str) -> int:
        return len(text)


def test_a_guardrails_own_rule_holds_text_to_the_end_or_to_max_held() -> None:
    holder = HoldAll()
    agent, _, deltas, _ = gated(["One. Two. Three."], Guardrails(output=[holder]))
    agent.prompt("go")
    assert holder.seen == [("One. Two. Three.", True)] and deltas == ["One. Two. Three."]
    holder = HoldAll()
    long = "x. " * 100
    agent, _, deltas, _ = gated([long], Guardrails(output=[holder], chunk=10, max_held=40))
    assert agent.prompt("go").text == long
    assert len(deltas) > 3 and all(len(d) <= 60 for d in deltas)  # checked past max_held


def test_thinking_and_tool_calls_are_released_in_order_behind_the_held_text() -> None:
    from agentkit import tool

    @tool
    def look(q: str) -> str:
        """Look something up."""
        return "found"

    script = [
        reply(thinking("Let me think."), "I will look it up. Then", tool_call("look", {"q": "x"})),
        "Found it.",
    ]
    agent, _, deltas, _ = gated(script, Guardrails(output=[Secrets()]), tools=[look])
    recorder = Recorder()
    agent.subscribe(recorder)
    result = agent.prompt("go")
    assert result.stop_reason == "stop" and result.text == "Found it."
    kinds = [
        e.assistant_message_event.type for e in recorder.events if isinstance(e, MessageUpdateEvent)
    ]
    first = kinds[: kinds.index("toolcall_end") + 1]
    assert first.index("thinking_end") < first.index("text_start") < first.index("toolcall_start")
    assert first.index("text_end") < first.index("toolcall_start")
    assert "".join(deltas) == "I will look it up. ThenFound it."


def judge_script(verdicts: list[str]) -> Any:
    """A scripted model that answers a judge's request with the next verdict, and anything
    else with a long answer."""

    def answer(context: Context, options: StreamOptions) -> str:
        system = context.messages[0]
        if getattr(system, "role", None) == "system" and "guardrail" in str(system.content):
            assert options.output_schema is not None  # asked as typed output
            return verdicts.pop(0)
        return "A calm sentence. " * 30 + "Now something rude. " + "More text. " * 10

    return answer


def test_a_judge_on_the_answer_checks_chunks_and_trips_midway() -> None:
    ok = '{"verdict": "pass", "reason": "calm"}'
    bad = '{"verdict": "trip", "reason": "the answer turned rude"}'
    script = judge_script([ok, bad])
    judge = ModelJudge("The answer stays polite.", every=300)
    agent, model, deltas, _ = gated([script, script, script], Guardrails(output=[judge]))
    result = agent.prompt("go")
    assert result.stop_reason == "guardrail" and result.budget == "judge"
    assert result.ending.detail["reason"] == "the answer turned rude"
    assert "rude" not in "".join(deltas) and "".join(deltas).startswith("A calm sentence.")
    assert result.usage.requests == 3  # the answer and the judge's two requests
    assert len(model.requests) == 3


def test_a_judge_that_answers_nonsense_fails_the_run_clearly() -> None:
    judge = ModelJudge("Be nice.", every=10)
    agent, _, _, _ = gated([judge_script(["I think it is fine!"])] * 2, Guardrails(output=[judge]))
    result = agent.prompt("go")
    assert result.stop_reason == "error"
    assert result.error_message.startswith("The guardrail 'judge' failed on the answer:")
    assert "not a verdict" in result.error_message


def test_a_length_rule_cuts_the_streamed_answer() -> None:
    agent, _, deltas, _ = gated(
        ["word " * 100], Guardrails(output=[MaxLength(42, action="redact")])
    )
    result = agent.prompt("go")
    assert result.text == ("word " * 100)[:42] + " [cut]" == "".join(deltas)
    assert result.stop_reason == "stop"


class Capital(BaseModel):
    city: str


def test_typed_output_passes_through_the_gate_and_is_validated() -> None:
    agent, _, deltas, _ = gated(
        ['{"city": "Paris"}'], Guardrails(output=[Secrets()]), output_type=Capital
    )
    result = agent.prompt("capital of France?")
    assert result.output == Capital(city="Paris") and "".join(deltas) == '{"city": "Paris"}'


class Waits(Guardrail):
    """An output check that blocks until the run is aborted (a hung moderation call)."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def check(self, text: str, check: Check) -> Verdict:
        self.started.set()
        check.signal.wait()
        from agentkit.errors import AbortError

        raise AbortError("the check was aborted")


def test_an_abort_while_an_output_check_waits_ends_the_run_as_aborted() -> None:
    waits = Waits()
    agent, _, deltas, _ = gated(["Hello there. More."], Guardrails(output=[waits]))
    run = agent.start("go")
    assert waits.started.wait(5)
    agent.abort()
    result = run.result()
    assert result.stop_reason == "aborted" and deltas == []


def test_an_interrupt_still_cuts_a_gated_answer() -> None:
    model = ScriptedModel(
        [reply("Talking on and on. " * 50, hang=True), "Sure, French."], delay=0.002
    )
    agent = Agent(model=model.model, stream_fn=model, policies=[Guardrails(output=[Secrets()])])
    streaming = threading.Event()
    agent.subscribe(lambda e: streaming.set() if isinstance(e, MessageUpdateEvent) else None)
    run = agent.start("Talk")
    assert streaming.wait(5)
    agent.interrupt("Answer in French.")
    result = run.result()
    assert result.stop_reason == "stop" and result.text == "Sure, French."


# --- hostile answers and input ------------------------------------------------------------------


def test_a_megabyte_answer_in_one_delta_and_one_without_a_space_pass_whole() -> None:
    big = ("lorem ipsum " * 90_000)[:1_000_000]
    solid = "x" * 200_000 + " " + KEY + " end"
    guardrails = Guardrails(output=[Secrets(action="redact"), PII(action="redact")])
    agent, _, deltas, _ = gated([big, solid], guardrails, chunk_size=1_000_000)
    assert agent.prompt("a lot").text == big == "".join(deltas)
    deltas.clear()
    second = agent.prompt("no spaces")
    assert second.text == "x" * 200_000 + " [redacted: GitHub token] end" == "".join(deltas)


def test_unicode_split_across_deltas_stays_whole_around_a_redaction() -> None:
    text = "Zürich 🇨🇭 ✔︎ résumé — שלום עולם. Mail me: jöhn.doe@example.com 👋🏽 ok. 完了"
    guardrails = Guardrails(output=[PII(action="redact")])
    agent, _, deltas, partials = gated([text], guardrails, chunk_size=1)
    result = agent.prompt("go")
    assert result.text == text.replace("jöhn.doe@example.com", "[redacted: email address]")
    assert "".join(deltas) == result.text and partials[-1] == result.text


def test_a_regex_catastrophic_answer_is_gated_in_bounded_time() -> None:
    """Strings made to make a careless pattern backtrack, streamed in small deltas: the gate's
    holds and checks stay linear (the bound is generous: this checks that the run ends)."""
    import time

    hostile = "a@" + "b." * 20_000 + " " + "1 " * 20_000 + "sk-" + "a-" * 20_000 + ". end"
    guardrails = Guardrails(output=[Secrets(), PII()], chunk=64)
    agent, _, deltas, _ = gated([hostile], guardrails, chunk_size=7)
    started = time.monotonic()
    result = agent.prompt("go")
    assert time.monotonic() - started < 60
    assert result.stop_reason in ("stop", "guardrail") and hostile.startswith("".join(deltas))


def test_a_megabyte_prompt_is_redacted_before_it_is_sent() -> None:
    prompt = "lorem ipsum " * 80_000 + "card 4111 1111 1111 1111 " + "dolor " * 10_000
    agent, model, _, _ = gated(["ok"], Guardrails(input=[PII(action="redact")]))
    assert agent.prompt(prompt).text == "ok"
    sent = model.requests[-1].messages[-1].content[0].text
    assert "4111" not in sent and "card [redacted: card number] dolor" in sent


def test_one_guardrails_hold_never_cuts_into_a_token_another_needs_whole() -> None:
    """Regression: PII held back the key's tail (``J123456``, a group of capitals and digits)
    after Secrets had been asked, so the key was checked in two halves and released."""
    text = "see " + KEY + " " + "now " * 30
    guardrails = Guardrails(output=[Secrets(action="redact"), PII(action="redact")], chunk=40)
    agent, _, deltas, _ = gated([text], guardrails, chunk_size=3)
    result = agent.prompt("go")
    assert KEY[:8] not in "".join(deltas)
    assert result.text == text.replace(KEY, "[redacted: GitHub token]")


def test_a_pattern_holding_its_last_characters_still_releases_sentence_by_sentence() -> None:
    """Regression: asked again about the cut it had moved itself, a rule holding "the last 64
    characters" held 64 more each time, and the whole answer waited for its end."""
    from agentkit.guardrails import Pattern

    text = "A sentence that is long enough to pass the hold of the rule easily. " * 10
    rule = Pattern(r"\bpassword\s*[:=]\s*\S{1,64}")
    agent, _, deltas, _ = gated([text], Guardrails(output=[rule]))
    assert agent.prompt("go").text == text == "".join(deltas)
    assert len(deltas) >= 9
