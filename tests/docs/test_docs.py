"""Every ```python block in docs/ runs: blocks of one file share a namespace, in order.

A block fenced as ```python {.no-run} (it needs a network, a key or a server) is skipped: the
braces are an attribute list, which the site's renderer (``pymdownx.superfences`` with
``attr_list``) reads as a CSS class, so the page still shows the block as code. A page
whose example talks to a hosted provider runs against a stand-in: a local server replaying that
provider's recorded streams, reached through the provider's own base-URL variable.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentkit.providers import catalog
from tests.providers.replay_server import ReplayServer, Reply, fixture_bytes

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```python[ \t]*(?P<info>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
NO_RUN = "{.no-run}"
"""The fence's attribute list that marks a block not to run."""


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The runnable blocks of a Markdown file: ``(line number, code)`` pairs."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        info = match.group("info").strip()
        if info == NO_RUN:
            continue
        if info:  # the renderer would not show it as code: one convention, one spelling
            line = text.count("\n", 0, match.start()) + 1
            raise ValueError(f"{path.name}:{line}: unknown fence info {info!r}; use {NO_RUN}")
        line = text.count("\n", 0, match.start("code")) + 1
        blocks.append((line, match.group("code")))
    return blocks


def test_fence_parser() -> None:
    sample = "x\n```python\na = 1\n```\n```python {.no-run}\nboom()\n```\n```bash\nls\n```\n"
    assert python_blocks_from_text(sample) == [(3, "a = 1\n")]
    with pytest.raises(ValueError, match="unknown fence info 'no-run'"):
        python_blocks_from_text("```python no-run\nboom()\n```\n")


def python_blocks_from_text(text: str) -> list[tuple[int, str]]:
    tmp = DOCS.parent / ".pytest_cache" / "fence-sample.md"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    return python_blocks(tmp)


DOC_FILES = [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]
"""The docs' pages, and the README, whose Python example must run as printed too."""


def test_docs_exist() -> None:
    names = {p.name for p in DOC_FILES}
    expected = {"index.md", "quickstart.md", "concepts.md", "tools.md", "providers.md"}
    expected |= {"threading.md", "testing.md", "reliability.md"}
    assert expected <= names


@pytest.fixture
def restore_catalog() -> Iterator[None]:
    """Drop the models a page registers (docs/providers.md registers one), so the catalog
    tests that run later see only the built-in catalog."""
    with catalog._lock:
        catalog._load_builtin()
        saved = dict(catalog._models)
    yield
    with catalog._lock:
        catalog._models.clear()
        catalog._models.update(saved)


def responses_text(text: str) -> bytes:
    """The recorded OpenAI Responses text stream, saying ``text`` in one delta instead."""
    recorded = "vendor/openai-responses-text.sse"
    said = "2+2 = 4"  # what the recording says
    events = []
    for block in fixture_bytes(recorded).decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = block.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        if event["type"] == "response.output_text.delta":
            if any(e["type"] == event["type"] for _, e in events):
                continue
            event["delta"] = text
        events.append((name, json.loads(json.dumps(event).replace(said, text))))
    return "".join(f"{name}\ndata: {json.dumps(e)}\n\n" for name, e in events).encode()


def check_index(server: ReplayServer, printed: str) -> None:
    """index.md's first example really called the tool and answered from its result."""
    assert printed.splitlines()[0] == "The capital of France is Paris."
    first, second = server.requests
    assert first.path == second.path == "/v1/responses"
    assert first.headers["authorization"] == "Bearer sk-docs-stand-in"
    outputs = [i for i in second.json["input"] if i.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == ["Paris"]


STAND_INS: dict[str, tuple[Callable[[], list[Reply]], Callable[[ReplayServer, str], None]]] = {
    "index.md": (
        lambda: [
            Reply(fixture_bytes("vendor/openai-responses-function-call.sse")),
            Reply(responses_text("The capital of France is Paris.")),
        ],
        check_index,
    ),
}
STAND_INS["README.md"] = STAND_INS["index.md"]  # the same first agent
"""Pages whose examples call OpenAI: the replies their stand-in plays, and what the page's
run must have done with them (given the server and what the page printed)."""


PAGE_MARKS = {
    "mcp.md": pytest.mark.processes,  # its examples start an MCP server over stdio
    "fleet.md": pytest.mark.slow,  # its rate limiter waits out real one-second windows
}
"""What more than this process a page's examples need (setup.cfg's markers)."""


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.name, marks=PAGE_MARKS.get(p.name, ())) for p in DOC_FILES]
)
def test_doc_code_blocks_run(
    path: Path, monkeypatch: pytest.MonkeyPatch, restore_catalog: None
) -> None:
    monkeypatch.delenv("AGENTKIT_MODEL", raising=False)
    namespace: dict[str, object] = {"__name__": f"docs.{path.stem}"}
    server = None
    printed = io.StringIO()  # what a stand-in page prints; other pages print to the terminal
    if path.name in STAND_INS:
        server = ReplayServer()
        server.start()
        server.enqueue(*STAND_INS[path.name][0]())
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-stand-in")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    try:
        with contextlib.redirect_stdout(printed) if server else contextlib.nullcontext():
            for line, code in python_blocks(path):
                compiled = compile(code, f"{path.name}:{line}", "exec")
                try:
                    exec(compiled, namespace)
                except BaseException as exc:
                    where = f"{path.name}, block at line {line}"
                    raise AssertionError(f"{where} raised {exc!r}") from exc
        if server is not None:
            STAND_INS[path.name][1](server, printed.getvalue())
    finally:
        if server is not None:
            server.stop()
