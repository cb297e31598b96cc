"""The JSON location of an expression's result, for an error message about that value.

A ``TemplateError`` names where in the workload object the bad value is
(``spec.template.spec.containers[0].name``), and a pod spec's scheduling fields are
reported with their locations: jq's ``path()`` of the definition's expression, its
``index``-th result. Most such expressions are plain field chains (``.spec.template``,
``.spec.replicatedJobs[].template``, ``.metadata.labels["app"]``): their locations are
walked on the Python value here, as libjq's ``path()`` gives them on the object's canonical
text (objects iterate in sorted key order, a missing key or index on ``null`` still
yields its location, any other mismatch is a jq error: no location). Anything else runs
libjq's ``path()`` on the text. Before, every such message compiled a jq program and
serialized the object: ~2.4 ms for one rejected workload.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from dispatcher.workloads.jqtokens import Unsupported, tokens
from dispatcher.workloads.paths import Location, locations

__all__ = ["json_location", "render"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EACH = None  # the ``[]`` step; a str is a key, an int an index
_SCALARS = (str, bool, int, float, datetime.date)  # datetime.datetime is a date
Step = str | int | None


class _Unsure(Exception):
    """A value the walk does not model (libjq decides)."""


class _JqError(Exception):
    """libjq's ``path()`` fails on this object (so there is no location)."""


_ABSENT: Any = object()


def json_location(expression: str, text: str | Callable[[], str], index: int, *,
                  root: Any = _ABSENT) -> str | None:
    """The JSON path (``spec.jobs[1].template``) of ``expression``'s ``index``-th result in
    the object, or None when the expression is not a path (``.a // 1``) or fails there.

    ``text`` is the object's canonical JSON text, or how to make it; empty when the
    definition's expressions may not run here (an untrusted definition): then None.
    ``root``, the object itself, lets a field chain be walked without the text.
    """
    if not text:
        return None
    steps = _chain(expression) if root is not _ABSENT else None
    found: list[Location] | None = None
    if steps is not None:
        try:
            found = _walk(steps, root)
        except _JqError:
            return None
        except _Unsure:
            found = None
    if found is None:
        source = text if isinstance(text, str) else text()
        if not source:
            return None
        try:
            found = locations(expression, source)
        except ValueError:
            return None
    if not isinstance(found, list) or index >= len(found):
        return None
    return render(found[index])


def render(location: Sequence[str | int]) -> str:
    """``["spec", "jobs", 1, "template"]`` as ``spec.jobs[1].template``."""
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


@lru_cache(maxsize=2048)
def _chain(expression: str) -> tuple[Step, ...] | None:
    """The steps of a plain field chain (``.a.b``, ``."a"``, ``["a"]``, ``[0]``, ``[]``,
    ``.[...]``, ``.``), or None for anything else (libjq's ``path()`` answers)."""
    try:
        toks = tokens(expression)
    except Unsupported:
        return None
    if not toks or toks[0][1][:1] != ".":
        return None
    steps: list[Step] = []
    at = 0
    while at < len(toks):
        kind, value = toks[at]
        after = toks[at + 1] if at + 1 < len(toks) else ("end", "")
        if kind == "field":
            steps.append(value[1:])
            at += 1
        elif (kind, value) == ("op", ".") and after[0] == "string":
            key = _literal(after[1])
            if key is None:
                return None
            steps.append(key)
            at += 2
        elif (kind, value) == ("op", ".") and (after == ("op", "[") or len(toks) == 1):
            at += 1  # `.[`, or `.` alone: the object itself
        elif (kind, value) == ("op", "[") and at > 0:
            inner = toks[at + 1:at + 3]
            if inner[:1] == [("op", "]")]:
                steps.append(_EACH)
                at += 2
                continue
            if len(inner) != 2 or inner[1] != ("op", "]"):
                return None
            if inner[0][0] == "string":
                key = _literal(inner[0][1])
                if key is None:
                    return None
                steps.append(key)
            elif inner[0][0] == "number" and inner[0][1].isdigit():
                steps.append(int(inner[0][1]))
            else:
                return None
            at += 3
        else:
            return None
    return tuple(steps)


def _literal(token: str) -> str | None:
    """A jq string literal's value, or None when JSON reads it otherwise."""
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _walk(steps: Sequence[Step], root: Any) -> list[Location]:
    """Every location of the chain in ``root``, as libjq's ``path()`` on its text."""
    current: list[tuple[Location, Any]] = [([], root)]
    for step in steps:
        following: list[tuple[Location, Any]] = []
        for where, value in current:
            following.extend(_step(step, where, value))
        current = following
    return [where for where, _ in current]


def _step(step: Step, where: Location, value: Any) -> list[tuple[Location, Any]]:
    if type(value) is dict:
        if any(type(k) is not str for k in value):
            raise _Unsure("a key that is not a string")
        if isinstance(step, str):
            return [([*where, step], value.get(step))]
        if step is _EACH:
            return [([*where, k], value[k]) for k in sorted(value)]
        raise _JqError("Cannot index object with number")
    if type(value) is list:
        if isinstance(step, int):
            return [([*where, step], value[step] if step < len(value) else None)]
        if step is _EACH:
            return [([*where, i], item) for i, item in enumerate(value)]
        raise _JqError("Cannot index array with string")
    if value is None:
        if step is _EACH:
            raise _JqError("Cannot iterate over null")
        return [([*where, step], None)]
    if isinstance(value, _SCALARS):
        raise _JqError(f"Cannot index {type(value).__name__}")
    raise _Unsure(type(value).__name__)
