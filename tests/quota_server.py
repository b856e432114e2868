"""A local OpenAI-compatible server that enforces a quota the way a hosted API does, and counts
what it received: for the rate limiter's tests and the 429-storm benchmark.

Every request to ``/v1/chat/completions`` is counted when it arrives. The quota is a sliding
window: at most ``requests`` requests and ``tokens`` tokens in any ``per`` seconds. A request
over the quota gets a 429 with ``Retry-After`` (whole seconds) and ``retry-after-ms`` (the exact
wait until the window has room), and is not counted against the window; a request within it
gets a short streamed answer whose reported usage is what the window counted: ``prompt_tokens``
is the body's size over four (plus ``hidden_tokens``, input the body does not show, as an
image's), ``cached_tokens`` of it read from a cache, ``completion_tokens`` is ``output_tokens``:
what a test's model is charged, at the prices it gives the model. ``GET /stats`` answers the
counts as JSON (the tokens of every answer sent included).

Its time is the wall clock, or a :class:`FakeClock` shared with the limiter under test.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentkit import Agent
from agentkit.limits import MemoryBackend, Quota, QuotaBackend, Refusal
from agentkit.types import Model


def run_prompts(model: Model, count: int, threads: int, **options: Any) -> Counter[str]:
    """``count`` agents, ``threads`` at a time, each one prompt; their runs' stop reasons."""

    def run(_: int) -> str:
        agent = Agent(model=model, api_key="test-key", timeout=(10, 10), **options)
        agent.prompt("Hello")
        return str(agent.state.messages[-1].stop_reason)

    with ThreadPoolExecutor(threads) as pool:
        return Counter(pool.map(run, range(count)))


def pass_time(backend: QuotaBackend, seconds: float) -> None:
    """Let ``seconds`` pass for ``backend``: on its fake clock, or really (Redis's own clock)."""
    clock = getattr(backend, "clock", None)
    if isinstance(clock, FakeClock):
        clock.advance(seconds)
    else:
        threading.Event().wait(seconds)  # the time under test itself, not a synchronisation


class FakeClock:
    """The time of a limiter and a quota server under test, in which a fleet's waits take no
    real time. It moves when told (:meth:`advance`, a server's latency), or when a thread waits
    on it with a timeout while no request is in flight: at once, by that timeout. While a
    request is in flight (admitted by :meth:`backend`, not yet settled) it stands still, and a
    wait for a time to pass waits (really) for the flight to end: requests are answered in no
    time, as on an infinitely fast network, so every wait a test sees is the limiter's own.
    """

    def __init__(self, start: float = 1000.0) -> None:
        # Guards _now and _flying; notified when a request settles.
        self._cond = threading.Condition()
        self._now = start
        self._flying = 0

    def now(self) -> float:
        with self._cond:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._cond:
            self._now += seconds

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if timeout is None:
            return event.wait()
        with self._cond:
            self._cond.wait_for(lambda: not self._flying or event.is_set())
            if not event.is_set():
                self._now += max(timeout, 0.0)
        return event.is_set()

    def backend(self) -> MemoryBackend:
        """An in-memory quota backend on this clock that tells it which requests fly."""
        return _Tracked(self)

    def _flight(self, change: int) -> None:
        with self._cond:
            self._flying += change
            self._cond.notify_all()


class _Tracked(MemoryBackend):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.fake = clock

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> Refusal | None:
        refusal = super().try_acquire(bucket, quota, permit_id, tokens)
        if refusal is None:
            self.fake._flight(+1)
        return refusal

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        super().settle(bucket, quota, permit_id, tokens)
        self.fake._flight(-1)


