"""EventStream and AbortSignal: the two thread primitives everything else stands on."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentkit import (
    AbortController,
    AbortError,
    AssistantMessage,
    AssistantMessageEventStream,
    DoneEvent,
    ErrorEvent,
    EventStream,
    StartEvent,
    StreamEndedError,
    event_to_dict,
)


def test_completing_event_is_delivered_and_settles_the_result() -> None:
    stream = AssistantMessageEventStream()
    message = AssistantMessage()
    stream.push(StartEvent(message))
    stream.push(DoneEvent("stop", message))
    stream.push(StartEvent(message))  # after completion: ignored
    assert [e.type for e in stream] == ["start", "done"]
    assert stream.result() is message


def test_error_event_result_is_the_error_message() -> None:
    stream = AssistantMessageEventStream()
    failed = AssistantMessage(stop_reason="error", error_message="boom")
    stream.push(ErrorEvent("error", failed))
    assert stream.result(1) is failed


def test_first_result_wins_and_end_stops_iteration() -> None:
    stream: EventStream[int, str] = EventStream()
    stream.push(1)
    stream.end("first")
    stream.end("second")
    assert list(stream) == [1]
    assert stream.result() == "first"


def test_end_without_result_raises_instead_of_hanging() -> None:
    stream = AssistantMessageEventStream()
    stream.end()
    assert list(stream) == []
    with pytest.raises(StreamEndedError, match="without a done or error event"):
        stream.result(1)


def test_failure_reaches_the_consumer() -> None:
    stream: EventStream[int, Any] = EventStream()
    stream.push(1)
    stream.fail(ValueError("producer broke"))
    seen = []
    with pytest.raises(ValueError, match="producer broke"):
        for item in stream:
            seen.append(item)
    assert seen == [1]
    with pytest.raises(ValueError):
        stream.result()


def test_events_cross_threads_in_order() -> None:
    stream: EventStream[int, int] = EventStream()

    def produce() -> None:
        for i in range(1000):
            stream.push(i)
        stream.end(999)

    producer = threading.Thread(target=produce)
    stream.set_producer(producer)
    producer.start()
    assert list(stream) == list(range(1000))
    assert stream.result() == 999
    assert not producer.is_alive()


def test_result_times_out() -> None:
    stream: EventStream[int, int] = EventStream()
    with pytest.raises(TimeoutError):
        stream.result(0.01)


def test_abort_signal_wakes_waiters_and_runs_callbacks_once() -> None:
    controller = AbortController()
    signal = controller.signal
    calls: list[str] = []
    remove = signal.add_callback(lambda: calls.append("a"))
    signal.add_callback(lambda: 1 / 0)  # a broken callback does not stop the others
    signal.add_callback(lambda: calls.append("b"))
    removed = signal.add_callback(lambda: calls.append("removed"))
    removed()
    woke = threading.Event()

    def waiter() -> None:
        if signal.wait(10):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert not signal.aborted and signal.reason is None
    controller.abort()
    controller.abort("again")
    thread.join(5)
    assert woke.is_set()
    assert calls == ["a", "b"]
    assert signal.aborted and signal.reason == "aborted"
    late: list[str] = []
    signal.add_callback(lambda: late.append("late"))
    assert late == ["late"]
    remove()
    with pytest.raises(AbortError, match="Operation aborted"):
        signal.throw_if_aborted()


def test_abort_reason_is_kept() -> None:
    controller = AbortController()
    controller.abort("user pressed stop")
    assert controller.signal.reason == "user pressed stop"
    with pytest.raises(AbortError, match="user pressed stop"):
        controller.signal.throw_if_aborted()


def test_events_serialise_to_json_data() -> None:
    message = AssistantMessage(error_message=None)
    data = event_to_dict(DoneEvent("stop", message))
    assert list(data)[0] == "type" and data["type"] == "done"
    assert data["message"]["role"] == "assistant"
