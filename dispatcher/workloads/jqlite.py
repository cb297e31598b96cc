"""The common subset of jq, evaluated on Python values without libjq.

A definition's paths are mostly plain (``.spec.replicas // 1``,
``.spec.replicatedJobs[].template``) or small programs over them (``if``, ``as $x``,
``select``, ``map``, comparisons). Handing libjq the object as JSON text, letting it parse
and evaluate, and converting the results back costs more than walking the dict already in
memory. ``compile_program`` turns an expression of that subset into a Python function;
anything outside it (``reduce``, regexes, string interpolation, floats, division, ...)
compiles to None and the whole batch stays with libjq.

The evaluator is exact or it gives up: it only runs on objects of plain JSON values (no
floats, integers within 2**53, ``jqrun.inspect``), iterates objects in sorted key order as
libjq does on the canonical text, and raises ``GiveUp`` for any case it does not model
(a jq error, a value type an operator does not take here, too much work); the caller then
runs libjq, which also writes jq's own error message. ``tests/unit/workloads/test_jqlite.py``
checks it against libjq on every catalog path and on generated expressions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

__all__ = ["Cursor", "GiveUp", "JqError", "Program", "Unsupported", "compile_program",
           "run_programs", "tokens"]

Env = dict[str, Any]
Node = Callable[[Any, Env, "_Run"], list[Any]]
Program = Callable[[Any, "_Run"], list[Any]]
Step = Callable[[Any, Any, Env, "_Run"], list[Any]]
"""One suffix applied to one base value: (base, input, env, run) -> outputs."""

_SAFE_INT = 2**53
_STEP_BUDGET = 200_000  # values produced per object before handing over to libjq
_MEMO_TOKENS = 8  # a binding source of this many tokens or more is memoised


class GiveUp(Exception):
    """The evaluator does not model this case; libjq must evaluate the object."""


class JqError(GiveUp):
    """A case where libjq raises an error: ``?`` catches it, anything else hands over."""


class _Run:
    """Per-object evaluation state: the step budget and the memo of closed subexpressions
    evaluated on the root (shared by every path of a batch)."""

    __slots__ = ("memo", "root", "steps")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.steps = _STEP_BUDGET
        self.memo: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...], list[Any]]] = {}

    def spend(self, count: int) -> None:
        self.steps -= count
        if self.steps < 0:
            raise GiveUp("step budget")


def run_programs(programs: Sequence[Program], root: Any, limit: int) -> list[list[Any]]:
    """Every program's outputs on ``root``; GiveUp when any of them needs libjq (an error,
    ``limit`` outputs or more)."""
    run = _Run(root)
    out = []
    for program in programs:
        values = program(root, run)
        if len(values) >= limit:
            raise GiveUp("too many results")
        out.append(list(values))  # never the object's own list: callers may keep it
    return out


# -- values --------------------------------------------------------------------------------

def _truthy(value: Any) -> bool:
    return value is not None and value is not False


def _rank(value: Any) -> int:
    if value is None:
        return 0
    if value is False:
        return 1
    if value is True:
        return 2
    kind = type(value)
    if kind is int:
        return 3
    if kind is str:
        return 4
    if kind is list:
        return 5
    if kind is dict:
        return 6
    raise GiveUp(f"value of type {kind.__name__}")


def _compare(a: Any, b: Any) -> int:
    """jq's total order (null < false < true < numbers < strings < arrays < objects)."""
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra in (3, 4):
        return -1 if a < b else (1 if a > b else 0)
    if ra == 5:
        for x, y in zip(a, b, strict=False):
            c = _compare(x, y)
            if c:
                return c
        return -1 if len(a) < len(b) else (1 if len(a) > len(b) else 0)
    if ra == 6:
        if a == b and _equal(a, b):
            return 0
        raise GiveUp("object ordering")
    return 0


