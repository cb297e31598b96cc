"""Locations in a workload object named by jq path expressions, and removing them.

A definition names places in an object with jq; ``path(EXPR)`` turns an expression into
the concrete key/index lists it addresses. ``mutate`` writes through such locations;
``strip_server_set`` removes the ones a definition declares as set by the hub's apiserver
(``copyDefinition.serverSetPaths``), so a member copy carries only what the user wrote and
the member's apiserver fills in its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import jq

from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.jqrun import canonical_text
from dispatcher.workloads.model import Definition, Expr

__all__ = ["Location", "Locator", "expr_locations", "in_process", "locations",
           "strip_server_set", "value_at"]

Location = list[str | int]
# Many expressions' locations in one object (JSON text): per expression its locations, or
# jq's message when it is not a path expression for this object. ``in_process`` runs jq
# here (the trusted catalog); ``bounded.Evaluator.locator`` runs an untrusted definition's
# expressions in its bounded workers, since a path expression can be as costly as any.
Locator = Callable[[Sequence[str], str], list[list[Location] | str]]


@lru_cache(maxsize=2048)
def _path_program(text: str) -> Any:
    return jq.compile(f"[path({text}\n)]")


def locations(expr_text: str, obj_text: str) -> list[Location]:
    """Every location ``expr_text`` addresses in the object (JSON text); ValueError from jq
    when it is not a path expression for this object."""
    found: list[Location] = _path_program(expr_text).input_text(obj_text).first()
    return found


def in_process(expressions: Sequence[str], text: str) -> list[list[Location] | str]:
    """The ``Locator`` of trusted definitions: jq ``path()`` in this process."""
    out: list[list[Location] | str] = []
    for expression in expressions:
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
    try:
        text = canonical_text(obj)
    except ValueError as error:
        raise MutationError(f"cannot read the object: {error}") from None
    found: list[Location] = []
    for each in expr_locations(definition.server_set, text, locate=locate,
                               where=lambda _: f"definition {definition.name}",
                               verb="removed"):
        found.extend(each)
    for location in sorted(found, key=_order, reverse=True):
        _remove(obj, location)


def expr_locations(exprs: Sequence[Expr], text: str, *, locate: Locator,
                   where: Callable[[int], str], verb: str) -> list[list[Location]]:
    """The locations of a definition's expressions, in one ``locate`` call; a MutationError
    names ``where(i)`` (the definition, the component) and what could not be done
    (``verb``) when jq refuses the i-th."""
    found = locate([e.text for e in exprs], text) if exprs else []
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
