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

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from dispatcher.workloads.paths import Location, locations
from dispatcher.workloads.pathwalk import JqPathError, Unsure, chain, walk

__all__ = ["json_location", "render"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
    steps = chain(expression) if root is not _ABSENT else None
    found: list[Location] | None = None
    if steps is not None:
        try:
            found = walk(steps, root)
        except JqPathError:
            return None
        except Unsure:
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
