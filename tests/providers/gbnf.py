"""A small matcher for llama.cpp grammars (GBNF), so that tests can say which replies a grammar
accepts instead of comparing its text.

It knows the subset agentkit writes: one rule per line, literals, character classes (ranges,
``^``, ``\\xNN`` and the usual escapes), ``.``, groups, ``|``, ``?``, ``*`` and ``+``. Matching
tries every way through the grammar (memoised by rule and position), which is quick for the
short replies tests use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "]": "]", "[": "[", "-": "-", "^": "^"}


@dataclass(frozen=True)
class Node:
    """One piece of a rule: ``kind`` is lit, class, any, ref, seq, alt or a repeat (?, *, +)."""

    kind: str
    value: object = None
    parts: tuple[Node, ...] = ()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def peek(self) -> str:
        self.skip()
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t":
            self.at += 1

    def alt(self) -> Node:
        options = [self.seq()]
        while self.peek() == "|":
            self.at += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else Node("alt", parts=tuple(options))

    def seq(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            item = self.atom()
            while self.peek() in ("?", "*", "+"):
                item = Node(self.text[self.at], parts=(item,))
                self.at += 1
            items.append(item)
        return items[0] if len(items) == 1 else Node("seq", parts=tuple(items))

    def char(self) -> str:
        c = self.text[self.at]
        self.at += 1
        if c != "\\":
            return c
        c = self.text[self.at]
        self.at += 1
        if c == "x":
            self.at += 2
            return chr(int(self.text[self.at - 2 : self.at], 16))
        if c == "u":
            self.at += 4
            return chr(int(self.text[self.at - 4 : self.at], 16))
        return _ESCAPES[c]

    def atom(self) -> Node:
        c = self.peek()
        if c == '"':
            self.at += 1
            out = []
            while self.text[self.at] != '"':
                out.append(self.char())
            self.at += 1
            return Node("lit", "".join(out))
        if c == "[":
            self.at += 1
            negated = self.text[self.at] == "^"
            self.at += negated
            ranges = []
            while self.text[self.at] != "]":
                low = self.char()
                high = low
                if self.text[self.at] == "-" and self.text[self.at + 1] != "]":
                    self.at += 1
                    high = self.char()
                ranges.append((low, high))
            self.at += 1
            return Node("class", (negated, tuple(ranges)))
        if c == ".":
            self.at += 1
            return Node("any")
        if c == "(":
            self.at += 1
            inner = self.alt()
            assert self.peek() == ")", f"unclosed group at {self.at}: {self.text}"
            self.at += 1
            return inner
        start = self.at
        while self.at < len(self.text) and (self.text[self.at].isalnum() or self.text[self.at] == "-"):
            self.at += 1
        assert self.at > start, f"unexpected {c!r} at {self.at}: {self.text}"
        return Node("ref", self.text[start : self.at])


def parse(grammar: str) -> dict[str, Node]:
    """The rules of ``grammar`` by name."""
    rules = {}
    for line in grammar.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, body = line.split("::=", 1)
            rules[name.strip()] = _Parser(body).alt()
    return rules


def matches(grammar: str, text: str) -> bool:
    """Whether ``text`` is a whole reply that ``grammar`` (from its ``root``) allows."""
    rules = parse(grammar)
    undefined = {n.value for n in _walk(rules.values()) if n.kind == "ref"} - rules.keys()
    assert not undefined, f"rules used but not defined: {undefined}"

    @cache
    def ends(node: Node, at: int) -> frozenset[int]:
        kind = node.kind
        if kind == "lit":
            word = str(node.value)
            return frozenset({at + len(word)}) if text.startswith(word, at) else frozenset()
        if kind in ("class", "any"):
            if at >= len(text):
                return frozenset()
            if kind == "any":
                return frozenset({at + 1})
            negated, ranges = node.value  # type: ignore[misc]
            inside = any(low <= text[at] <= high for low, high in ranges)
            return frozenset({at + 1}) if inside != negated else frozenset()
        if kind == "ref":
            return ends(rules[str(node.value)], at)
        if kind == "alt":
            return frozenset().union(*(ends(p, at) for p in node.parts))
        if kind == "seq":
            here = frozenset({at})
            for part in node.parts:
                here = frozenset().union(*(ends(part, h) for h in here)) if here else here
            return here
        once = ends(node.parts[0], at)
        if kind == "?":
            return once | {at}
        seen, frontier = set(once), set(once)
        while frontier:
            frontier = {e for f in frontier for e in ends(node.parts[0], f) if e not in seen}
            seen |= frontier
        return frozenset(seen | ({at} if kind == "*" else set()))

    return len(text) in ends(rules["root"], 0)


def _walk(nodes: object) -> list[Node]:
    out: list[Node] = []
    stack = list(nodes)  # type: ignore[call-overload]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.parts)
    return out
