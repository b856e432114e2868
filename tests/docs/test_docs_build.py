"""The documentation site builds strictly (``mkdocs build --strict``): every page in the nav,
every link, anchor and API reference resolves. The browser reads the built pages in
``test_docs_site.py``; this test needs no browser."""

from __future__ import annotations

import importlib.util

import pytest

from tests.docs.site_build import built_site

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        importlib.util.find_spec("mkdocs") is None,
        reason="the docs extra is not installed (pip install -e '.[docs]')",
    ),
]


def test_the_site_builds_strictly(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder, code, stderr = built_site(tmp_path_factory)
    assert code == 0, stderr
    assert (folder / "index.html").is_file() and (folder / "reference").is_dir()
