"""What the page renders from what a model or a tool wrote: Markdown made safe, long text folded.

An assistant's Markdown is parsed by markdown-it-py with raw HTML off (a ``<script>`` a model
wrote stays text), then cleaned by nh3 (the Rust ``ammonia`` sanitiser) down to the tags and
attributes plain prose needs: links keep only ``http``, ``https`` and ``mailto`` targets and get
``rel="noopener noreferrer nofollow"``, and images are dropped (a model's image link would load a
third party's pixel). Two independent layers, so a gap in one is not a hole.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

FOLD_CHARS = 1500
"""Text longer than this (a tool's result, its arguments) is folded: a preview shows, the rest
opens on a click."""

PREVIEW_CHARS = 600
"""How much of a folded text shows before it is opened."""

SHOWN_CHARS = 20_000
"""At most this much of a folded text is put in the page; the session keeps all of it."""

_TAGS = {
    "p", "br", "hr", "strong", "em", "b", "i", "s", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "a",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
_SCHEMES = {"http", "https", "mailto"}


class _Parser:
    """The Markdown parser, made at the first use (markdown-it-py and nh3 load with the page)."""

    def __init__(self) -> None:
        from markdown_it import MarkdownIt

        options = {"html": False, "linkify": False, "typographer": False}
        self.md = MarkdownIt("commonmark", options).enable(["table", "strikethrough"])


_parser: _Parser | None = None


def markdown(text: str) -> Markup:
    """``text`` (Markdown a model wrote) as safe HTML for the page."""
    import nh3

    global _parser
    if _parser is None:
        _parser = _Parser()
    html = _parser.md.render(text)
    clean = nh3.clean(html, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes=_SCHEMES,
                      link_rel="noopener noreferrer nofollow")  # fmt: skip
    return Markup(clean)  # noqa: S704 - sanitised just above


@dataclass(frozen=True)
class Folded:
    """A long text as the page shows it: a ``preview``, its ``rest`` (up to
    :data:`SHOWN_CHARS` in all), how many characters are ``hidden`` beyond that, and its
    size in words a person reads (``"120,000 characters, 117.2 KB"``)."""

    preview: str
    rest: str
    hidden: int
    size: str


def fold(text: str) -> Folded | None:
    """``text`` folded, or ``None`` when it is short enough to show whole."""
    if len(text) <= FOLD_CHARS:
        return None
    shown = text[:SHOWN_CHARS]
    return Folded(shown[:PREVIEW_CHARS], shown[PREVIEW_CHARS:], len(text) - len(shown),
                  size_text(text))  # fmt: skip


def size_text(text: str) -> str:
    """How long ``text`` is, as a person reads it."""
    size = len(text.encode("utf-8"))
    unit = f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / 1048576:.1f} MB"
    return f"{len(text):,} characters, {unit}"
