"""The common subset of jq, evaluated on Python values without libjq.

A definition's paths are mostly plain (``.spec.replicas // 1``,
``.spec.replicatedJobs[].template``) or small programs over them (``if``, ``as $x``,
``select``, ``map``, comparisons, string interpolation). Handing libjq the object as JSON
text, letting it parse and evaluate, and converting the results back costs more than walking
the dict already in memory. ``compile_program`` parses an expression of that subset (jq's
grammar and precedence, over ``jqtokens``) into the closures of ``jqnodes`` and
``jqpaths``, over the value semantics of ``jqvalues``; anything outside it (``reduce``,
regexes, floats, division, ``try``/``catch``, ...) compiles to None and the whole batch
stays with libjq.

The evaluator is exact or it gives up: it only runs on objects of plain JSON values (no
floats, integers within 2**53: ``jqrun.ObjectInput.plain``), iterates objects in sorted key
order as libjq does on the canonical text, and raises ``GiveUp`` for any case it does not
model (a jq error, a value type an operator does not take here, too much work); the caller
then runs libjq, which also writes jq's own error message. ``tests/unit/workloads/
test_jqlite.py`` and ``tests/fuzz/test_jqlite.py`` check it against libjq on every catalog
path and on generated expressions.
"""

from __future__ import annotations

import json

from dispatcher.workloads.jqnodes import (
    HIGHER,
    Node,
    Program,
    Run,
    Step,
    binary,
    bind,
    call,
    comma,
    conditional,
    const,
    construct,
    interpolate,
    is_single,
    pipe,
    run_each,
    run_one,
    run_programs,
    single,
)
from dispatcher.workloads.jqpaths import (
    attempt,
    field_node,
    field_step,
    one_key,
    optional,
    slice_step,
    then_field,
    then_index,
    then_iterate,
    then_slice,
)
from dispatcher.workloads.jqtokens import Cursor, Unsupported, paren_end
from dispatcher.workloads.jqvalues import BINARY, UNARY, GiveUp, JqError, index, iterate, number

__all__ = [
    "GiveUp",
    "JqError",
    "Program",
    "Run",
    "compile_program",
    "run_each",
    "run_one",
    "run_programs",
]

_MEMO_TOKENS = 8  # a binding source of this many tokens or more is memoised


# -- parser: jq's grammar for the subset, compiling straight to closures -------------------

_LEVELS: tuple[tuple[str, ...], ...] = (
    ("//",), ("or",), ("and",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/"))
_KEYWORDS = frozenset({"if", "then", "elif", "else", "end", "as", "and", "or", "reduce",
                       "foreach", "try", "catch", "label", "def", "import", "include",
                       "__loc__"})


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
            return pipe(left, self.pipe())
        return left

    def comma(self) -> Node:
        left = self.binary(0)
        while self.at_value(","):
            self.take()
            left = comma(left, self.binary(0))
        return left

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.postfix()
        left = self.binary(level + 1)
        ops = _LEVELS[level]
        while self.at_value(*ops):
            op = self.take()[1]
            right = self.binary(level if op == "//" else level + 1)  # `//` is right-assoc
            left = binary(op, left, right)
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
                step = field_step(value[1:])
                term = then_field(term, value[1:])
            elif value == "." and self.peek(1)[0] == "string":
                self.take()
                name = _string(self.take()[1])
                step, term = field_step(name), then_field(term, name)
            elif value == "." and self.peek(1)[1] == "[":
                self.take()
                continue
            elif value == "[" and kind == "op":
                term, step = self.bracket(term)
            elif value == "?" and kind == "op":
                self.take()
                term = optional(*last) if last else attempt(term)
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
            return then_iterate(term), lambda x, v, env, run: iterate(x)
        start = None if self.at_value(":") else self.pipe()
        if self.at_value(":"):
            self.take()
            stop = None if self.at_value("]") else self.pipe()
            self.take("]")
            return then_slice(term, start, stop), slice_step(start, stop)
        self.take("]")
        assert start is not None
        key = start
        return then_index(term, key), lambda x, v, env, run: [
            index(x, k) for k in one_key(key(v, env, run))]

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
        return bind(source, name[1:], body, memo)

    def term(self) -> Node:
        kind, value = self.take()
        if kind == "field":
            name = value[1:]
            return field_node(name)
        if kind == "number":
            if not value.isdigit():
                raise Unsupported("non-integer number literal")
            return const(number(int(value)))
        if kind == "string":
            return const(_string(value))
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
                end = paren_end(raw, at + 2)
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
        joined: Node = lambda v, env, run: [interpolate(parts, v, env, run)]  # noqa: E731
        # one string per value of each part: at most one only when every part is single
        if all(isinstance(p, str) or is_single(p) for p in parts):
            return single(joined)
        return joined

    def variable(self, token: str) -> Node:
        if token not in self.bound:
            raise Unsupported(f"{token} is not bound here")
        name = token[1:]
        return single(lambda v, env, run: [env[name]])

    def op_term(self, value: str) -> Node:
        if value == "." and self.peek()[0] == "string":
            name = _string(self.take()[1])
            return field_node(name)
        if value == ".":
            return single(lambda v, env, run: [v])
        if value == "(":
            inner = self.pipe()
            self.take(")")
            return inner
        if value == "[":
            if self.at_value("]"):
                self.take()
                return single(lambda v, env, run: [[]])
            inner = self.pipe()
            self.take("]")
            return single(lambda v, env, run: [inner(v, env, run)])
        if value == "{":
            return self.object()
        if value == "-" and self.peek()[0] == "number" and self.peek()[1].isdigit():
            return const(-number(int(self.take()[1])))
        raise Unsupported(value)

    def object(self) -> Node:
        entries: list[tuple[Node, Node]] = []
        while not self.at_value("}"):
            kind, key = self.take()
            if kind == "var":
                entries.append((const(key[1:]), self.variable(key)))
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
                    node = field_node(name)
                entries.append((const(name), node))
            else:
                raise Unsupported("object key")
            if not self.at_value(","):
                break
            self.take()
        self.take("}")
        return construct(entries)

    def object_value(self) -> Node:
        node = self.postfix()
        while self.at_value("|"):
            self.take()
            node = pipe(node, self.postfix())
        return node

    def ident_term(self, name: str) -> Node:
        if name in ("null", "true", "false"):
            return const({"null": None, "true": True, "false": False}[name])
        if name == "if":
            return self.conditional()
        if name in _KEYWORDS:
            raise Unsupported(name)
        if name == "empty":
            return lambda v, env, run: []
        if not self.at_value("("):
            if name not in UNARY:
                raise Unsupported(name)
            func = UNARY[name]
            return single(lambda v, env, run: [func(v)])
        self.take("(")
        args = [self.pipe()]
        while self.at_value(";"):
            self.take()
            args.append(self.pipe())
        self.take(")")
        if len(args) == 1 and name in HIGHER:
            return HIGHER[name](args[0])
        if len(args) == 1 and name in BINARY:
            return call(BINARY[name], args[0])
        raise Unsupported(f"{name}/{len(args)}")

    def conditional(self) -> Node:
        cond = self.pipe()
        self.take("then")
        then = self.pipe()
        if self.at_value("elif"):
            self.take()
            return conditional(cond, then, self.conditional())
        other: Node = lambda v, env, run: [v]  # noqa: E731 - `if` without else
        if self.at_value("else"):
            self.take()
            other = self.pipe()
        self.take("end")
        return conditional(cond, then, other)


def _string(token: str) -> str:
    value = json.loads(token)
    assert isinstance(value, str)
    return value


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
