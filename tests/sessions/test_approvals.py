"""Approvals that outlive the process, on real stores: calls wait in the session, decisions are
recorded from other processes (the ``agentkit sessions`` command), a fresh agent or a real
Celery worker resumes the run, and each approved call runs exactly once, even with two
resumers at the same moment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent, ApprovalDecision, ApprovalRequest, Approvals, tool
from agentkit.deferred import ApprovalResumeEntry, decide
from agentkit.errors import ApprovalError, SessionConflictError
from agentkit.sessions import INTERRUPTED_TEXT, Session, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tests.servers import RedisServer, worker_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WAIT = 60.0  # seconds; generous: these waits take well under one

ran: list[dict[str, Any]] = []
ran_lock = threading.Lock()


@tool(requires_approval=True)
def transfer(to: str, amount: int) -> str:
    """Send money."""
    with ran_lock:
        ran.append({"to": to, "amount": amount})
    return f"sent {amount} to {to}"


@pytest.fixture(autouse=True)
def clear_ran() -> None:
    with ran_lock:
        ran.clear()


def two_transfers(context: Any, options: Any) -> Any:
    if context.messages[-1].role == "tool_result":
        return "Both handled."
    return reply(tool_call("transfer", {"to": "ann", "amount": 50}),
                 tool_call("transfer", {"to": "bob", "amount": 5000}))  # fmt: skip


def make_agent(session: Session, **approvals: Any) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel([two_transfers] * 5)
    agent = Agent(model=model.model, stream_fn=model, tools=[transfer], session=session,
                  approvals=Approvals(defer=True, **approvals))  # fmt: skip
    return agent, model


def agentkit_sessions(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``agentkit sessions --store URL ...`` in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agentkit", "sessions", "--store", store_url,
                           *args], capture_output=True, text=True, timeout=WAIT, env=env)  # fmt: skip


def assert_paired(messages: list[Any]) -> None:
    """What the model sees: every assistant's calls answered right after it, once each."""
    seen = [m for m in messages if getattr(m, "role", None) in ("user", "assistant", "tool_result")]
    for index, message in enumerate(seen):
        if isinstance(message, AssistantMessage):
            calls = [c.id for c in message.content if isinstance(c, ToolCall)]
            after = seen[index + 1 : index + 1 + len(calls)]
            assert [m.tool_call_id for m in after if isinstance(m, ToolResultMessage)] == calls


def wait_for_approval(store_url: str, name: str) -> list[ApprovalRequest]:
    """Start a run that defers its batch; return what waits."""
    agent, model = make_agent(Session(name, store_url))
    result = agent.prompt("pay ann and bob")
    assert result.stop_reason == "approval" and len(model.requests) == 1
    assert ran == []
    return result.pending_approvals


@pytest.mark.processes
def test_calls_wait_in_the_session_and_are_decided_from_another_process(
    store_url: str, name: str
) -> None:
    pending = wait_for_approval(store_url, name)
    ann, bob = pending
    assert [(r.tool_name, r.arguments) for r in Session(name, store_url).pending_approvals()] == [
        ("transfer", {"to": "ann", "amount": 50}), ("transfer", {"to": "bob", "amount": 5000})]

    listed = agentkit_sessions(store_url, "approvals", name)
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[:3] for line in listed.stdout.splitlines()] == [
        [ann.id, "transfer", '{"to": "ann", "amount": 50}'],
        [bob.id, "transfer", '{"to": "bob", "amount": 5000}']]  # fmt: skip
    edited = agentkit_sessions(store_url, "approve", name, ann.id, "--arguments",
                               '{"to": "ann", "amount": 40}')  # fmt: skip
    assert edited.returncode == 0, edited.stderr
    denied = agentkit_sessions(store_url, "deny", name, bob.id, "--reason", "needs a manager")
    assert denied.returncode == 0, denied.stderr
    twice = agentkit_sessions(store_url, "approve", name, bob.id)
    assert twice.returncode == 1 and "was decided already (denied at" in twice.stderr
    assert Session(name, store_url).pending_approvals() == []

    agent, model = make_agent(Session(name, store_url))  # a fresh process would do the same
    result = agent.continue_()
    assert result.stop_reason == "stop" and result.text == "Both handled."
    assert ran == [{"to": "ann", "amount": 40}]  # the approved call, with its edited arguments
    texts = [m.content[0].text for m in model.requests[-1].messages if m.role == "tool_result"]
    assert texts == ["sent 40 to ann", "Tool call transfer was rejected: needs a manager"]
    stored = Session(name, store_url).load()
    assert_paired(stored)
    # Loading reads a turn's results right after its calls, then what was stored in the turn.
    assert [getattr(m, "role", None) for m in stored][3:] == [
        "tool_result", "tool_result", "approval_request", "approval_request",
        "approval_decision", "approval_decision", "approval_resume", "assistant"]  # fmt: skip
    shown = agentkit_sessions(store_url, "show", name)
    assert shown.returncode == 0 and f"{bob.id} denied: needs a manager" in shown.stdout
    again = agentkit_sessions(store_url, "approve", name, ann.id)
    assert again.returncode == 1 and "has been resumed" in again.stderr

    make_agent(Session(name, store_url))  # attaching again settles nothing
    assert len(Session(name, store_url).load()) == len(stored) and len(ran) == 1


