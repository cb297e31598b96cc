"""Bounded, batched jq evaluation (libjq through the PyPI ``jq`` binding).

libjq has no timeout, so safety comes from three things: definitions are loop-free (the
safety check rejects ``def``, ``range``, ``recurse``, ``until``, ``..``, ...), objects are
bounded in size and depth before any jq runs, and every expression is capped at 1000
results. Speed comes from batching: all expressions of a definition are compiled into ONE
program that evaluates each of them with its own ``try`` and returns one list, so an object
is serialized and parsed once per resolve, not once per path.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, overload

import jq

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
    "check_safety",
    "compile_error",
    "compile_errors",
    "folded_size",
    "is_balanced",
    "is_linear",
    "jq_message",
]

MAX_RESULTS = 1000
"""An expression yielding this many results or more fails (upstream's rule, checked with >=)."""

_FORBIDDEN_NAMES = frozenset({
    "del", "range", "paths", "recurse", "walk", "repeat", "until", "while", "def",
    "env", "$ENV", "input", "inputs", "debug", "stderr", "input_filename", "$__loc__",
    "halt", "halt_error", "now", "import", "include", "$__prog_args", "input_line_number",
    "get_search_list", "modulemeta", "get_jq_origin", "get_prog_origin", "combinations",
    "recurse_down", "$__prog_name",
    "keys_unsorted",  # not in gojq (upstream's engine); with sorted input it equals keys
})
_ASSIGNMENTS = ("|=", "+=", "-=", "*=", "/=", "%=", "//=")
_WORD = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")


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


def check_safety(expression: str) -> list[str]:
    """Problems with ``expression``: forbidden builtins/operators outside string literals.

    Stricter than upstream (which does not look inside parentheses or constructors): every
    code token is checked, including code inside string interpolation ``"\\(...)"``.
    """
    problems: list[str] = []
    folded = folded_size(expression)
    if folded > MAX_FOLDED_BYTES:
        problems.append(f"string repetition by literal counts can build {folded} bytes while "
                        f"compiling (libjq folds constants), more than {MAX_FOLDED_BYTES}")
    for token in _code_tokens(expression):
        if token in _FORBIDDEN_NAMES:
            problems.append(f"{token!r} is not allowed in definitions")
        elif token == "..":
            problems.append("'..' (recursive descent) is not allowed in definitions")
        elif token in _ASSIGNMENTS or token == "=":
            problems.append(f"assignment operator {token!r} is not allowed in definitions")
    return problems


MAX_FOLDED_BYTES = 1 << 20
_COUNT = r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"
_TIMES_LITERAL = re.compile(r"\*[\s(]*" + _COUNT + r"|" + _COUNT + r"[\s)]*\*")


def folded_size(expression: str) -> int:
    """An upper bound of the string libjq may build while *compiling* ``expression``.

    libjq folds constant operations at compile time, so ``"x" * 1000000000`` allocates a
    gigabyte inside ``jq.compile`` (at load, in whatever process loads the definition),
    before any bound on evaluation applies. Only ``string * number`` with both literal
    grows (chained: ``("x" * 1000) * 1000``), so the total length of the string literals
    times every number literal next to a ``*`` bounds what folding can build. Exact for
    the one folding that explodes; it may over-count (a ``.a * 100000`` elsewhere), which
    only matters with a string literal and a product over a million.
    """
    strings = _STRING.findall(expression)
    if not strings or "*" not in expression:
        return 0
    code = _STRING.sub('""', expression)
    size = sum(len(s) - 2 for s in strings) or 1
    for match in _TIMES_LITERAL.finditer(code):
        count = float(match.group(1) or match.group(2))
        size = int(min(size * max(count, 1.0), 2.0**62))
    return size if size > 1 else 0


def _code_tokens(text: str) -> list[str]:
    """Identifiers and operators of ``text``, skipping string literals and comments."""
    tokens: list[str] = []
    stack: list[int] = []  # paren depth at each open string interpolation
    depth = 0
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\" and i + 1 < n and text[i + 1] == "(":
                stack.append(depth)
                depth += 1
                in_string = False
                i += 2
            elif ch == "\\":
                i += 2
            elif ch == '"':
                in_string = False
                i += 1
            else:
                i += 1
            continue
        if ch == '"':
            in_string = True
            i += 1
        elif ch == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif ch == "(":
            depth += 1
            i += 1
        elif ch == ")":
            depth -= 1
            if stack and depth == stack[-1]:
                stack.pop()
                in_string = True
            i += 1
        elif ch == "." and i + 1 < n and text[i + 1] == ".":
            tokens.append("..")
            i += 2
        elif ch == ".":
            # `.name` is a field access, never a builtin call: skip the name.
            match = _WORD.match(text, i + 1)
            i = match.end() if match and not text[i + 1].startswith("$") else i + 1
        elif ch == "$" or ch.isalpha() or ch == "_":
            match = _WORD.match(text, i)
            word = match.group(0) if match else ch
            tokens.append(word)
            i += len(word)
        elif ch in "|+-*/%=<>!":
            op = _operator_at(text, i)
            tokens.append(op)
            i += len(op)
        else:
            i += 1
    return tokens


def _operator_at(text: str, i: int) -> str:
    for op in ("//=", "|=", "+=", "-=", "*=", "/=", "%=", "==", "!=", "<=", ">=", "//"):
        if text.startswith(op, i):
            return op
    return text[i]


_GENERATORS = frozenset({
    "as", "reduce", "foreach", "label", "limit", "first", "last", "nth", "until", "while",
    "repeat", "range", "recurse", "paths", "leaf_paths", "path", "splits", "scan", "match",
    "capture", "tostream", "fromstream", "combinations", "input", "inputs",
    "env", "$ENV", "def",
})
_ITERATOR = re.compile(r"\[\s*\]")


def is_linear(expression: str) -> bool:
    """Whether ``expression`` yields at most one result per item of one collection.

    True for the common path shape: at most one ``[]`` iterator, no ``,`` and no builtin
    that generates or binds. Such an expression cannot multiply results (no cross
    product), so it needs no ``limit`` (which costs about as much as the path itself);
    every other expression is evaluated under ``limit(1000; ...)``.
    """
    if "\\(" in expression or "#" in expression:
        return False
    code = _STRING.sub('""', expression)
    if "," in code or len(_ITERATOR.findall(code)) > 1:
        return False
    return not any(token in _GENERATORS for token in _code_tokens(code))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def is_balanced(expression: str) -> bool:
    """Brackets balanced outside plain string literals, and no comments or interpolation.

    Such an expression parses the same alone and as ``(expression)`` inside a larger
    program, so many can be compile-checked together in one libjq compile.
    """
    if "\\(" in expression or "#" in expression:
        return False
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in _STRING.sub("S", expression):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
        elif ch == '"':
            return False  # an unterminated string
    return not stack


_COMPILED_OK: set[str] = set()


def compile_errors(expressions: Sequence[str]) -> dict[str, str]:
    """libjq compile errors by expression (absent: compiles), checking many at once.

    Balanced expressions are compiled together first (one libjq compile, a few ms); only
    when that fails, or for the others, each is compiled alone to name the culprit.
    """
    todo = [e for e in dict.fromkeys(expressions) if e not in _COMPILED_OK]
    together = [e for e in todo if is_balanced(e)]
    if together:
        try:
            jq.compile("[" + ",".join(f"({e}\n)" for e in together) + "]")
        except ValueError:
            pass
        else:
            _COMPILED_OK.update(together)
            todo = [e for e in todo if e not in _COMPILED_OK]
    errors: dict[str, str] = {}
    for expression in todo:
        error = compile_error(expression)
        if error is None:
            _COMPILED_OK.add(expression)
        else:
            errors[expression] = error
    return errors


def compile_error(expression: str) -> str | None:
    """libjq's compile error for ``expression`` alone, or None when it compiles."""
    try:
        jq.compile(expression)
    except ValueError as error:
        return jq_message(str(error))
    return None


def jq_message(raw: str) -> str:
    """libjq's compile report as one line: each ``jq: error: ...`` joined by ``; ``.

    libjq writes every error on its own line followed by the program echoed with a caret
    under the culprit and a ``jq: N compile errors`` trailer; flattened naively, the errors
    run together and the expression is repeated once per error. The caller already names
    the expression, so only the errors (with their line and column) are kept.
    """
    errors = [line.strip().rstrip(":") for line in raw.splitlines()
              if line.startswith("jq: error")]
    return "; ".join(errors) if errors else " ".join(raw.split())


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

    __slots__ = ("_float", "_text", "limits", "obj", "plain")

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
        else:
            self.plain = False
            self._float = False

    @property
    def text(self) -> str:
        """The canonical JSON text (ValueError: not JSON data, or over ``max_bytes``)."""
        if self._text is None:
            obj = _normalize_floats(self.obj) if self._float else self.obj
            try:
                text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False,
                                  default=_timestamp)
            except (TypeError, ValueError) as error:
                raise ValueError(f"not JSON data: {error}") from error
            if len(text) > self.limits.max_bytes:
                raise ValueError(f"object is {len(text)} bytes as JSON, more than the "
                                 f"{self.limits.max_bytes} allowed")
            self._text = text
        return self._text


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
