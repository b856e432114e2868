"""The edit a failed edit meant: a small model writes ``old_text`` from memory ("log level =
info" for a file whose line is ``level = info``), and repeats the same failing edit however
often the file is shown to it. :func:`suggested_edit` finds the line it meant and makes the
same change to it, so the hint can say the exact edit to make."""

from __future__ import annotations

import difflib

MAX_SUGGEST_LINES = 5_000
"""A file with more lines gets no suggestion (the search would cost more than it helps)."""
MIN_LIKENESS = 0.6
"""How alike (difflib's ratio, 0 to 1) the line must be to the model's ``old_text``."""


def suggested_edit(text: str, old: str, new: str) -> tuple[str, str] | None:
    """The ``(old_text, new_text)`` a failed one-line edit of ``old`` to ``new`` meant in a
    file holding ``text``: the one line most like ``old``, with the part ``old`` and ``new``
    differ in changed the same way; ``None`` when no line is alike enough, two are equally,
    the change's old part is not in that line once, or the edit spans lines."""
    if "\n" in old.strip() or "\n" in new.strip() or not old.strip():
        return None
    lines = text.splitlines()
    if len(lines) > MAX_SUGGEST_LINES:
        return None
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(old.strip(), stripped, n=2, cutoff=MIN_LIKENESS)
    if not close or (len(close) == 2 and close[0] == close[1]):
        return None
    line = stripped[stripped.index(close[0])]
    removed, added = _change(old.strip(), new.strip())
    if not removed or line.count(removed) != 1:
        return None
    return line, line.replace(removed, added)


def _change(old: str, new: str) -> tuple[str, str]:
    """The part of ``old`` that ``new`` replaces, and what replaces it (their common start and
    end left out)."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return old[start : len(old) - end], new[start : len(new) - end]
