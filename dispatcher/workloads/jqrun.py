"""Bounded, batched jq evaluation (libjq through the PyPI ``jq`` binding).

libjq has no timeout, so safety comes from three things: definitions are loop-free
(``jqcheck.check_safety`` rejects ``def``, ``range``, ``recurse``, ``until``, ``..``, ...),
objects are bounded in size and depth before any jq runs, and every expression is capped
at 1000 results. Speed comes from batching: all expressions of a definition are compiled into ONE
program that evaluates each of them with its own ``try`` and returns one list, so an object
is serialized and parsed once per resolve, not once per path.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, overload

import jq
import orjson

from dispatcher.workloads.jqcheck import is_linear
from dispatcher.workloads.jqlite import Program, Run, compile_program, run_one

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_RESULTS",
    "Batch",
    "JqFailure",
    "Limits",
    "ObjectInput",
    "Results",
    "canonical_text",
]

MAX_RESULTS = 1000
"""An expression yielding this many results or more fails (upstream's rule, checked with >=)."""

@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds on the object evaluated: checked before jq runs, so jq always terminates."""

    max_bytes: int = 2 * 1024 * 1024
    max_depth: int = 100


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class JqFailure:
    """One expression of a batch failed (jq error or too many results)."""

    message: str


def canonical_text(obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> str:
    """JSON text of ``obj`` with keys sorted recursively and integral floats as integers.

    This is what every expression sees: gojq's map order (so ``.[]`` and ``keys`` agree) and
    Go's number printing (``1.0`` is ``1``). Raises ValueError when the object is deeper or
    larger than ``limits`` allow, or is not JSON data.
    """
    return ObjectInput(obj, limits=limits).text


class ObjectInput:
    """One object as a definition's paths see it: checked against the limits once; its
    canonical JSON text made only when libjq needs it.

    ``plain`` says the Python value already is what libjq would parse from that text
    (only dicts with string keys, lists, strings, booleans, None and integers within
    2**53; no floats, no YAML timestamps) and is small, so the in-process evaluator
    (``jqlite``) may walk it directly.
    """

    __slots__ = ("_float", "_simple", "_text", "limits", "obj", "plain")

    def __init__(self, obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.obj = obj
        self.limits = limits
        self._text: str | None = None
        if isinstance(obj, dict | list):
            budget = [limits.max_bytes]
            flags = _scan(obj, depth=1, limits=limits, budget=budget)
            # the scan's size is a lower bound (up to ~17x under for JSON text of many
            # small numbers): far below the limit the exact check cannot fail
            self.plain = flags == 0 and limits.max_bytes - budget[0] <= limits.max_bytes // 20
            self._float = bool(flags & _FLOAT)
            self._simple = flags == 0
        else:
            self.plain = False
            self._float = False
            self._simple = False

    @property
    def text(self) -> str:
        """The canonical JSON text (ValueError: not JSON data, or over ``max_bytes``)."""
        if self._text is None:
            text = _ascii_text(self.obj) if self._simple else None
            if text is None:
                obj = _normalize_floats(self.obj) if self._float else self.obj
                try:
                    text = json.dumps(obj, sort_keys=True, separators=(",", ":"),
                                      allow_nan=False, default=_timestamp)
                except (TypeError, ValueError) as error:
                    raise ValueError(f"not JSON data: {error}") from error
            if len(text) > self.limits.max_bytes:
                raise ValueError(f"object is {len(text)} bytes as JSON, more than the "
                                 f"{self.limits.max_bytes} allowed")
            self._text = text
        return self._text


def _ascii_text(obj: Any) -> str | None:
    """``json.dumps(obj, sort_keys=True, separators=(",", ":"))`` byte for byte, by orjson,
    for an object of strings, integers within 2**53, booleans, None, lists and dicts (no
    float, no timestamp: ``_scan`` found none), when that text is ASCII without DEL; else
    None (what ``json`` escapes and orjson does not; a lone surrogate). Several times
    faster; hashes and stamps made from the text stay the same."""
    try:
        raw = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: a key that is not a string, a surrogate
        return None
    # json escapes DEL too (ensure_ascii); orjson writes it as it is
    return raw.decode("ascii") if raw.isascii() and b"\x7f" not in raw else None


_FLOAT = 1
_NOT_PLAIN = 2
_SAFE_INT = 2**53


def _scan(value: Any, *, depth: int, limits: Limits, budget: list[int]) -> int:
    """Depth and size check before serializing; returns the _FLOAT/_NOT_PLAIN flags.

    The size is a lower bound of the JSON length (keys, strings, one byte per other value),
    so an object far over the limit is rejected before ``json.dumps`` spends time on it.
    """
    if depth > limits.max_depth:
        raise ValueError(f"object is nested deeper than {limits.max_depth} levels")
    if type(value) is dict:
        items: Any = value.values()
        used = 2 + 4 * len(value) + sum(map(len, value))
    else:
        items = value
        used = 2 + len(value)
    flags = 0
    for item in items:
        kind = type(item)
        if kind is str:
            used += len(item)
        elif kind is dict or kind is list:
            flags |= _scan(item, depth=depth + 1, limits=limits, budget=budget)
        elif kind is int:
            if not -_SAFE_INT < item < _SAFE_INT:
                flags |= _NOT_PLAIN
        elif kind is float:
            flags |= _FLOAT | _NOT_PLAIN
        elif item is not None and kind is not bool:
            flags |= _NOT_PLAIN
    budget[0] -= used
    if budget[0] < 0:
        raise ValueError(f"object is more than {limits.max_bytes} bytes as JSON")
    return flags


def _timestamp(value: Any) -> str:
    """YAML turns unquoted timestamps into datetimes; Kubernetes means RFC 3339 strings."""
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return moment.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        day: str = value.isoformat()
        return day
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _normalize_floats(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, dict):
        return {key: _normalize_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalize_floats(item) for item in value]
    return value


class Batch:
    """Many jq expressions compiled into one program; ``run`` gives one result per expression.

    Each result is the list of that expression's outputs, or a ``JqFailure`` (a jq error or
    ``MAX_RESULTS`` outputs or more). One expression failing never affects the others.
    """

    def __init__(self, expressions: Sequence[str], *, lazy: bool = False) -> None:
        self.expressions = tuple(expressions)
        self._compiled = False
        self._program: Any = None
        self._alone: dict[int, Batch] = {}
        if not lazy:
            self._compile()

    def _compile(self) -> None:
        self._compiled = True
        parts = [
            f"(try ([{expression}\n]) catch {{\"jqerror\": .}})" if is_linear(expression)
            else f"(try ([limit({MAX_RESULTS}; ({expression}\n))]) catch {{\"jqerror\": .}})"
            for expression in self.expressions
        ]
        self._program = jq.compile("[" + ",\n".join(parts) + "]") if parts else None

    @cached_property
    def _fast(self) -> tuple[Program, ...] | None:
        """jqlite's programs when every expression is in its subset; compiled on first use,
        so text-only callers (the bounded workers) never pay for them."""
        programs = [compile_program(expression) for expression in self.expressions]
        fast = tuple(p for p in programs if p is not None)
        return fast if len(fast) == len(programs) else None

    @property
    def in_process(self) -> bool:
        """Whether every expression is in ``jqlite``'s subset (plain objects skip libjq)."""
        return self._fast is not None

    def evaluate(self, given: ObjectInput) -> Sequence[list[Any] | JqFailure]:
        """Every expression on ``given``: walked in Python when the batch and the object
        allow it, else by libjq on its text (the whole batch, at once).

        Walked, each expression runs when its result is first read (``Results``): an
        object the definition does not fit fails at the first path its reader needs,
        and the others never run, as the Go library stops at its first error. A jq error
        ``jqlite`` knows libjq's message of (iterating ``null``) is that failure; an
        expression it gives up on runs alone in libjq (compiled on first use and kept).
        """
        if given.plain and self._fast is not None:
            return Results(self, given)
        return self.run(given.text)

    def _one(self, slot: int) -> Batch:
        """The batch of expression ``slot`` alone (libjq, compiled on first use)."""
        alone = self._alone.get(slot)
        if alone is None:
            alone = self._alone[slot] = Batch([self.expressions[slot]])
        return alone

    def run(self, text: str) -> list[list[Any] | JqFailure]:
        """Evaluate every expression on the JSON ``text`` (from ``canonical_text``)."""
        if not self._compiled:
            self._compile()
        if self._program is None:
            return []
        try:
            raw = self._program.input_text(text).first()
        except ValueError as error:  # only for input that is not JSON
            message = " ".join(str(error).split())
            return [JqFailure(message) for _ in self.expressions]
        out: list[list[Any] | JqFailure] = []
        for item in raw:
            if isinstance(item, list):
                if len(item) >= MAX_RESULTS:
                    out.append(JqFailure(
                        f"query results exceed the allowed number {MAX_RESULTS}"))
                else:
                    out.append(item)
            else:
                out.append(JqFailure(_error_text(item)))
        return out


