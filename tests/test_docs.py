"""Every ```python block in docs/ runs: blocks of one file share a namespace, in order.

A block fenced as ```python no-run (it needs a network, a key or a server) is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkit.providers import catalog

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```python[ \t]*(?P<info>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The runnable blocks of a Markdown file: ``(line number, code)`` pairs."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        if "no-run" in match.group("info").split():
            continue
        line = text.count("\n", 0, match.start("code")) + 1
        blocks.append((line, match.group("code")))
    return blocks


def test_fence_parser() -> None:
    sample = "x\n```python\na = 1\n```\n```python no-run\nboom()\n```\n```bash\nls\n```\n"
    assert python_blocks_from_text(sample) == [(3, "a = 1\n")]


def python_blocks_from_text(text: str) -> list[tuple[int, str]]:
    tmp = DOCS.parent / ".pytest_cache" / "fence-sample.md"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    return python_blocks(tmp)


DOC_FILES = sorted(DOCS.glob("*.md"))


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


@pytest.mark.parametrize("path", DOC_FILES, ids=[p.name for p in DOC_FILES])
def test_doc_code_blocks_run(
    path: Path, monkeypatch: pytest.MonkeyPatch, restore_catalog: None
) -> None:
    monkeypatch.delenv("AGENTKIT_MODEL", raising=False)
    namespace: dict[str, object] = {"__name__": f"docs.{path.stem}"}
    for line, code in python_blocks(path):
        compiled = compile(code, f"{path.name}:{line}", "exec")
        try:
            exec(compiled, namespace)
        except BaseException as exc:
            raise AssertionError(f"{path.name}, block at line {line} raised {exc!r}") from exc
