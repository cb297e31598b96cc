"""Locations in a workload object named by jq path expressions, and removing them.

A definition names places in an object with jq; ``path(EXPR)`` turns an expression into
the concrete key/index lists it addresses (a plain path such as
``.spec.replicatedJobs[].template`` is walked, ``pathwalk``: no libjq, no JSON text).
``mutate`` writes through such locations;
``strip_server_set`` removes the ones a definition declares as set by the hub's apiserver
(``copyDefinition.serverSetPaths``), so a member copy carries only what the user wrote and
the member's apiserver fills in its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import jq

from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.jqrun import canonical_text
from dispatcher.workloads.model import Definition, Expr
from dispatcher.workloads.pathwalk import JqPathError, Location, Unsure, chain, walk

__all__ = ["Location", "Locator", "expr_locations", "in_process", "locations",
           "object_text", "strip_server_set", "value_at"]

# Many expressions' locations in one object: per expression its locations, or jq's message
# when it is not a path expression for this object. ``in_process`` runs here (the trusted
# catalog); ``bounded.Evaluator.locator`` runs an untrusted definition's expressions in its
# bounded workers, since a path expression can be as costly as any.
Locator = Callable[[Sequence[str], Any], list[list[Location] | str]]


@lru_cache(maxsize=2048)
def _path_program(text: str) -> Any:
    return jq.compile(f"[path({text}\n)]")


def locations(expr_text: str, obj_text: str) -> list[Location]:
    """Every location ``expr_text`` addresses in the object (JSON text); ValueError from jq
    when it is not a path expression for this object."""
    found: list[Location] = _path_program(expr_text).input_text(obj_text).first()
    return found


def object_text(obj: Any) -> str:
    """The JSON text jq reads ``obj`` as (``canonical_text``); MutationError when it is not
    JSON data or is over the limits."""
    try:
        return canonical_text(obj)
    except ValueError as error:
        raise MutationError(f"cannot read the object: {error}") from None


def in_process(expressions: Sequence[str], obj: Any) -> list[list[Location] | str]:
    """The ``Locator`` of trusted definitions, in this process: a plain path walked
    (``pathwalk``), any other expression (or a plain one jq refuses on this object: its
    message is libjq's) by libjq ``path()`` on the object's text, made once and only then."""
    out: list[list[Location] | str] = []
    text: str | None = None
    for expression in expressions:
        steps = chain(expression)
        if steps is not None:
            with contextlib.suppress(JqPathError, Unsure):
                out.append(walk(steps, obj))
                continue
        if text is None:
            text = object_text(obj)
        try:
            out.append(locations(expression, text))
        except ValueError as error:
            out.append(" ".join(str(error).split()))
    return out


def value_at(root: Any, location: Sequence[str | int]) -> Any:
    """What ``root`` holds at ``location`` (None when any step is missing)."""
    node = root
    for step in location:
        node = _step(node, step)
        if node is None:
            return None
    return node


def strip_server_set(obj: dict[str, Any], definition: Definition, *,
                     locate: Locator = in_process) -> None:
    """Remove, in place, every location of ``definition.server_set`` that ``obj`` holds.

    Locations are computed on the object before any removal and removed deepest-last-index
    first, so removing one list item never shifts another that is still to go.
    """
    if not definition.server_set:
        return
    found: list[Location] = []
    for each in expr_locations(definition.server_set, obj, locate=locate,
                               where=lambda _: f"definition {definition.name}",
                               verb="removed"):
        found.extend(each)
    for location in sorted(found, key=_order, reverse=True):
        _remove(obj, location)


def expr_locations(exprs: Sequence[Expr], obj: Any, *, locate: Locator,
                   where: Callable[[int], str], verb: str) -> list[list[Location]]:
    """The locations of a definition's expressions in ``obj``, in one ``locate`` call; a
    MutationError names ``where(i)`` (the definition, the component) and what could not be
    done (``verb``) when jq refuses the i-th."""
    found = locate([e.text for e in exprs], obj) if exprs else []
    out: list[list[Location]] = []
    for index, (expr, each) in enumerate(zip(exprs, found, strict=True)):
        if isinstance(each, str):
            raise MutationError(f"{where(index)}: {expr.field} ({expr.text!r}) cannot be "
                                f"{verb}: {each}")
        out.append(each)
    return out


def _order(location: Sequence[str | int]) -> list[tuple[int, int, str]]:
    return [(1, step, "") if isinstance(step, int) else (0, 0, step) for step in location]


def _remove(root: Any, location: Sequence[str | int]) -> None:
    node = root
    for step in location[:-1]:
        node = _step(node, step)
        if node is None:
            return
    if not location:
        return
    last = location[-1]
    if isinstance(last, int) and isinstance(node, list) and -len(node) <= last < len(node):
        del node[last]
    elif isinstance(last, str) and isinstance(node, dict):
        node.pop(last, None)


def _step(node: Any, step: str | int) -> Any:
    if isinstance(step, int):
        return node[step] if isinstance(node, list) and -len(node) <= step < len(node) else None
    return node.get(step) if isinstance(node, dict) else None