def test_a_waiting_call_is_not_settled_on_load_but_a_claimed_one_is(
    store_url: str, name: str
) -> None:
    ann, bob = wait_for_approval(store_url, name)
    session = Session(name, store_url)
    version = len(session.load())
    make_agent(Session(name, store_url))  # loading settles interrupted calls: not these
    assert len(session.load()) == version and len(session.pending_approvals()) == 2
    session.approve(ann.id)
    session.approve(bob.id)
    # A resumer claimed the batch, then died before any result was stored.
    session.load()
    session.append(ApprovalResumeEntry(tool_call_ids=[ann.id, bob.id]))
    agent, _ = make_agent(Session(name, store_url))
    settled = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [m.content[0].text for m in settled] == [
        INTERRUPTED_TEXT.format(name="transfer", id=ann.id),
        INTERRUPTED_TEXT.format(name="transfer", id=bob.id)]  # fmt: skip
    assert ran == []  # not marked idempotent: never run twice, not even once more


def test_two_resumers_at_once_run_an_approved_call_once(
    store_url: str, name: str, open_stores: Callable[[], SessionStore]
) -> None:
    ann, bob = wait_for_approval(store_url, name)
    Session(name, store_url).approve(ann.id)
    Session(name, store_url).approve(bob.id)
    # Two workers, each with its own connection, load the decided session at the same moment.
    agents = [make_agent(Session(name, open_stores()))[0] for _ in range(2)]
    start = threading.Barrier(2)
    results: list[Any] = [None, None]

    def resume(index: int) -> None:
        start.wait(WAIT)
        results[index] = agents[index].continue_()

    threads = [threading.Thread(target=resume, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert sorted(ran, key=str) == [{"to": "ann", "amount": 50}, {"to": "bob", "amount": 5000}]
    reasons = sorted(r.stop_reason for r in results)
    assert reasons == ["error", "stop"]
    loser = next(r for r in results if r.stop_reason == "error")
    assert isinstance(loser.error, SessionConflictError)  # its claim was refused: nothing ran
    stored = Session(name, store_url).load()
    assert sum(isinstance(m, ApprovalResumeEntry) for m in stored) == 1
    assert_paired(stored)


def test_expired_and_revalidated_decisions_are_denied_at_resume(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    ann, bob = wait_for_approval(store, "expiring")
    session = Session("expiring", store)
    session.approve(ann.id, expires_in=1e-6)  # expired by the time anything resumes
    session.approve(bob.id, reason="ok by Eve")
    seen: list[tuple[ApprovalRequest, ApprovalDecision]] = []

    def revalidate(request: ApprovalRequest, decision: ApprovalDecision) -> str | None:
        seen.append((request, decision))
        return "over the new limit of 1000" if request.arguments["amount"] > 1000 else None

    agent, model = make_agent(Session("expiring", store), revalidate=revalidate)
    result = agent.continue_()
    assert ran == []
    texts = [m.content[0].text for m in result if isinstance(m, ToolResultMessage)]
    assert texts[0].startswith("Tool call transfer was rejected: the approval given at ")
    assert "expired" in texts[0]
    assert texts[1] == "Tool call transfer was rejected: over the new limit of 1000"
    assert [(r.id, d.approved, d.reason) for r, d in seen] == [(bob.id, True, "ok by Eve")]


def test_a_decision_ttl_denies_old_approvals(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    ann, bob = wait_for_approval(store, "old")
    session = Session("old", store)
    session.approve(ann.id)
    session.deny(bob.id)
    agent, _ = make_agent(Session("old", store), decision_ttl=1e-6)  # a microsecond: past
    result = agent.continue_()
    assert ran == [] and "expired" in result[1].content[0].text


@pytest.mark.processes
def test_two_deciders_at_once_record_one_decision(store_url: str, name: str) -> None:
    ann, _ = wait_for_approval(store_url, name)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "agentkit", "sessions", "--store", store_url, "approve", name,
               ann.id]  # fmt: skip
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env) for _ in range(3)]  # fmt: skip
    outcomes = [(child.wait(WAIT), child.stderr.read() if child.stderr else "") for child in children]
    assert sorted(code for code, _ in outcomes) == [0, 1, 1], outcomes
    assert all("decided already" in err for code, err in outcomes if code)
    stored = Session(name, store_url).load()
    assert sum(getattr(m, "role", None) == "approval_decision" for m in stored) == 1


@pytest.mark.processes
def test_wrong_decisions_are_refused_clearly(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    session = Session("plain", store)
    session.append(UserMessage(content="hi"))
    with pytest.raises(ApprovalError, match="no tool call nope waits for approval in session"):
        session.approve("nope")
    ann, _ = wait_for_approval(store, "edits")
    with pytest.raises(ApprovalError, match="edited arguments go with an approval"):
        decide(Session("edits", store), ann.id, approved=False, arguments={"x": 1})
    with pytest.raises(ApprovalError, match="must be a JSON object"):
        Session("edits", store).approve(ann.id, arguments=["x"])  # type: ignore[arg-type]
    assert len(Session("edits", store).pending_approvals()) == 2  # nothing was written
    code = agentkit_sessions(store, "approve", "edits", ann.id, "--arguments", "[1]")
    assert code.returncode == 2 and "expected a JSON object" in code.stderr


@pytest.mark.processes
def test_kills_during_the_batch_and_during_the_resume_lose_nothing_and_run_nothing_twice(
    store_url: str, name: str
) -> None:
    from tests.sessions.test_faults import kill_when_ready

    child = HERE / "approvals_child.py"
    # Killed while charge runs: transfer's request is durable already, charge settles.
    kill_when_ready(start_child_script(child, store_url, name, "batch"))
    (request,) = Session(name, store_url).pending_approvals()
    assert (request.tool_name, request.arguments) == ("transfer", {"to": "ann", "amount": 50})
    agent, _ = make_agent(Session(name, store_url))
    settled = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_name for m in settled] == ["charge"] and "interrupted" in settled[0].content[0].text
    assert [r.id for r in Session(name, store_url).pending_approvals()] == [request.id]

    Session(name, store_url).approve(request.id)
    # Killed while the approved transfer runs: it is settled as interrupted, never run again.
    kill_when_ready(start_child_script(child, store_url, name, "resume"))
    agent, _ = make_agent(Session(name, store_url))
    results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_name for m in results] == ["charge", "transfer"]
    assert results[1].content[0].text == INTERRUPTED_TEXT.format(name="transfer", id=request.id)
    assert ran == []
    with pytest.raises(ApprovalError, match="has been resumed"):
        Session(name, store_url).approve(request.id)
    assert_paired(Session(name, store_url).load())


