"""jq's tokens for the subset ``jqlite`` parses, and a cursor over them.

Strings with interpolation (``"a\\(.b)c"``) are one ``template`` token; a character no
token starts with raises ``Unsupported`` (the expression is outside the subset). ``tokens``
and ``Cursor`` are what ``jqlite``'s parser, ``pathshape`` and ``location`` share.
"""

from __future__ import annotations

import re

__all__ = ["Cursor", "Unsupported", "paren_end", "tokens"]


class Unsupported(Exception):
    """The expression is outside the subset (compile_program answers None)."""


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"(?:[^"\\]|\\[^(])*")
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)
  | (?P<var>\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<op>\?//|//=|\|=|\+=|-=|\*=|/=|%=|==|!=|<=|>=|//|\.\.|[.|,+\-*/%<>()\[\]{}:;?=])
""", re.VERBOSE)


def tokens(text: str) -> list[tuple[str, str]]:
    out = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None and text[at] == '"':  # a string with interpolation
            end = _string_end(text, at)
            out.append(("template", text[at:end]))
            at = end
            continue
        if match is None:
            raise Unsupported(f"character {text[at]!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append((kind, match.group()))
        at = match.end()
    return out


def _string_end(text: str, at: int) -> int:
    """Index after the string literal opening at ``at``, across ``\\(...)`` parts."""
    at += 1
    try:
        while text[at] != '"':
            if text.startswith("\\(", at):
                at = paren_end(text, at + 2)
            else:
                at += 2 if text[at] == "\\" else 1
    except IndexError:
        raise Unsupported("unterminated string") from None
    return at + 1


def paren_end(text: str, at: int) -> int:
    """Index after the ``)`` closing a ``(`` that ends just before ``at``."""
    depth = 1
    while depth:
        if text[at] == '"':
            at = _string_end(text, at)
            continue
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        at += 1
    return at


class Cursor:
    """A position in ``tokens(text)``: what the parser here and ``pathshape`` share."""

    failure: type[Exception] = Unsupported
    """Raised by ``take`` on an unexpected token."""

    def __init__(self, text: str) -> None:
        self.items = tokens(text)
        self.at = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        at = self.at + offset
        return self.items[at] if at < len(self.items) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if (value is not None and token[1] != value) or token[0] == "end":
            raise self.failure(f"expected {value or 'more'!r}, found {token[1] or 'the end'!r}")
        self.at += 1
        return token

    def at_value(self, *values: str) -> bool:
        kind, value = self.peek()
        return kind in ("op", "ident") and value in values
