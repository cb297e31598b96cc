"""The path nodes ``jqlite`` compiles into: field runs, ``[]``, ``[k]``, slices, ``?``.

A run of field steps is one walk (``.spec.template.spec``); ``?`` (``optional``,
``attempt``) is exact only where every error comes before the first output (a ``single``
node), else it hands the case to libjq (``GiveUp``). Evaluation order follows libjq: an
index's key before its term. See ``jqnodes`` for the node shape and ``Run``.
"""

from __future__ import annotations

from typing import Any

from dispatcher.workloads.jqnodes import Env, Node, Run, Step, is_single, single
from dispatcher.workloads.jqvalues import GiveUp, JqError, field, index, iterate, slice_value

__all__ = ["attempt", "field_node", "field_step", "one_key", "optional", "slice_step",
           "then_field", "then_index", "then_iterate", "then_slice"]


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


def field_node(name: str) -> Node:
    return _fields(None, (name,))
