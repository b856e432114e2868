"""Shared harness of the concurrency drivers (standard library only).

A driver defines an adapter (usually its own module) and calls ``main(adapter)``:

  FRAMEWORK: str            name printed in the JSON line
  MODE: "threads" | "asyncio"
  NATIVE_TOOL: "sync" | "async"   the tool style the framework is normally used with
  version() -> str
  optional: add_args(argparse parser); framework_name(args) -> str (overrides FRAMEWORK)
  threads:  build(args) -> state;        run(state, i: int) -> str      (blocking)
  asyncio:  async abuild(args) -> state; async arun(state, i: int) -> str
            optional async aclose(state)

``run``/``arun`` performs one complete agent run on ``prompt(i)`` (TURNS tool rounds, then the
final answer) with a tool built from ``tool_fn(args)`` and returns the final text. The harness
runs N of them at once in this one process: N threads released together (threads), or N tasks
awaited together (asyncio: ``asyncio.wait`` on N tasks, which is ``asyncio.gather`` with a
deadline). Before that it does ``--warmup`` runs alone (untimed, run ids from 1e6). It prints
one JSON line.

Measured over the batch only: wall time (release -> last run done), process CPU (user+sys of
every thread, ``resource.getrusage``), peak RSS (``ru_maxrss``) and RSS before the batch,
thread count and RSS (``/proc/self/stat`` sampled every 20 ms; the sampler's own thread and
CPU are not counted), tool
calls in flight at once, the server's counters (requests, TCP connections opened, most
requests in flight, its own CPU) and per-run latency percentiles.

Correct means: no run raised, run i returned exactly ``final_text_template.format(run=i)``,
``sleep_tool`` ran exactly once for every (run, turn), the server saw N*(TURNS+1) requests,
all streamed, all carrying a run marker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time
import traceback
import urllib.request
from collections import Counter

_T_START = time.perf_counter()

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")


def raise_fd_limit() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE up to the hard limit, so N=1000 can open its sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


FD_LIMIT = raise_fd_limit()

SYSTEM = "You are a benchmark agent. Call the tools you are asked to call."
MODEL = "fake-model"
API_KEY = "sk-fake-bench-key"
WARMUP_BASE = 1_000_000


def prompt(i: int) -> str:
    return f"[run {i}] Call sleep_tool exactly as instructed, then give a final answer."


# --------------------------------------------------------------------------- the tool
class Recorder:
    """Counts every sleep_tool call by (run, turn) and how many were running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.calls: Counter = Counter()
            self.in_flight = 0
            self.max_in_flight = 0
            self.threads: set[int] = set()

    def begin(self) -> None:
        with self.lock:
            self.in_flight += 1
            if self.in_flight > self.max_in_flight:
                self.max_in_flight = self.in_flight
            self.threads.add(threading.get_ident())

    def end(self, run: int, turn: int) -> None:
        with self.lock:
            self.in_flight -= 1
            self.calls[(int(run), int(turn))] += 1


REC = Recorder()


def sleep_tool(ms: int, run: int, turn: int) -> str:
    """Sleep for ms milliseconds, then say which call this was.

    Args:
        ms: How many milliseconds to sleep.
        run: The run number given in the request; echo it back.
        turn: The turn number given in the request; echo it back.
    """
    REC.begin()
    try:
        if ms:
            time.sleep(int(ms) / 1000.0)
    finally:
        REC.end(run, turn)
    return f"slept {ms} ms (run {run}, turn {turn})"


async def _async_sleep_tool(ms: int, run: int, turn: int) -> str:
    """Sleep for ms milliseconds, then say which call this was.

    Args:
        ms: How many milliseconds to sleep.
        run: The run number given in the request; echo it back.
        turn: The turn number given in the request; echo it back.
    """
    REC.begin()
    try:
        if ms:
            await asyncio.sleep(int(ms) / 1000.0)
    finally:
        REC.end(run, turn)
    return f"slept {ms} ms (run {run}, turn {turn})"


_async_sleep_tool.__name__ = _async_sleep_tool.__qualname__ = "sleep_tool"
async_sleep_tool = _async_sleep_tool

TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "sleep_tool",
        "description": "Sleep for ms milliseconds, then say which call this was.",
        "parameters": {
            "type": "object",
            "properties": {"ms": {"type": "integer"}, "run": {"type": "integer"},
                           "turn": {"type": "integer"}},
            "required": ["ms", "run", "turn"],
            "additionalProperties": False,
        },
    },
}


def tool_fn(args):
    """The sleep_tool function of the kind --tool asks for (sync: time.sleep, async: asyncio.sleep)."""
    return async_sleep_tool if args.tool_kind == "async" else sleep_tool


# --------------------------------------------------------------------------- server
def _root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def server_get(base_url: str, path: str) -> dict:
    with _opener.open(_root(base_url) + path, timeout=30) as r:
        return json.loads(r.read())


def server_post(base_url: str, path: str, obj: dict) -> dict:
    req = urllib.request.Request(_root(base_url) + path, data=json.dumps(obj).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with _opener.open(req, timeout=30) as r:
        return json.loads(r.read())


# --------------------------------------------------------------------------- measurement
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _open_stat():
    try:
        return os.open("/proc/self/stat", os.O_RDONLY)
    except OSError:
        return None


_STAT_FD = _open_stat()


def _status() -> dict:
    """{"Threads": OS threads of this process, "VmRSS": resident KB}, from /proc/self/stat."""
    if _STAT_FD is None:
        return {"Threads": threading.active_count(), "VmRSS": 0}
    raw = os.pread(_STAT_FD, 4096, 0)
    fields = raw[raw.rfind(b")") + 2:].split()
    return {"Threads": int(fields[17]), "VmRSS": int(fields[21]) * _PAGE_KB}


def current_rss_mb() -> float:
    return round(_status().get("VmRSS", 0) / 1024.0, 1)


def thread_count() -> int:
    return _status()["Threads"]


class Sampler(threading.Thread):
    """Peak OS thread count and RSS of this process, sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.interval = interval
        st = _status()
        self.peak = st["Threads"]
        self.peak_rss_kb = st["VmRSS"]
        self.stop_ev = threading.Event()
        self.cpu_s = 0.0

    def run(self) -> None:
        wait = self.stop_ev.wait
        interval = self.interval
        while not wait(interval):
            st = _status()
            if st["Threads"] > self.peak:
                self.peak = st["Threads"]
            if st["VmRSS"] > self.peak_rss_kb:
                self.peak_rss_kb = st["VmRSS"]
        st = _status()
        self.peak_rss_kb = max(self.peak_rss_kb, st["VmRSS"])
        self.cpu_s = time.thread_time()  # its own CPU, taken off the process's

    def stop(self) -> int:
        self.stop_ev.set()
        self.join(2)
        return self.peak - 1  # not the sampler itself


def cpu_times() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def context_switches() -> tuple[int, int]:
    """The process's context switches so far, every thread's: (voluntary, involuntary).

    A voluntary one is a thread blocking (on I/O, a lock, or the interpreter lock, whose
    waiters wake every switch interval to ask for it); an involuntary one is the kernel taking
    the core from a runnable thread."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw, ru.ru_nivcsw


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def err_text(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__qualname__}: {e}"[:400]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))
    return round(v[k], 4)


# --------------------------------------------------------------------------- args
def parse_args(argv=None, adapter=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10, help="concurrent runs")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--tool-ms", type=int, default=50)
    p.add_argument("--tool", dest="tool_kind", choices=["native", "sync", "async"], default="native",
                   help="sync: time.sleep tool; async: asyncio.sleep tool; native: the driver's usual")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs alone before the batch")
    p.add_argument("--deadline", type=float, default=240.0,
                   help="seconds the batch may take; unfinished runs count as errors")
    p.add_argument("--base-url", default="http://127.0.0.1:8765/v1")
    p.add_argument("--label", default="")
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--no-configure-server", action="store_true",
                   help="do not POST /config (use the server's own TURNS/TOOL_MS)")
    if adapter is not None and hasattr(adapter, "add_args"):
        adapter.add_args(p)
    return p.parse_args(argv)


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- the batch
class Batch:
    def __init__(self, n: int) -> None:
        self.n = n
        self.texts: list = [None] * n
        self.errors: list = [None] * n
        self.t_start: list = [None] * n
        self.t_end: list = [None] * n


