"""The closures ``jqlite`` compiles an expression into (paths: ``jqpaths``), and running
them on one object.

A node is ``node(input, env, run) -> outputs`` (a list: definitions' paths yield few values).
Nodes follow libjq's evaluation order where it is observable (a binary operator's right side
first, an index's key before its term) and mark themselves ``single`` when they yield at most
one value, so ``?`` knows an error came before any output. ``Run`` holds one object's step
budget, the memo of binding sources shared by a batch's paths, and whether the current
path has made more than one value anywhere yet (``multi``): nodes compute their values
eagerly where libjq runs lazily, so once a stream has several values, which error comes
first may differ from libjq's; before that, an error is the one libjq meets first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

from dispatcher.workloads.jqvalues import (
    OPERATORS,
    GiveUp,
    JqError,
    from_entries,
    iterate,
    to_entries,
    tostring,
    truthy,
)

__all__ = [
    "HIGHER",
    "Env",
    "Node",
    "Program",
    "Run",
    "Step",
    "binary",
    "bind",
    "call",
    "comma",
    "conditional",
    "const",
    "construct",
    "interpolate",
    "is_single",
    "pipe",
    "run_each",
    "run_one",
    "run_programs",
    "single",
]

Env = dict[str, Any]
Node = Callable[[Any, Env, "Run"], list[Any]]
Program = Callable[[Any, "Run"], list[Any]]
Step = Callable[[Any, Any, Env, "Run"], list[Any]]
"""One suffix applied to one base value: (base, input, env, run) -> outputs."""

_STEP_BUDGET = 200_000  # values produced per object before handing over to libjq


class Run:
    """Per-object evaluation state: the step budget and the memo of long binding sources
    (shared by every path of a batch)."""

    __slots__ = ("memo", "multi", "steps")

    def __init__(self) -> None:
        self.steps = _STEP_BUDGET
        self.memo: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...], list[Any]]] = {}
        self.multi = False

    def spend(self, count: int) -> None:
        self.steps -= count
        if self.steps < 0:
            raise GiveUp("step budget")


def const(value: Any) -> Node:
    node = single(lambda v, env, run: [value])
    node.value = (value,)  # type: ignore[attr-defined]  # operators take it directly
    return node


def pipe(left: Node, right: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        firsts = left(v, env, run)
        if len(firsts) == 1:
            return right(firsts[0], env, run)
        run.multi = True
        out: list[Any] = []
        for item in firsts:
            out.extend(right(item, env, run))
        run.spend(len(out))
        return out
    return single(node) if is_single(left) and is_single(right) else node


def comma(left: Node, right: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        firsts = left(v, env, run)
        if firsts:
            run.multi = True  # libjq runs what follows on these before the right side
        return firsts + right(v, env, run)
    return node


def binary(op: str, left: Node, right: Node) -> Node:
    constant: tuple[Any] | None = getattr(right, "value", None)
    if op == "//":
        if constant is not None:
            fallback = constant[0]

            def default(v: Any, env: Env, run: Run) -> list[Any]:
                kept = [x for x in left(v, env, run) if x is not None and x is not False]
                return kept if kept else [fallback]
            return single(default) if is_single(left) else default

        def alternative(v: Any, env: Env, run: Run) -> list[Any]:
            kept = [x for x in left(v, env, run) if x is not None and x is not False]
            return kept if kept else right(v, env, run)
        return single(alternative) if is_single(left) and is_single(right) else alternative
    if op in ("and", "or"):
        want = op == "or"

        def logic(v: Any, env: Env, run: Run) -> list[Any]:
            out: list[Any] = []
            lefts = left(v, env, run)
            if len(lefts) > 1:
                run.multi = True
            for x in lefts:
                if truthy(x) == want:
                    out.append(want)
                else:
                    out.extend(truthy(y) for y in right(v, env, run))
            return out
        return logic
    func = OPERATORS[op]
    if constant is not None:
        operand = constant[0]

        def with_constant(v: Any, env: Env, run: Run) -> list[Any]:
            lefts = left(v, env, run)  # the right side, a constant, cannot fail
            if len(lefts) == 1:
                return [func(lefts[0], operand)]
            run.multi = True
            run.spend(len(lefts))
            return [func(a, operand) for a in lefts]
        return single(with_constant) if is_single(left) else with_constant

    def operator(v: Any, env: Env, run: Run) -> list[Any]:
        rights = right(v, env, run)  # jq: the right side first; none, and the left never runs
        if not rights:
            return []
        lefts = left(v, env, run)
        if len(rights) == 1 and len(lefts) == 1:
            return [func(lefts[0], rights[0])]
        run.multi = True
        run.spend(len(rights) * len(lefts))
        return [func(a, b) for b in rights for a in lefts]
    return single(operator) if is_single(left) and is_single(right) else operator


def is_single(node: Node) -> bool:
    return getattr(node, "single", False) is True


def single(node: Node) -> Node:
    """Mark ``node`` as yielding at most one value (so an error comes before any output)."""
    node.single = True  # type: ignore[attr-defined]
    return node


def bind(source: Node, name: str, body: Node, memo: tuple[str, tuple[str, ...]] | None
          ) -> Node:
    """``source as $name | body``; a long ``source`` is memoised per object by its text,
    input and the variables it reads, so the same computation at the head of several
    paths of a batch (Milvus' component list) runs once."""
    def values_of(v: Any, env: Env, run: Run) -> list[Any]:
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

    def node(v: Any, env: Env, run: Run) -> list[Any]:
        values = values_of(v, env, run)
        if len(values) == 1:
            return body(v, {**env, name: values[0]}, run)
        run.multi = True
        out: list[Any] = []
        for value in values:
            out.extend(body(v, {**env, name: value}, run))
        run.spend(len(out))
        return out
    return node


def construct(entries: list[tuple[Node, Node]]) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        if len(entries) > 1:
            run.multi = True  # libjq's order among the entries is not modelled
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


def conditional(cond: Node, then: Node, other: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        out: list[Any] = []
        conds = cond(v, env, run)
        if len(conds) > 1:
            run.multi = True
        for c in conds:
            out.extend(then(v, env, run) if truthy(c) else other(v, env, run))
        return out
    return node


def _select(cond: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        conds = cond(v, env, run)
        if len(conds) > 1:
            run.multi = True
        return [v for c in conds if truthy(c)]
    return single(node) if is_single(cond) else node


def _map(body: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        out: list[Any] = []
        items = iterate(v)
        for item in items:
            out.extend(body(item, env, run))
        run.spend(len(items))
        return [out]
    return single(node)


def _with_entries(body: Node) -> Node:
    mapped = _map(body)

    def node(v: Any, env: Env, run: Run) -> list[Any]:
        return [from_entries(mapped(to_entries(v), env, run)[0])]
    return single(node)


def call(func: Callable[[Any, Any], Any], arg: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        args = arg(v, env, run)
        if len(args) > 1:
            run.multi = True
        return [func(v, a) for a in args]
    return single(node) if is_single(arg) else node


HIGHER: dict[str, Callable[[Node], Node]] = {
    "select": _select, "map": _map, "with_entries": _with_entries}


def interpolate(parts: list[str | Node], v: Any, env: Env, run: Run) -> str:
    if sum(not isinstance(p, str) for p in parts) > 1:
        run.multi = True  # libjq's order among the parts is not modelled
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        values = part(v, env, run)
        if len(values) != 1:
            raise GiveUp("interpolation of many values")
        out.append(tostring(values[0]))
    return "".join(out)


def run_programs(programs: Sequence[Program], root: Any, limit: int) -> list[list[Any]]:
    """Every program's outputs on ``root``; GiveUp when any of them needs libjq (an error,
    ``limit`` outputs or more)."""
    run = Run()
    out = []
    for program in programs:
        values = program(root, run)
        if len(values) >= limit:
            raise GiveUp("too many results")
        out.append(list(values))  # never the object's own list: callers may keep it
    return out


def run_each(programs: Sequence[Program], root: Any, limit: int
             ) -> list[list[Any] | str | None]:
    """Every program's outputs on ``root`` (``run_one`` each, one shared ``Run``)."""
    run = Run()
    return [run_one(program, root, limit, run) for program in programs]


def run_one(program: Program, root: Any, limit: int, run: Run) -> list[Any] | str | None:
    """The program's outputs on ``root``; if it fails, libjq's error message where it is
    known exactly (an error met before any stream had several values), else None: libjq
    must run it (an error, ``limit`` outputs or more, a case not modelled). ``run`` may be
    shared by the programs of a batch (one budget and memo, both exact)."""
    run.multi = False
    try:
        values = program(root, run)
    except JqError as error:
        return error.message if error.message and not run.multi else None
    except GiveUp:
        return None
    return list(values) if len(values) < limit else None