class QuotaServer:
    """A ThreadingHTTPServer on 127.0.0.1 that answers chat completions within its quota."""

    def __init__(
        self,
        requests: int | None = None,
        tokens: int | None = None,
        per: float = 60.0,
        output_tokens: int = 10,
        delay: float = 0.0,
        hidden_tokens: int = 0,
        lags: Sequence[float] = (),
        clock: FakeClock | None = None,
        cached_tokens: int = 0,
        failures: int = 0,
    ) -> None:
        self.requests = requests
        self.tokens = tokens
        self.per = per
        self.output_tokens = output_tokens
        self.hidden_tokens = hidden_tokens
        self.cached_tokens = cached_tokens
        self.failures = failures
        """How many of the first requests get a 503 (counted as rejected)."""
        self.charged = {"prompt": 0, "cached": 0, "completion": 0}
        """The tokens of every answer sent."""
        self.delay = delay
        """Seconds before the first byte of each accepted answer (a hosted API's latency)."""
        self.lags = list(lags)
        """How much later than it arrives each request (in arrival order) is counted, as a
        gateway's queue counts it: the first ``len(lags)`` requests; the rest at once."""
        self.clock = clock
        self.retry_after: str | None = None
        """The ``Retry-After`` a refusal sends instead of the wait (a hostile server's)."""
        # Guards the window and every counter below.
        self.lock = threading.Lock()
        # Notified (under lock) when a request arrives.
        self.arrived = threading.Condition(self.lock)
        self._window: list[tuple[float, int]] = []  # (counted at, tokens), oldest first
        self.received = 0
        self.accepted = 0
        self.rejected = 0
        self.peak_requests = 0
        """The most requests accepted in any window, as each one arrived."""
        self.peak_tokens = 0
        self.arrivals: list[tuple[float, bool]] = []
        """When each request arrived (:meth:`now`), and whether it was refused, in order."""
        self.closed_until = 0.0
        """Until this :meth:`now`, every request gets a 429 naming the time left."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._reply(200, "application/json", json.dumps(server.stats()).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                prompt_tokens = len(body) // 4 + server.hidden_tokens
                if server.fail_once():
                    error = {"error": {"message": "Service unavailable"}}
                    self._reply(503, "application/json", json.dumps(error).encode())
                    return
                wait = server.admit(prompt_tokens + server.output_tokens)
                if wait is not None:
                    headers = {
                        "Retry-After": str(max(1, math.ceil(wait))),
                        "retry-after-ms": str(max(1, math.ceil(wait * 1000))),
                    }
                    if server.retry_after is not None:
                        headers = {"Retry-After": server.retry_after}
                    error = {"error": {"message": "Rate limit reached", "type": "rate_limit"}}
                    self._reply(429, "application/json", json.dumps(error).encode(), headers)
                    return
                if server.delay and server.clock is not None:
                    server.clock.advance(server.delay)
                elif server.delay:
                    time.sleep(server.delay)  # the server's latency, not a test's synchronisation
                usage = server.charge(prompt_tokens)
                chunks = [
                    {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {"choices": [], "usage": usage},
                ]
                text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._reply(200, "text/event-stream", text.encode())

            def _reply(
                self, status: int, kind: str, data: bytes, headers: dict[str, str] | None = None
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:
                    pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 512  # a fleet connects at once; the default 5 drops SYNs

            def handle_error(self, request: Any, client_address: Any) -> None:
                return

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="quota-server", daemon=True
        )

    def now(self) -> float:
        """The server's time: its clock's, else the wall clock's."""
        return self.clock.now() if self.clock is not None else time.time()

    def admit(self, tokens: int) -> float | None:
        """Count a request that arrived now: ``None`` if the quota had room (it is counted in
        the window), else the seconds until it would have."""
        now = self.now()
        with self.lock:
            wait = self._admit(now, tokens)
            self.arrivals.append((now, wait is not None))
            self.arrived.notify_all()
            return wait

    def wait_received(self, count: int, timeout: float) -> bool:
        """Block until ``count`` requests have arrived (or ``timeout`` seconds passed)."""
        with self.lock:
            return self.arrived.wait_for(lambda: self.received >= count, timeout)

    def _admit(self, now: float, tokens: int) -> float | None:
        """:meth:`admit`, under ``lock``."""
        self.received += 1
        lag = self.lags[self.received - 1] if self.received <= len(self.lags) else 0.0
        if self.closed_until > now:
            self.rejected += 1
            return self.closed_until - now
        window = self._window
        while window and window[0][0] <= now - self.per:
            window.pop(0)
        wait = 0.0
        if self.requests is not None and len(window) >= self.requests:
            wait = window[len(window) - self.requests][0] + self.per - now
        used = sum(amount for _, amount in window)
        if self.tokens is not None and window and used + tokens > self.tokens:
            freed = 0
            for counted, amount in window:
                freed += amount
                if used + tokens - freed <= self.tokens:
                    wait = max(wait, counted + self.per - now)
                    break
        if wait > 0:
            self.rejected += 1
            return wait
        bisect.insort(window, (now + lag, tokens))
        self.accepted += 1
        self.peak_requests = max(self.peak_requests, len(window))
        self.peak_tokens = max(self.peak_tokens, used + tokens)
        return None

    def fail_once(self) -> bool:
        """Whether this request is one of the ``failures`` (it is counted as received)."""
        with self.lock:
            if self.failures <= 0:
                return False
            self.failures -= 1
            self.received += 1
            self.rejected += 1
            return True

    def charge(self, prompt_tokens: int) -> dict[str, Any]:
        """The usage an answer reports, counted in :attr:`charged`."""
        cached = min(self.cached_tokens, prompt_tokens)
        with self.lock:
            self.charged["prompt"] += prompt_tokens
            self.charged["cached"] += cached
            self.charged["completion"] += self.output_tokens
        return {
            "prompt_tokens": prompt_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens": self.output_tokens,
            "total_tokens": prompt_tokens + self.output_tokens,
        }

    def close_for(self, seconds: float) -> None:
        """Refuse every request for ``seconds`` (as an API does once a quota is spent)."""
        with self.lock:
            self.closed_until = self.now() + seconds

    def stats(self) -> dict[str, int]:
        """The counts so far."""
        with self.lock:
            return {
                "received": self.received,
                "accepted": self.accepted,
                "rejected": self.rejected,
                "peak_requests": self.peak_requests,
                "peak_tokens": self.peak_tokens,
                **{f"{kind}_tokens": count for kind, count in self.charged.items()},
            }

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def model(self, model_id: str = "gpt-4o-mini") -> Model:
        """An OpenAI-compatible model served here."""
        return Model(
            id=model_id, name=model_id, api="openai-completions", provider="openai",
            base_url=self.url,
        )  # fmt: skip

    def start(self) -> QuotaServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