def _begin_measure(args):
    REC.reset()
    server_post(args.base_url, "/reset", {})
    s0 = server_get(args.base_url, "/stats")
    sampler = Sampler()
    rss0 = current_rss_mb()
    thr0 = thread_count()
    sampler.start()
    return {"sampler": sampler, "rss0": rss0, "thr0": thr0, "cpu0": cpu_times(),
            "csw0": context_switches(), "s0": s0}


def _end_measure(m, args, cfg, batch: Batch, t0: float, t_release: float, wall: float) -> dict:
    sampler = m["sampler"]
    peak_threads = sampler.stop()
    cpu1 = cpu_times()
    csw1 = context_switches()
    s1 = server_get(args.base_url, "/stats")
    s0 = m["s0"]
    n, turns = args.n, args.turns
    cpu_user = cpu1[0] - m["cpu0"][0]
    cpu_sys = cpu1[1] - m["cpu0"][1]
    cpu = max(0.0, cpu_user + cpu_sys - sampler.cpu_s)
    model_turns = n * (turns + 1)
    ideal = cfg["ideal_s"]
    template = cfg["final_text_template"]
    server_cpu = s1["cpu_s"] - s0["cpu_s"]
    req = s1["requests"] - s0["requests"]
    stream_req = s1["stream_requests"] - s0["stream_requests"]

    problems: list[str] = []
    errors = [e for e in batch.errors if e]
    unfinished = sum(1 for i in range(n) if batch.t_end[i] is None)
    wrong_text = 0
    for i in range(n):
        if batch.errors[i] or batch.t_end[i] is None:
            continue
        if (batch.texts[i] or "").strip() != template.format(run=i):
            wrong_text += 1
            if wrong_text <= 2:
                problems.append(f"run {i}: unexpected final text {str(batch.texts[i])[:90]!r}")
    with REC.lock:
        calls = dict(REC.calls)
        max_tools = REC.max_in_flight
        tool_threads = len(REC.threads)
    expected = {(i, t) for i in range(n) for t in range(turns)}
    missing = sum(1 for k in expected if calls.get(k, 0) == 0)
    repeated = sum(1 for k in expected if calls.get(k, 0) > 1)
    foreign = sum(v for k, v in calls.items() if k not in expected)
    if missing:
        problems.append(f"{missing} tool calls never ran")
    if repeated:
        problems.append(f"{repeated} tool calls ran more than once")
    if foreign:
        problems.append(f"{foreign} tool calls with a run/turn that was never asked for")
    if req != model_turns:
        problems.append(f"server saw {req} requests, expected {model_turns}")
    if stream_req != req:
        problems.append(f"{req - stream_req} requests were not streamed")
    if s1["unmarked"] - s0["unmarked"]:
        problems.append(f"{s1['unmarked'] - s0['unmarked']} requests without the [run i] marker")
    if errors:
        problems.append(f"{len(errors)} runs raised")
    if unfinished:
        problems.append(f"{unfinished} runs unfinished at the deadline")
    if wrong_text:
        problems.append(f"{wrong_text} runs returned another text")
    run_s = [batch.t_end[i] - batch.t_start[i] for i in range(n)
             if batch.t_end[i] is not None and batch.t_start[i] is not None]
    first_start = [batch.t_start[i] for i in range(n) if batch.t_start[i] is not None]
    peak = peak_rss_mb()
    ok_runs = sum(1 for i in range(n) if batch.t_end[i] is not None and not batch.errors[i])
    return {
        "n": n,
        "wall_s": round(wall, 4),
        "ideal_s": ideal,
        "wall_over_ideal": round(wall / ideal, 3) if ideal else None,
        "spawn_s": round(t_release - t0, 4),
        "start_spread_s": round(max(first_start) - min(first_start), 4) if first_start else None,
        "run_s": {"min": _pct(run_s, 0), "p50": _pct(run_s, 0.5), "p90": _pct(run_s, 0.9),
                  "p99": _pct(run_s, 0.99), "max": _pct(run_s, 1)},
        "model_turns": model_turns,
        "tool_calls": sum(calls.values()),
        "cpu_s": round(cpu, 4),
        "cpu_user_s": round(cpu_user, 4),
        "cpu_sys_s": round(cpu_sys, 4),
        "sampler_cpu_s": round(sampler.cpu_s, 4),
        "cpu_ms_per_turn": round(cpu / model_turns * 1000, 3),
        "voluntary_switches_per_turn": round((csw1[0] - m["csw0"][0]) / model_turns, 1),
        "involuntary_switches_per_turn": round((csw1[1] - m["csw0"][1]) / model_turns, 1),
        "cpu_cores": round(cpu / wall, 3) if wall > 0 else None,
        "rss_before_mb": m["rss0"],
        "peak_rss_mb": peak,
        "batch_peak_rss_mb": round(sampler.peak_rss_kb / 1024.0, 1),
        "rss_per_run_kb": round(max(0.0, sampler.peak_rss_kb / 1024.0 - m["rss0"]) * 1024 / n, 1),
        "threads_before": m["thr0"],
        "peak_threads": peak_threads,
        "max_tools_in_flight": max_tools,
        "tool_threads": tool_threads,
        "server": {
            "requests": req,
            "stream_requests": stream_req,
            "usage_requested": s1.get("usage_requested", 0) - s0.get("usage_requested", 0),
            # TCP connections the batch opened (less the harness's own /stats request)
            "connections": s1["connections"] - s0["connections"] - 1,
            "max_open_connections": s1["max_open_connections"],
            "max_inflight": s1["max_inflight"],
            "cpu_s": round(server_cpu, 3),
            "cpu_util": round(server_cpu / wall, 3) if wall > 0 else None,
            "late_ms_max": s1["late_ms_max"],
            "late_ms_mean": s1["late_ms_mean"],
        },
        "ok_runs": ok_runs,
        "errors": len(errors) + unfinished,
        "error_samples": sorted(set(errors))[:3],
        "correct": not problems,
        "problems": problems[:8],
    }


