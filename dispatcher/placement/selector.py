"""Kubernetes label selectors in their string form, as ``kubectl get -l`` takes them.

Used for the ``dispatcher.io/cluster-selector`` annotation over MemberCluster labels:
``region=eu``, ``tier!=batch``, ``zone in (a,b)``, ``gpu notin (t4)``, ``fast``, ``!legacy``,
``size>4``; requirements are ANDed. Semantics follow apimachinery ``labels.Parse``: ``!=`` and
``notin`` also match objects without the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Requirement", "Selector", "SelectorError", "parse_selector"]

Operator = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_KEY_RE = re.compile(rf"^{_KEY}$")
_TOKEN = re.compile(r"\s*(\(|\)|,|==|!=|=|!|>|<|[^\s(),=!<>]+)")


class SelectorError(ValueError):
    """The selector string is not valid; the message quotes it and says where."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ANDed term."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "exists":
            return value is not None
        if self.operator == "!":
            return value is None
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        if self.operator in ("!=", "notin"):
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.operator == "gt" else number < bound

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return f"!{self.key}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        symbol = {"gt": ">", "lt": "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    """ANDed requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def failing(self, labels: Mapping[str, str]) -> tuple[Requirement, ...]:
        """The requirements ``labels`` do not meet (for explanations)."""
        return tuple(r for r in self.requirements if not r.matches(labels))

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:  # pragma: no cover - the pattern matches any non-space
            raise SelectorError(f"selector {text!r}: cannot read at position {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


class _Parser:
    """A recursive-descent reading of one selector's tokens (``parse_selector``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)

    def fail(self, why: str) -> SelectorError:
        return SelectorError(f"selector {self.text!r}: {why}")

    def token(self, j: int) -> str | None:
        return self.tokens[j] if j < len(self.tokens) else None

    def key_at(self, j: int) -> str:
        token = self.token(j)
        if token is None or not _KEY_RE.match(token):
            raise self.fail(f"expected a label key, got {token or 'end of input'!r}")
        return token

    def value_ok(self, value: str) -> str:
        if len(value) > 63 or not _VALUE.match(value):
            raise self.fail(f"invalid label value {value!r}")
        return value

    def requirement(self, i: int) -> tuple[Requirement, int]:
        """The requirement starting at token ``i`` and the index after it."""
        if self.tokens[i] == "!":
            return Requirement(self.key_at(i + 1), "!"), i + 2
        key = self.key_at(i)
        op = self.token(i + 1) or ","
        if op == ",":
            return Requirement(key, "exists"), i + 1
        if op in ("=", "==", "!="):
            value = self.token(i + 2)
            if value is None or value in (",", "(", ")"):
                return Requirement(key, "!=" if op == "!=" else "=", (self.value_ok(""),)), i + 2
            return (Requirement(key, "!=" if op == "!=" else "=", (self.value_ok(value),)),
                    i + 3)
        if op in (">", "<"):
            bound = self.token(i + 2)
            if bound is None or not bound.lstrip("-").isdigit():
                raise self.fail(f"{key}{op} needs an integer")
            return Requirement(key, "gt" if op == ">" else "lt", (bound,)), i + 3
        if op in ("in", "notin"):
            if self.token(i + 2) != "(":
                raise self.fail(f"'{key} {op}' needs a parenthesised value list")
            values, end = self.values(i + 3, f"'{key} {op} ()'")
            return Requirement(key, "in" if op == "in" else "notin",
                               tuple(sorted(set(values)))), end
        raise self.fail(f"unexpected {op!r} after key {key!r}")

    def values(self, j: int, what: str) -> tuple[list[str], int]:
        """The values of a list opened just before ``j`` and the index after its ')'."""
        values: list[str] = []
        while True:
            token = self.token(j)
            if token is None:
                raise self.fail("unclosed '('")
            if token == ")":
                if not values and self.tokens[j - 1] == "(":
                    raise self.fail(f"{what} needs at least one value")
                return values, j + 1
            if token != ",":
                values.append(self.value_ok(token))
            j += 1

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        i = 0
        while i < len(self.tokens):
            requirement, i = self.requirement(i)
            requirements.append(requirement)
            if i < len(self.tokens):
                if self.tokens[i] != ",":
                    raise self.fail(f"expected ',' between requirements, got "
                                    f"{self.tokens[i]!r}")
                i += 1
                if i == len(self.tokens):
                    raise self.fail("trailing ','")
        return Selector(tuple(requirements))


def parse_selector(text: str) -> Selector:
    """Parse ``text``; raises SelectorError for invalid input (never guesses)."""
    return _Parser(text).parse()