_UNREAD: Any = object()


class Results(Sequence[list[Any] | JqFailure]):
    """A batch's results on one plain object, each computed when first read (a slice is
    a view of the same results); ``jqlite`` walks the expression, libjq runs it alone
    where ``jqlite`` gives up. Every expression is independent of the others, so the
    order they are read in changes no result (the binding memo and step budget they
    share are exact in any order: a spent budget hands the rest to libjq)."""

    __slots__ = ("_batch", "_found", "_given", "_run", "_start", "_stop")

    def __init__(self, batch: Batch, given: ObjectInput, *, start: int = 0,
                 stop: int | None = None, found: list[Any] | None = None,
                 run: Run | None = None) -> None:
        self._batch = batch
        self._given = given
        self._start = start
        self._stop = len(batch.expressions) if stop is None else stop
        self._found = found if found is not None else [_UNREAD] * len(batch.expressions)
        self._run = run if run is not None else Run()

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> list[Any] | JqFailure: ...

    @overload
    def __getitem__(self, index: slice) -> Results: ...

    def __getitem__(self, index: int | slice) -> list[Any] | JqFailure | Results:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("a view of results has no step")
            return Results(self._batch, self._given, start=self._start + start,
                           stop=self._start + max(start, stop), found=self._found,
                           run=self._run)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        slot = self._start + index
        value = self._found[slot]
        if value is _UNREAD:
            value = self._found[slot] = self._read(slot)
        return value  # type: ignore[no-any-return]

    def _read(self, slot: int) -> list[Any] | JqFailure:
        batch = self._batch
        programs = batch._fast
        assert programs is not None
        got = run_one(programs[slot], self._given.obj, MAX_RESULTS, self._run)
        if got is None:
            return batch._one(slot).run(self._given.text)[0]
        return JqFailure(got) if isinstance(got, str) else got


def _error_text(item: Mapping[str, Any] | Any) -> str:
    message = item.get("jqerror") if isinstance(item, Mapping) else item
    return message if isinstance(message, str) else json.dumps(message)