refunds: list[str] = []


@tool(requires_approval=True, idempotent=True)
def refund(order: str) -> str:
    """Refund an order (idempotent)."""
    refunds.append(order)
    return f"refunded {order}"


def refund_agent(session: Session, **approvals: Any) -> Agent:
    model = ScriptedModel([reply(tool_call("refund", {"order": "A7"})), "Refunded."])
    return Agent(model=model.model, stream_fn=model, tools=[refund], session=session,
                 approvals=Approvals(defer=True, **approvals))  # fmt: skip


@pytest.mark.processes
def test_an_approved_idempotent_call_whose_resumer_died_runs_again_on_its_decision(
    store_url: str, name: str
) -> None:
    from tests.sessions.test_faults import kill_when_ready

    refunds.clear()
    result = refund_agent(Session(name, store_url)).prompt("refund order A7")
    (request,) = result.pending_approvals
    Session(name, store_url).approve(request.id)
    # The resumer claims the batch, refunds, and is killed before the result is stored.
    kill_when_ready(start_child_script(HERE / "approvals_child.py", store_url, name, "refund"))
    agent = refund_agent(Session(name, store_url))  # a fresh agent, with its broker
    (settled,) = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert not settled.is_error and settled.content[0].text == "refunded A7"
    assert refunds == ["A7"]  # run again here, on the recorded approval
    assert_paired(Session(name, store_url).load())


def test_an_expired_approval_of_a_claimed_idempotent_call_is_not_run_again(
    tmp_path: Path,
) -> None:
    from agentkit.transcript import ApprovalDecisionEntry

    refunds.clear()
    url, name = f"sqlite:///{tmp_path / 's.db'}", "expired-refund"
    (request,) = refund_agent(Session(name, url)).prompt("refund order A7").pending_approvals
    session = Session(name, url)
    session.load()
    session.append(ApprovalDecisionEntry(tool_call_id=request.id, approved=True, expires_at=1.0),
                   ApprovalResumeEntry(tool_call_ids=[request.id]))  # fmt: skip
    agent = refund_agent(Session(name, url))  # the claim's process died: settle on load
    (settled,) = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert settled.is_error and "expired" in settled.content[0].text
    assert refunds == []


