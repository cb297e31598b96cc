"""Plain path expressions walked on the Python value, as libjq's ``path()`` gives them.

Most paths a definition names are plain field chains (``.spec.template``,
``.spec.replicatedJobs[].template``, ``.metadata.labels["app"]``, ``.[0]``). Their
locations are walked here on the object itself, with what libjq's ``path()`` gives on the
object's canonical text (``jqrun.canonical_text``): objects iterate in sorted key order, a
missing key or index (or one of ``null``) still yields its location, and any other
mismatch is a jq error (``JqPathError``). A value the walk does not model (a key that is not
a string, a type that is not JSON) is ``Unsure``: libjq decides. Used for error messages'
locations (``location``) and by the trusted definitions' ``Locator`` (``paths.in_process``),
which locates three times per dispatch: no JSON text, no libjq.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from dispatcher.workloads.jqtokens import Unsupported, tokens

__all__ = ["JqPathError", "Location", "Unsure", "chain", "walk"]

_EACH = None  # the ``[]`` step; a str is a key, an int an index
_SCALARS = (str, bool, int, float, datetime.date)  # datetime.datetime is a date
Step = str | int | None
Location = list[str | int]
"""A concrete location: keys and indexes from the root (what libjq's ``path()`` yields)."""


class Unsure(Exception):
    """A value the walk does not model (libjq decides)."""


class JqPathError(Exception):
    """libjq's ``path()`` fails on this object."""


@lru_cache(maxsize=2048)
def chain(expression: str) -> tuple[Step, ...] | None:
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


def walk(steps: Sequence[Step], root: Any) -> list[Location]:
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
            raise Unsure("a key that is not a string")
        if isinstance(step, str):
            return [([*where, step], value.get(step))]
        if step is _EACH:
            return [([*where, k], value[k]) for k in sorted(value)]
        raise JqPathError("Cannot index object with number")
    if type(value) is list:
        if isinstance(step, int):
            return [([*where, step], value[step] if step < len(value) else None)]
        if step is _EACH:
            return [([*where, i], item) for i, item in enumerate(value)]
        raise JqPathError("Cannot index array with string")
    if value is None:
        if step is _EACH:
            raise JqPathError("Cannot iterate over null")
        return [([*where, step], None)]
    if isinstance(value, _SCALARS):
        raise JqPathError(f"Cannot index {type(value).__name__}")
    raise Unsure(type(value).__name__)
