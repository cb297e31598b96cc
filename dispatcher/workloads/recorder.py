"""Typed reading of a definition document that records problems instead of raising.

``Recorder`` holds the primitives (mapping/string/list/jq path with field paths) that
``StatusReader`` and ``DocReader`` build on; every problem becomes an ``Issue`` so a lint
run reports everything wrong with a file at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from dispatcher.workloads.errors import Issue
from dispatcher.workloads.jqcheck import check_safety, compile_errors
from dispatcher.workloads.model import Expr

__all__ = ["Recorder"]


@lru_cache(maxsize=4096)
def _safety(text: str) -> tuple[str, ...]:
    """Safety problems of one expression (cached: catalogs repeat paths)."""
    return tuple(check_safety(text))


def _quoted(text: str) -> str:
    """An expression on one line: a lint message is one line per problem (block scalars
    such as ``expression: |`` carry newlines, which would split the message)."""
    return "'" + text.strip().replace("\n", "\\n") + "'"


class Recorder:
    """Issue recording and typed accessors shared by the definition readers."""

    def __init__(self, *, source: str, document: Any, index: int) -> None:
        self.source = source
        self.document = document
        self.index = index
        self.issues: list[Issue] = []
        self.name = ""
        self._texts: dict[str, list[str]] = {"demand": [], "status": []}
        self._pending: list[tuple[str, str]] = []

    # -- recording -------------------------------------------------------------------------

    def _issue(self, field: str, message: str) -> None:
        self.issues.append(Issue(source=self.source, definition=self.name, field=field,
                                 message=message))

    def _mapping(self, value: Any, field: str, *, required: bool = False,
                 allowed: frozenset[str] | None = None) -> Mapping[str, Any] | None:
        if value is None:
            if required:
                self._issue(field, "is required")
            return None
        if not isinstance(value, Mapping):
            self._issue(field, f"must be a mapping, not {type(value).__name__}")
            return None
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self._issue(f"{field}.{key}", "unknown field")
        return value

    def _string(self, value: Any, field: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                self._issue(field, "is required")
            return None
        if not isinstance(value, str):
            self._issue(field, f"must be a string, not {type(value).__name__}")
            return None
        if required and not value:
            self._issue(field, "must not be empty")
        text: str = value
        return text

    def _list(self, value: Any, field: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self._issue(field, f"must be a list, not {type(value).__name__}")
            return []
        return value

    def _check_jq(self, text: str, field: str) -> None:
        """Safety now; compiling is batched at the end of ``build`` (``_compile_checks``)."""
        problems = _safety(text)
        for problem in problems:
            self._issue(field, f"failed to parse JQ expression {_quoted(text)}: {problem}")
        if not problems:  # never compile what the check refused (libjq folds constants)
            self._pending.append((text, field))

    def _compile_checks(self) -> None:
        errors = compile_errors([text for text, _ in self._pending])
        for text, field in self._pending:
            if text in errors:
                self._issue(field, f"failed to parse JQ expression {_quoted(text)}: "
                                   f"{errors[text]}")

    def _expr(self, value: Any, field: str, *,
              section: Literal["demand", "status"] | None = "demand") -> Expr | None:
        """A jq path: checked, and (when ``section`` is set) given a slot in that batch."""
        text = self._string(value, field)
        if not text:
            return None  # upstream: an empty path is "not defined"
        self._check_jq(text, field)
        if section is None:
            return Expr(text=text, field=field, slot=-1)
        slots = self._texts[section]
        slots.append(text)
        return Expr(text=text, field=field, slot=len(slots) - 1, section=section)

    def _pod_side(self, value: Any, field: str) -> None:
        """A path evaluated against Pods (selectors, gang keys): only checked."""
        self._expr(value, field, section=None)