def test_a_user_message_stored_behind_waiting_calls_waits_with_them(
    store_url: str, name: str
) -> None:
    (ann, bob) = wait_for_approval(store_url, name)
    session = Session(name, store_url)
    session.load()
    session.append(UserMessage(content="Also, say hello to Cy."))  # straight into the store
    agent, _ = make_agent(Session(name, store_url))  # a fresh agent: nothing is settled
    assert [m for m in agent.state.messages if isinstance(m, ToolResultMessage)] == []
    assert [r.id for r in Session(name, store_url).pending_approvals()] == [ann.id, bob.id]
    Session(name, store_url).approve(ann.id)
    Session(name, store_url).deny(bob.id, "too much")
    model = ScriptedModel(["Paid ann; bob was refused. Hello, Cy!"])
    agent = Agent(model=model.model, stream_fn=model, tools=[transfer],
                  session=Session(name, store_url), approvals=Approvals(defer=True))  # fmt: skip
    result = agent.continue_()
    assert result.stop_reason == "stop" and ran == [{"to": "ann", "amount": 50}]
    seen = [m.role for m in model.requests[-1].context.messages]
    assert seen == ["system", "user", "assistant", "tool_result", "tool_result", "user"]
    assert_paired(agent.state.messages)
    assert_paired(Session(name, store_url).load())


def start_child_script(script: Path, store_url: str, name: str, mode: str
                       ) -> subprocess.Popen[str]:  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(script), store_url, name, mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


# --- a real Celery worker resumes ---------------------------------------------------------------


class CeleryWorker:
    """``celery worker`` (prefork, two pool processes) on the approvals test app."""

    def __init__(self, broker: str, ledger: Path) -> None:
        env = worker_env(AGENTKIT_TEST_BROKER=broker, AGENTKIT_TEST_LEDGER=str(ledger),
                         PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "approvals_worker", "worker", "--pool=prefork",
             "--concurrency=2", "--loglevel=INFO", "--without-heartbeat", "--without-gossip",
             "--without-mingle", f"--hostname=approvals-{os.getpid()}@test"],
            cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="approvals-worker-log")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if " ready." in line:
                self.ready.set()
        self.ready.set()

    def stop(self) -> None:
        self.process.terminate()  # a warm shutdown
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(WAIT)
        self._reader.join(WAIT)


@pytest.fixture
def worker(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[CeleryWorker, Any]]:
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    saved = dict(os.environ)
    os.environ["AGENTKIT_TEST_BROKER"] = redis_server.url
    os.environ["AGENTKIT_TEST_LEDGER"] = str(ledger)
    sys.path.insert(0, str(HERE))
    try:
        sys.modules.pop("approvals_worker", None)  # its app reads the environment on import
        import approvals_worker
    finally:
        sys.path.remove(str(HERE))
        os.environ.clear()
        os.environ.update(saved)
    process = CeleryWorker(redis_server.url, ledger)
    try:
        assert process.ready.wait(WAIT) and process.process.poll() is None, "".join(process.lines)
        yield process, approvals_worker
    finally:
        process.stop()


@pytest.mark.processes
def test_a_celery_worker_resumes_a_decided_run(
    worker: tuple[CeleryWorker, Any], redis_server: RedisServer, name: str
) -> None:
    from agentkit.integrations.celery import submit

    _process, app = worker
    session = Session(name, redis_server.url)
    first = submit(app.run_agent, session, "Refund order A-7").get(timeout=WAIT)
    (waiting,) = first["pending_approvals"]
    assert (first["answer"], waiting["tool_name"]) == ("", "refund")
    assert waiting["arguments"] == {"order": "A-7", "amount": 30}
    with pytest.raises(ApprovalError):  # a new message would split the calls from their results
        submit(app.run_agent, Session(name, redis_server.url), "hello?")

    decided = agentkit_sessions(redis_server.url, "approve", name, waiting["id"])
    assert decided.returncode == 0, decided.stderr
    # Two deliveries of the resume at once, on the worker's two pool processes.
    resumes = [app.run_agent.apply_async((name,)) for _ in range(2)]
    outcomes = []
    for resume in resumes:
        try:
            outcomes.append(resume.get(timeout=WAIT)["answer"])
        except Exception as exc:  # the resumer whose claim conflicted, if they overlapped
            outcomes.append(type(exc).__name__)
    assert "Done: refunded 30 on A-7" in outcomes
    assert Path(app.LEDGER).read_text() == "A-7 30\n"  # exactly once
    stored = Session(name, redis_server.url).load()
    assert_paired(stored)
    assert stored[-1].role == "assistant"