def _configure(args) -> dict:
    if not args.no_configure_server:
        server_post(args.base_url, "/config", {"turns": args.turns, "tool_ms": args.tool_ms})
    cfg = server_get(args.base_url, "/config")
    args.turns, args.tool_ms = cfg["turns"], cfg["tool_ms"]
    return cfg


def _base(adapter, args, cfg) -> dict:
    return {
        "framework": adapter.FRAMEWORK,
        "driver": os.path.splitext(os.path.basename(sys.argv[0]))[0],
        "version": None,
        "mode": adapter.MODE,
        "tool": args.tool_kind,
        "tool_requested": args.tool_requested,
        "label": args.label,
        "round": args.round,
        "n": args.n,
        "turns": args.turns, "tool_ms": args.tool_ms, "ttft_ms": cfg["ttft_ms"],
        "chunk_ms": cfg["chunk_ms"], "chunks": cfg["chunks"],
        "python": sys.version.split()[0],
        "fd_limit": FD_LIMIT[0],
        "import_s": round(time.perf_counter() - _T_START, 4),
    }


def _threads_main(adapter, args, cfg, base) -> dict:
    t = time.perf_counter()
    state = adapter.build(args)
    base["setup_s"] = round(time.perf_counter() - t, 4)
    base["version"] = adapter.version()
    for w in range(args.warmup):
        text = adapter.run(state, WARMUP_BASE + w)
        if "complete" not in str(text):
            raise RuntimeError(f"warm-up run returned {str(text)[:200]!r}")
    m = _begin_measure(args)
    batch = Batch(args.n)
    go = threading.Event()

    def worker(i: int) -> None:
        go.wait()
        batch.t_start[i] = time.perf_counter()
        try:
            batch.texts[i] = adapter.run(state, i)
        except BaseException as e:  # noqa: BLE001
            batch.errors[i] = err_text(e)
            if os.environ.get("BENCH_DEBUG"):
                traceback.print_exc()
        batch.t_end[i] = time.perf_counter()

    t0 = time.perf_counter()
    threads = []
    spawn_error = None
    for i in range(args.n):
        th = threading.Thread(target=worker, args=(i,), name=f"bench-run-{i}", daemon=True)
        try:
            th.start()
        except RuntimeError as e:  # can't start new thread
            spawn_error = err_text(e)
            break
        threads.append(th)
    t_release = time.perf_counter()
    go.set()
    deadline = t_release + args.deadline
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()))
    ends = [e for e in batch.t_end if e is not None]
    wall = (max(ends) if len(ends) == args.n else time.perf_counter()) - t_release
    out = _end_measure(m, args, cfg, batch, t0, t_release, wall)
    if spawn_error:
        out["correct"] = False
        out["problems"].insert(0, f"started only {len(threads)} threads: {spawn_error}")
    return out


