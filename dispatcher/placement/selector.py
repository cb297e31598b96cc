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


def parse_selector(text: str) -> Selector:
    """Parse ``text``; raises SelectorError for invalid input (never guesses)."""
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0

    def fail(why: str) -> SelectorError:
        return SelectorError(f"selector {text!r}: {why}")

    def key_at(j: int) -> str:
        if j >= len(tokens) or not _KEY_RE.match(tokens[j]):
            got = tokens[j] if j < len(tokens) else "end of input"
            raise fail(f"expected a label key, got {got!r}")
        return tokens[j]

    def value_ok(value: str) -> str:
        if len(value) > 63 or not _VALUE.match(value):
            raise fail(f"invalid label value {value!r}")
        return value

    while i < len(tokens):
        if tokens[i] == "!":
            requirements.append(Requirement(key_at(i + 1), "!"))
            i += 2
        else:
            key = key_at(i)
            op = tokens[i + 1] if i + 1 < len(tokens) else ","
            if op == ",":
                requirements.append(Requirement(key, "exists"))
                i += 1
            elif op in ("=", "==", "!="):
                value = ""
                if i + 2 < len(tokens) and tokens[i + 2] not in (",", "(", ")"):
                    value = tokens[i + 2]
                    i += 1
                requirements.append(Requirement(key, "!=" if op == "!=" else "=",
                                                (value_ok(value),)))
                i += 2
            elif op in (">", "<"):
                if i + 2 >= len(tokens) or not tokens[i + 2].lstrip("-").isdigit():
                    raise fail(f"{key}{op} needs an integer")
                requirements.append(Requirement(key, "gt" if op == ">" else "lt",
                                                (tokens[i + 2],)))
                i += 3
            elif op in ("in", "notin"):
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise fail(f"'{key} {op}' needs a parenthesised value list")
                j, values = i + 3, list[str]()
                while True:
                    if j >= len(tokens):
                        raise fail("unclosed '('")
                    if tokens[j] == ")":
                        if not values and tokens[j - 1] == "(":
                            raise fail(f"'{key} {op} ()' needs at least one value")
                        break
                    if tokens[j] == ",":
                        j += 1
                        continue
                    values.append(value_ok(tokens[j]))
                    j += 1
                requirements.append(Requirement(key, "in" if op == "in" else "notin",
                                                tuple(sorted(set(values)))))
                i = j + 1
            else:
                raise fail(f"unexpected {op!r} after key {key!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise fail(f"expected ',' between requirements, got {tokens[i]!r}")
            i += 1
            if i == len(tokens):
                raise fail("trailing ','")
    return Selector(tuple(requirements))
