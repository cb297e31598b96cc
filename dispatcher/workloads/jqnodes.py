"""The closures ``jqlite`` compiles an expression into, and running them on one object.

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
    field,
    from_entries,
    index,
    iterate,
    slice_value,
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
    "attempt",
    "binary",
    "bind",
    "call",
    "comma",
    "conditional",
    "const",
    "construct",
    "field_node",
    "field_step",
    "interpolate",
    "is_single",
    "one_key",
    "optional",
    "pipe",
    "run_each",
    "run_one",
    "run_programs",
    "single",
    "slice_step",
    "then_field",
    "then_index",
    "then_iterate",
    "then_slice",
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


def then_field(term: Node, name: str) -> Node:
    """``term.name``; a run of field steps is one walk (``.spec.template.spec``), over each
    value of the term before the run (``.jobs[].template.spec``)."""
    fused: tuple[Node | None, tuple[str, ...]] | None = getattr(term, "fields", None)
    if fused is not None:
        return _fields(fused[0], (*fused[1], name))
    return _fields(term, (name,))


def _walk(x: Any, names: tuple[str, ...]) -> Any:
    """``x.a.b...`` (jqvalues.field at each step: null stays null)."""
    for name in names:
        if type(x) is dict:
            x = x.get(name)
        elif x is None:
            return None
        else:
            raise JqError("index a non-object by name")
    return x


def _fields(base: Node | None, names: tuple[str, ...]) -> Node:
    """``names`` walked from the input (``base`` None) or from each value of ``base``."""
    if base is None:
        if len(names) == 1:
            name = names[0]

            def one(v: Any, env: Env, run: Run) -> list[Any]:
                return [v.get(name) if type(v) is dict else field(v, name)]
            node: Node = single(one)
        else:
            node = single(lambda v, env, run: [_walk(v, names)])
    elif is_single(base):
        node = single(lambda v, env, run: [_walk(x, names) for x in base(v, env, run)])
    else:
        def each(v: Any, env: Env, run: Run) -> list[Any]:
            return [_walk(x, names) for x in base(v, env, run)]
        node = each
    node.fields = (base, names)  # type: ignore[attr-defined]
    return node


def then_iterate(term: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        bases = term(v, env, run)
        if len(bases) == 1:
            out = iterate(bases[0])
        else:
            if bases:
                run.multi = True
            out = [item for base in bases for item in iterate(base)]
        if len(out) > 1:
            run.multi = True
        run.spend(len(out))
        return out
    node.early = is_single(term)  # type: ignore[attr-defined]
    return node


def then_index(term: Node, key: Node) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        keys = key(v, env, run)  # jq: the key first, then the term, per key
        if not keys:
            return []
        terms = term(v, env, run)
        if len(keys) > 1 or len(terms) > 1:
            run.multi = True
        return [index(x, k) for k in keys for x in terms]
    return single(node) if is_single(term) and is_single(key) else node


def then_slice(term: Node, start: Node | None, stop: Node | None) -> Node:
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        starts = start(v, env, run) if start else [None]
        stops = stop(v, env, run) if stop else [None]
        if len(starts) != 1 or len(stops) != 1:
            raise GiveUp("slice with many bounds")
        terms = term(v, env, run)
        if len(terms) > 1:
            run.multi = True
        return [slice_value(x, starts[0], stops[0]) for x in terms]
    return single(node) if is_single(term) else node


def field_step(name: str) -> Step:
    return lambda x, v, env, run: [field(x, name)]


def slice_step(start: Node | None, stop: Node | None) -> Step:
    def step(x: Any, v: Any, env: Env, run: Run) -> list[Any]:
        starts = start(v, env, run) if start else [None]
        stops = stop(v, env, run) if stop else [None]
        return [slice_value(x, one_key(starts), one_key(stops))]
    return step


def one_key(keys: list[Any]) -> Any:
    if len(keys) != 1:
        raise GiveUp("many keys in an optional index")
    return keys[0]


def optional(base: Node, step: Step) -> Node:
    """``base`` then ``step`` with ``?``: a value the step fails on yields nothing and
    the next value is tried (jq's INDEX_OPT / EACH_OPT); ``base``'s own errors stand."""
    def node(v: Any, env: Env, run: Run) -> list[Any]:
        out: list[Any] = []
        bases = base(v, env, run)
        if len(bases) > 1:
            run.multi = True
        for x in bases:
            try:
                out.extend(step(x, v, env, run))
            except JqError:
                continue
        run.spend(len(out))
        return out
    return node


def attempt(term: Node) -> Node:
    """``term?``: exact when every error of ``term`` comes before its first output (then
    ``?`` yields nothing); otherwise libjq decides what was output before the error."""
    early = is_single(term) or getattr(term, "early", False)

    def node(v: Any, env: Env, run: Run) -> list[Any]:
        try:
            return term(v, env, run)
        except JqError:
            if early:
                return []
            raise GiveUp("error after output inside ?") from None
    return node


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


def field_node(name: str) -> Node:
    return _fields(None, (name,))


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