class LoopLag:
    """A 10 ms ticker on the event loop: how late each tick ran (the loop was blocked, or busy,
    or its thread waited for the GIL) over the batch."""

    PERIOD = 0.01

    def __init__(self) -> None:
        self.lags: list[float] = []

    async def tick(self) -> None:
        while True:
            due = time.perf_counter() + self.PERIOD
            await asyncio.sleep(self.PERIOD)
            self.lags.append(max(0.0, time.perf_counter() - due) * 1000.0)

    def summary(self) -> dict:
        lags = self.lags
        return {"ticks": len(lags), "max": round(max(lags), 2) if lags else None,
                "p99": _pct(lags, 0.99), "p50": _pct(lags, 0.5),
                "over_10ms": sum(1 for x in lags if x > 10.0)}


async def _asyncio_main(adapter, args, cfg, base) -> dict:
    t = time.perf_counter()
    state = await adapter.abuild(args)
    base["setup_s"] = round(time.perf_counter() - t, 4)
    base["version"] = adapter.version()
    for w in range(args.warmup):
        text = await adapter.arun(state, WARMUP_BASE + w)
        if "complete" not in str(text):
            raise RuntimeError(f"warm-up run returned {str(text)[:200]!r}")
    m = _begin_measure(args)
    batch = Batch(args.n)

    async def one(i: int) -> None:
        batch.t_start[i] = time.perf_counter()
        try:
            batch.texts[i] = await adapter.arun(state, i)
        except BaseException as e:  # noqa: BLE001  (CancelledError at the deadline too)
            batch.errors[i] = err_text(e)
            if os.environ.get("BENCH_DEBUG"):
                traceback.print_exc()
            if isinstance(e, asyncio.CancelledError):
                return
        batch.t_end[i] = time.perf_counter()

    ticker = LoopLag()
    ticking = asyncio.ensure_future(ticker.tick())
    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(one(i)) for i in range(args.n)]
    t_release = time.perf_counter()
    done, pending = await asyncio.wait(tasks, timeout=args.deadline)
    ends = [e for e in batch.t_end if e is not None]
    wall = (max(ends) if len(ends) == args.n else time.perf_counter()) - t_release
    ticking.cancel()
    out = _end_measure(m, args, cfg, batch, t0, t_release, wall)
    out["loop_lag_ms"] = ticker.summary()
    for p in pending:
        p.cancel()
    if hasattr(adapter, "aclose"):
        try:
            await asyncio.wait_for(adapter.aclose(state), 5)
        except BaseException:  # noqa: BLE001
            pass
    return out


def main(adapter, argv=None) -> None:
    args = parse_args(argv, adapter)
    if hasattr(adapter, "framework_name"):
        adapter.FRAMEWORK = adapter.framework_name(args)
    args.tool_requested = args.tool_kind
    if args.tool_kind == "native":
        args.tool_kind = adapter.NATIVE_TOOL
    out: dict = {"framework": adapter.FRAMEWORK, "n": args.n, "label": args.label,
                 "round": args.round, "tool_requested": args.tool_requested}
    try:
        cfg = _configure(args)
        out = _base(adapter, args, cfg)
        if adapter.MODE == "threads":
            out.update(_threads_main(adapter, args, cfg, out))
        else:
            # not asyncio.run(): its shutdown would wait for whatever a framework left running
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            out.update(loop.run_until_complete(_asyncio_main(adapter, args, cfg, out)))
    except BaseException as e:  # noqa: BLE001
        out["correct"] = False
        out["fatal"] = err_text(e)
        if os.environ.get("BENCH_DEBUG"):
            traceback.print_exc()
        if not out.get("version"):
            try:
                out["version"] = adapter.version()
            except BaseException:  # noqa: BLE001
                pass
    out.setdefault("peak_rss_mb", peak_rss_mb())
    emit(out)
    # threads a framework left behind (or runs past the deadline) must not hold the process
    os._exit(0)