def _equal(a: Any, b: Any) -> bool:
    """jq equality: like Python's, except that true is not 1 and false is not 0."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is list:
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind is dict:
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _number(value: int) -> int:
    if -_SAFE_INT < value < _SAFE_INT:
        return value
    raise GiveUp("integer out of the exact range")


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    kind = type(a)
    if kind is not type(b):
        raise JqError("addition of different types")
    if kind is int:
        return _number(a + b)
    if kind is str or kind is list:
        return a + b
    if kind is dict:
        return {**a, **b}
    raise JqError("addition of booleans")


def _subtract(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return _number(a - b)
    if type(a) is list and type(b) is list:
        return [x for x in a if not any(_equal(x, y) for y in b)]
    raise JqError("subtraction")


def _multiply(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return _number(a * b)
    raise GiveUp("multiplication")


def _iterate(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    raise JqError("iterate a non-container")


def _field(value: Any, name: str) -> Any:
    if type(value) is dict:
        return value.get(name)
    if value is None:
        return None
    raise JqError("index a non-object by name")


def _index(value: Any, key: Any) -> Any:
    if type(key) is str:
        return _field(value, key)
    if type(key) is int:
        if type(value) is list:
            if -len(value) <= key < len(value):
                return value[key]
            return None
        if value is None:
            return None
        raise JqError("index a non-array by number")
    raise GiveUp("index")


def _slice(value: Any, start: Any, stop: Any) -> Any:
    if value is None:
        return None
    if type(value) not in (list, str):
        raise JqError("slice")
    for bound in (start, stop):
        if bound is not None and type(bound) is not int:
            raise GiveUp("slice bound")
    return value[start:stop]


def _length(value: Any) -> int:
    kind = type(value)
    if value is None:
        return 0
    if kind is int:
        return abs(value)  # type: ignore[no-any-return]
    if kind in (str, list, dict):
        return len(value)
    raise JqError("length of a boolean")


def _keys(value: Any) -> list[Any]:
    if type(value) is dict:
        return sorted(value)
    if type(value) is list:
        return list(range(len(value)))
    raise JqError("keys")


def _to_entries(value: Any) -> list[Any]:
    if type(value) is dict:
        return [{"key": k, "value": value[k]} for k in sorted(value)]
    raise GiveUp("to_entries")


def _from_entries(entries: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        if (type(entry) is not dict or entry.keys() != {"key", "value"}
                or type(entry["key"]) is not str):
            raise GiveUp("from_entries")
        out[entry["key"]] = entry["value"]
    return out


def _type(value: Any) -> str:
    return ("null", "boolean", "boolean", "number", "string", "array", "object")[_rank(value)]


def _tostring(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or type(value) in (bool, int):
        return json.dumps(value)
    raise GiveUp("tostring of a container")


_INTEGER = re.compile(r"-?[0-9]{1,15}")


_NUMBERISH = frozenset("0123456789+-.eE" "nNaAiIfFtTyY")  # digits, exponents, nan, infinity


def _tonumber(value: Any) -> int:
    if type(value) is int:
        return int(value)
    if isinstance(value, str):
        if _INTEGER.fullmatch(value):
            return int(value)
        if not value or not _NUMBERISH.issuperset(value):
            raise JqError("tonumber of a string that is no number")  # "v2", "4-gpu", ""
    raise GiveUp("tonumber")


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_downcase(value: Any) -> str:
    if isinstance(value, str):
        return value.translate(_ASCII_LOWER)
    raise JqError("ascii_downcase")


def _extreme(value: Any, sign: int) -> Any:
    if type(value) is not list:
        raise GiveUp("min/max")
    best = None
    for index, item in enumerate(value):
        if index == 0 or sign * _compare(item, best) >= 0:
            best = item
    return best


def _sum(value: Any) -> Any:
    total = None
    for item in _iterate(value):
        total = _add(total, item)
    return total


def _last(value: Any) -> Any:
    if type(value) is list:
        return value[-1] if value else None
    if value is None:
        return None
    raise JqError("last")


def _split(value: Any, sep: Any) -> list[str]:
    if type(value) is not str:
        raise JqError("split")
    if type(sep) is not str or not sep:
        raise GiveUp("split")
    return value.split(sep) if value else []


def _ltrimstr(value: Any, prefix: Any) -> Any:
    if type(value) is not str:
        raise JqError("ltrimstr")
    if type(prefix) is not str:
        raise GiveUp("ltrimstr")
    return value[len(prefix):] if value.startswith(prefix) else value


def _has(value: Any, key: Any) -> bool:
    if type(value) is dict and type(key) is str:
        return key in value
    if type(value) is list and type(key) is int and key >= 0:
        return key < len(value)
    raise GiveUp("has")


def _any(value: Any) -> bool:
    return any(_truthy(v) for v in _iterate(value))


def _all(value: Any) -> bool:
    return all(_truthy(v) for v in _iterate(value))


_UNARY: dict[str, Callable[[Any], Any]] = {
    "length": _length, "keys": _keys, "to_entries": _to_entries, "type": _type,
    "tostring": _tostring, "tonumber": _tonumber, "ascii_downcase": _ascii_downcase,
    "min": lambda v: _extreme(v, -1), "max": lambda v: _extreme(v, 1), "add": _sum,
    "last": _last, "not": lambda v: not _truthy(v), "any": _any, "all": _all,
}
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "split": _split, "ltrimstr": _ltrimstr, "has": _has,
}
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add, "-": _subtract, "*": _multiply,
    "==": _equal, "!=": lambda a, b: not _equal(a, b),
    "<": lambda a, b: _compare(a, b) < 0, "<=": lambda a, b: _compare(a, b) <= 0,
    ">": lambda a, b: _compare(a, b) > 0, ">=": lambda a, b: _compare(a, b) >= 0,
}


# -- tokens --------------------------------------------------------------------------------

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
                at = _paren_end(text, at + 2)
            else:
                at += 2 if text[at] == "\\" else 1
    except IndexError:
        raise Unsupported("unterminated string") from None
    return at + 1


def _paren_end(text: str, at: int) -> int:
    """Index after the ``)`` closing a ``(`` that ends just before ``at``."""
    depth = 1
    while depth:
        if text[at] == '"':
            at = _string_end(text, at)
            continue
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        at += 1
    return at


# -- parser: jq's grammar for the subset, compiling straight to closures -------------------

_LEVELS: tuple[tuple[str, ...], ...] = (
    ("//",), ("or",), ("and",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*",))
_KEYWORDS = frozenset({"if", "then", "elif", "else", "end", "as", "and", "or", "reduce",
                       "foreach", "try", "catch", "label", "def", "import", "include",
                       "__loc__"})


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


class _Parser(Cursor):
    """Recursive descent over jq's grammar (precedence as in jq's parser.y), building
    closures as it goes; anything outside the subset raises Unsupported."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.bound: list[str] = []  # variables in scope

    def pipe(self) -> Node:
        """Lowest precedence, right-associative; ``Term as $x | body`` is in postfix."""
        left = self.comma()
        if self.at_value("|"):
            self.take()
            return _pipe(left, self.pipe())
        return left

    def comma(self) -> Node:
        left = self.binary(0)
        while self.at_value(","):
            self.take()
            left = _comma(left, self.binary(0))
        return left

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.postfix()
        left = self.binary(level + 1)
        ops = _LEVELS[level]
        while self.at_value(*ops):
            op = self.take()[1]
            right = self.binary(level if op == "//" else level + 1)  # `//` is right-assoc
            left = _binary(op, left, right)
            if op == "//" or ops[0] == "==":
                break  # `//` recursed; comparisons do not chain
        return left

    def postfix(self) -> Node:
        """A term and its suffixes. ``?`` right after a suffix makes that one step
        optional for each value it applies to (jq's ``Term '[' ']' '?'``, ``Term FIELD
        '?'``); after anything else it is ``try`` of the whole term."""
        start = self.at
        term = self.term()
        last: tuple[Node, Step] | None = None  # the latest suffix: (its base, its step)
        while True:
            kind, value = self.peek()
            base = term
            if kind == "field":
                self.take()
                step = _field_step(value[1:])
                term = _then_field(term, value[1:])
            elif value == "." and self.peek(1)[0] == "string":
                self.take()
                name = _string(self.take()[1])
                step, term = _field_step(name), _then_field(term, name)
            elif value == "." and self.peek(1)[1] == "[":
                self.take()
                continue
            elif value == "[" and kind == "op":
                term, step = self.bracket(term)
            elif value == "?" and kind == "op":
                self.take()
                term = _optional(*last) if last else _try(term)
                last = None
                continue
            elif value == "as" and kind == "ident":
                return self.bind(term, start)
            else:
                return term
            last = (base, step)

    def bracket(self, term: Node) -> tuple[Node, Step]:
        self.take("[")
        if self.at_value("]"):
            self.take()
            return _then_iterate(term), lambda x, v, env, run: _iterate(x)
        start = None if self.at_value(":") else self.pipe()
        if self.at_value(":"):
            self.take()
            stop = None if self.at_value("]") else self.pipe()
            self.take("]")
            return _then_slice(term, start, stop), _slice_step(start, stop)
        self.take("]")
        assert start is not None
        key = start
        return _then_index(term, key), lambda x, v, env, run: [
            _index(x, k) for k in _one_key(key(v, env, run))]

    def bind(self, source: Node, start: int) -> Node:
        span = self.items[start:self.at]
        memo = None
        if len(span) >= _MEMO_TOKENS:
            memo = (" ".join(v for _, v in span),
                    tuple(sorted({v[1:] for k, v in span if k == "var"})))
        self.take("as")
        kind, name = self.take()
        if kind != "var":
            raise Unsupported("destructuring")
        self.take("|")
        self.bound.append(name)
        body = self.pipe()
        self.bound.pop()
        return _bind(source, name[1:], body, memo)

    def term(self) -> Node:
        kind, value = self.take()
        if kind == "field":
            name = value[1:]
            return _single(lambda v, env, run: [_field(v, name)])
        if kind == "number":
            if not value.isdigit():
                raise Unsupported("non-integer number literal")
            return _const(_number(int(value)))
        if kind == "string":
            return _const(_string(value))
        if kind == "template":
            return self.template(value)
        if kind == "var":
            return self.variable(value)
        if kind == "op":
            return self.op_term(value)
        return self.ident_term(value)

    def template(self, raw: str) -> Node:
        """``"...\\(expr)..."``: each part's one value, strings as they are, others as
        JSON text (``tostring``)."""
        parts: list[str | Node] = []
        literal = ""
        at = 1
        while at < len(raw) - 1:
            if raw.startswith("\\(", at):
                end = _paren_end(raw, at + 2)
                inner = _Parser(raw[at + 2:end - 1])
                inner.bound = self.bound
                node = inner.pipe()
                if inner.peek()[0] != "end":
                    raise Unsupported("interpolation")
                parts += [_string(f'"{literal}"'), node]
                literal, at = "", end
            else:
                step = 2 if raw[at] == "\\" else 1
                literal += raw[at:at + step]
                at += step
        parts.append(_string(f'"{literal}"'))
        joined: Node = lambda v, env, run: [_interpolate(parts, v, env, run)]  # noqa: E731
        # one string per value of each part: at most one only when every part is single
        if all(isinstance(p, str) or _is_single(p) for p in parts):
            return _single(joined)
        return joined

    def variable(self, token: str) -> Node:
        if token not in self.bound:
            raise Unsupported(f"{token} is not bound here")
        name = token[1:]
        return _single(lambda v, env, run: [env[name]])

    def op_term(self, value: str) -> Node:
        if value == "." and self.peek()[0] == "string":
            name = _string(self.take()[1])
            return _single(lambda v, env, run: [_field(v, name)])
        if value == ".":
            return _single(lambda v, env, run: [v])
        if value == "(":
            inner = self.pipe()
            self.take(")")
            return inner
        if value == "[":
            if self.at_value("]"):
                self.take()
                return _single(lambda v, env, run: [[]])
            inner = self.pipe()
            self.take("]")
            return _single(lambda v, env, run: [inner(v, env, run)])
        if value == "{":
            return self.object()
        if value == "-" and self.peek()[0] == "number" and self.peek()[1].isdigit():
            return _const(-_number(int(self.take()[1])))
        raise Unsupported(value)

    def object(self) -> Node:
        entries: list[tuple[Node, Node]] = []
        while not self.at_value("}"):
            kind, key = self.take()
            if kind == "var":
                entries.append((_const(key[1:]), self.variable(key)))
            elif key == "(" and kind == "op":
                computed = self.pipe()
                self.take(")")
                self.take(":")
                entries.append((computed, self.object_value()))
            elif kind in ("ident", "string"):
                name = key if kind == "ident" else _string(key)
                if self.at_value(":"):
                    self.take()
                    node = self.object_value()
                else:
                    node = _field_node(name)
                entries.append((_const(name), node))
            else:
                raise Unsupported("object key")
            if not self.at_value(","):
                break
            self.take()
        self.take("}")
        return _object(entries)

    def object_value(self) -> Node:
        node = self.postfix()
        while self.at_value("|"):
            self.take()
            node = _pipe(node, self.postfix())
        return node

    def ident_term(self, name: str) -> Node:
        if name in ("null", "true", "false"):
            return _const({"null": None, "true": True, "false": False}[name])
        if name == "if":
            return self.conditional()
        if name in _KEYWORDS:
            raise Unsupported(name)
        if name == "empty":
            return lambda v, env, run: []
        if not self.at_value("("):
            if name not in _UNARY:
                raise Unsupported(name)
            func = _UNARY[name]
            return _single(lambda v, env, run: [func(v)])
        self.take("(")
        args = [self.pipe()]
        while self.at_value(";"):
            self.take()
            args.append(self.pipe())
        self.take(")")
        if len(args) == 1 and name in _HIGHER:
            return _HIGHER[name](args[0])
        if len(args) == 1 and name in _BINARY:
            return _call(_BINARY[name], args[0])
        raise Unsupported(f"{name}/{len(args)}")

    def conditional(self) -> Node:
        cond = self.pipe()
        self.take("then")
        then = self.pipe()
        if self.at_value("elif"):
            self.take()
            return _if(cond, then, self.conditional())
        other: Node = lambda v, env, run: [v]  # noqa: E731 - `if` without else
        if self.at_value("else"):
            self.take()
            other = self.pipe()
        self.take("end")
        return _if(cond, then, other)


def _interpolate(parts: list[str | Node], v: Any, env: Env, run: _Run) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        values = part(v, env, run)
        if len(values) != 1:
            raise GiveUp("interpolation of many values")
        out.append(_tostring(values[0]))
    return "".join(out)


def _field_node(name: str) -> Node:
    return _single(lambda v, env, run: [_field(v, name)])


def _string(token: str) -> str:
    value = json.loads(token)
    assert isinstance(value, str)
    return value


# -- nodes ---------------------------------------------------------------------------------

def _const(value: Any) -> Node:
    return _single(lambda v, env, run: [value])


def _pipe(left: Node, right: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        firsts = left(v, env, run)
        if len(firsts) == 1:
            return right(firsts[0], env, run)
        out: list[Any] = []
        for item in firsts:
            out.extend(right(item, env, run))
        run.spend(len(out))
        return out
    return _single(node) if _is_single(left) and _is_single(right) else node


def _comma(left: Node, right: Node) -> Node:
    return lambda v, env, run: left(v, env, run) + right(v, env, run)


def _binary(op: str, left: Node, right: Node) -> Node:
    if op == "//":
        def alternative(v: Any, env: Env, run: _Run) -> list[Any]:
            kept = [x for x in left(v, env, run) if x is not None and x is not False]
            return kept if kept else right(v, env, run)
        return alternative
    if op in ("and", "or"):
        want = op == "or"

        def logic(v: Any, env: Env, run: _Run) -> list[Any]:
            out: list[Any] = []
            for x in left(v, env, run):
                if _truthy(x) == want:
                    out.append(want)
                else:
                    out.extend(_truthy(y) for y in right(v, env, run))
            return out
        return logic
    func = _OPERATORS[op]

    def operator(v: Any, env: Env, run: _Run) -> list[Any]:
        rights = right(v, env, run)  # jq: the right side first; none, and the left never runs
        if not rights:
            return []
        lefts = left(v, env, run)
        if len(rights) == 1 and len(lefts) == 1:
            return [func(lefts[0], rights[0])]
        run.spend(len(rights) * len(lefts))
        return [func(a, b) for b in rights for a in lefts]
    return _single(operator) if _is_single(left) and _is_single(right) else operator


def _then_field(term: Node, name: str) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        return [_field(x, name) for x in term(v, env, run)]
    return _single(node) if _is_single(term) else node


def _then_iterate(term: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        bases = term(v, env, run)
        if len(bases) == 1:
            out = _iterate(bases[0])
        else:
            out = [item for base in bases for item in _iterate(base)]
        run.spend(len(out))
        return out
    node.early = _is_single(term)  # type: ignore[attr-defined]
    return node


def _then_index(term: Node, key: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        keys = key(v, env, run)  # jq: the key first, then the term, per key
        if not keys:
            return []
        terms = term(v, env, run)
        return [_index(x, k) for k in keys for x in terms]
    return _single(node) if _is_single(term) and _is_single(key) else node


def _then_slice(term: Node, start: Node | None, stop: Node | None) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        starts = start(v, env, run) if start else [None]
        stops = stop(v, env, run) if stop else [None]
        if len(starts) != 1 or len(stops) != 1:
            raise GiveUp("slice with many bounds")
        return [_slice(x, starts[0], stops[0]) for x in term(v, env, run)]
    return _single(node) if _is_single(term) else node


def _field_step(name: str) -> Step:
    return lambda x, v, env, run: [_field(x, name)]


def _slice_step(start: Node | None, stop: Node | None) -> Step:
    def step(x: Any, v: Any, env: Env, run: _Run) -> list[Any]:
        starts = start(v, env, run) if start else [None]
        stops = stop(v, env, run) if stop else [None]
        return [_slice(x, _one_key(starts), _one_key(stops))]
    return step


def _one_key(keys: list[Any]) -> Any:
    if len(keys) != 1:
        raise GiveUp("many keys in an optional index")
    return keys[0]


def _optional(base: Node, step: Step) -> Node:
    """``base`` then ``step`` with ``?``: a value the step fails on yields nothing and
    the next value is tried (jq's INDEX_OPT / EACH_OPT); ``base``'s own errors stand."""
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        out: list[Any] = []
        for x in base(v, env, run):
            try:
                out.extend(step(x, v, env, run))
            except JqError:
                continue
        run.spend(len(out))
        return out
    return node


def _try(term: Node) -> Node:
    """``term?``: exact when every error of ``term`` comes before its first output (then
    ``?`` yields nothing); otherwise libjq decides what was output before the error."""
    early = _is_single(term) or getattr(term, "early", False)

    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        try:
            return term(v, env, run)
        except JqError:
            if early:
                return []
            raise GiveUp("error after output inside ?") from None
    return node


def _is_single(node: Node) -> bool:
    return getattr(node, "single", False) is True


def _single(node: Node) -> Node:
    """Mark ``node`` as yielding at most one value (so an error comes before any output)."""
    node.single = True  # type: ignore[attr-defined]
    return node


def _bind(source: Node, name: str, body: Node, memo: tuple[str, tuple[str, ...]] | None
          ) -> Node:
    """``source as $name | body``; a long ``source`` is memoised per object by its text,
    input and the variables it reads, so the same computation at the head of several
    paths of a batch (Milvus' component list) runs once."""
    def values_of(v: Any, env: Env, run: _Run) -> list[Any]:
        if memo is None:
            return source(v, env, run)
        text, refs = memo
        reads = tuple(env.get(r) for r in refs)
        key = (text, id(v), *map(id, reads))
        hit = run.memo.get(key)  # the memo holds v and reads alive: an id stays theirs
        if hit is not None:
            return hit[2]
        values = source(v, env, run)
        run.memo[key] = (v, reads, values)
        return values

    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        values = values_of(v, env, run)
        if len(values) == 1:
            return body(v, {**env, name: values[0]}, run)
        out: list[Any] = []
        for value in values:
            out.extend(body(v, {**env, name: value}, run))
        run.spend(len(out))
        return out
    return node


def _object(entries: list[tuple[Node, Node]]) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        columns = []
        for key, value in entries:
            keys = key(v, env, run)
            if any(type(k) is not str for k in keys):
                raise GiveUp("object key that is not a string")
            columns.append([(k, x) for k in keys for x in value(v, env, run)])
        if all(len(c) == 1 for c in columns):
            return [dict(c[0] for c in columns)]
        combos = list(product(*columns))
        run.spend(len(combos))
        return [dict(combo) for combo in combos]
    return node


def _if(cond: Node, then: Node, other: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        out: list[Any] = []
        for c in cond(v, env, run):
            out.extend(then(v, env, run) if _truthy(c) else other(v, env, run))
        return out
    return node


def _select(cond: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        return [v for c in cond(v, env, run) if _truthy(c)]
    return _single(node) if _is_single(cond) else node


def _map(body: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        out: list[Any] = []
        items = _iterate(v)
        for item in items:
            out.extend(body(item, env, run))
        run.spend(len(items))
        return [out]
    return _single(node)


def _with_entries(body: Node) -> Node:
    mapped = _map(body)

    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        return [_from_entries(mapped(_to_entries(v), env, run)[0])]
    return _single(node)


def _call(func: Callable[[Any, Any], Any], arg: Node) -> Node:
    def node(v: Any, env: Env, run: _Run) -> list[Any]:
        return [func(v, a) for a in arg(v, env, run)]
    return _single(node) if _is_single(arg) else node


_HIGHER: dict[str, Callable[[Node], Node]] = {
    "select": _select, "map": _map, "with_entries": _with_entries}


# -- programs ------------------------------------------------------------------------------

def compile_program(expression: str) -> Program | None:
    """``expression`` as a Python function of (root, run), or None outside the subset."""
    try:
        parser = _Parser(expression)
        node = parser.pipe()
        if parser.peek()[0] != "end":
            return None
    except (Unsupported, GiveUp, ValueError, AssertionError, RecursionError):
        return None
    return lambda root, run: node(root, {}, run)
