"""How a kind is kept from running on a shared hub: the definition's ``copyDefinition.hubHold``.

A workload on the hub is an intent; on a *shared* hub (one whose own controllers and
operators run) the hub's controller would run it too. The dispatcher's mutating webhook
puts the hold a definition declares on every dispatched object when it is created, and
the member copy has it removed, so only the member's controller runs it:

- ``managedBy`` (a path, value ``dispatcher.io/dispatcher``): the hub's controller skips
  the object entirely and writes no status, so the mirror owns the hub status (Job,
  JobSet, MPIJob). ``controllers`` are the kind's own controller's values (``kubernetes.io
  /job-controller``): they mean "the hub runs it", so they count as free and are replaced
  at creation, never taken for another system's.
- ``pause`` (a path and a value): the hub's controller creates nothing for the object but
  keeps writing its status (Deployment ``spec.paused``), so on a shared hub the member's
  status goes to the Dispatch only. The webhook notes that it set the value
  (``HOLD_ANNOTATION``); only then does the copy drop it, so a user's own pause is kept.
- ``refuse`` (a reason): nothing holds the kind; on a shared hub it is refused at
  admission with that reason (dispatch it from a dedicated hub).

Everything here is pure: plain objects in, plain objects (or JSON Patch operations) out.
Paths are plain field paths (``.spec.runPolicy.managedBy``), checked at load and never
evaluated as jq, so tenants' objects cost nothing but a dict walk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "HOLD_ANNOTATION",
    "MANAGED_BY",
    "Hold",
    "HoldState",
    "clear_hold",
    "dotted",
    "hold_patch",
    "hold_state",
    "marker",
    "parse_path",
    "unmarked",
]

MANAGED_BY = "dispatcher.io/dispatcher"
"""The managedBy value the dispatcher owns (a domain-prefixed path, as Job and JobSet want)."""
HOLD_ANNOTATION = "dispatcher.io/hub-hold"
"""Set by the webhook on an object it paused: the path it set (the copy clears only then)."""

HoldKind = Literal["managedBy", "pause", "refuse"]
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_STEP = re.compile(r'\.(?:([A-Za-z_][A-Za-z0-9_-]*)|"([^"\\]+)")')


def parse_path(text: str) -> tuple[str, ...] | None:
    """``.spec.runPolicy.managedBy`` -> ("spec", "runPolicy", "managedBy"); None if it is not
    a plain field path (no indexes, no jq).

    A segment that is not an identifier is written quoted, as in jq, so an annotation can
    be a hold (``.metadata.annotations."serving.kserve.io/stop"``); no escapes inside."""
    if not text.startswith(".") or len(text) > 200:
        return None
    parts: list[str] = []
    at = 0
    while at < len(text):
        match = _STEP.match(text, at)
        if match is None:
            return None
        parts.append(match.group(1) if match.group(1) is not None else match.group(2))
        at = match.end()
    return tuple(parts) or None


def dotted(path: tuple[str, ...]) -> str:
    """``parse_path``'s inverse: ("metadata", "annotations", "a.b/c") ->
    ``.metadata.annotations."a.b/c"``."""
    return "".join("." + (p if _SEGMENT.fullmatch(p) else f'"{p}"') for p in path)


@dataclass(frozen=True, kw_only=True)
class Hold:
    """One kind's hub hold (see the module docstring)."""

    kind: HoldKind
    path: tuple[str, ...] = ()
    value: Any = None
    reason: str = ""
    controllers: tuple[str, ...] = ()  # managedBy values of the kind's own controller

    @property
    def hub_writes_status(self) -> bool:
        """True when the hub's controller keeps writing a held object's status (pause): the
        mirror must then leave the hub status alone on a shared hub."""
        return self.kind == "pause"

    @property
    def dotted(self) -> str:
        """The path as written in the definition."""
        return dotted(self.path)


class HoldState:
    """What an object carries at the hold's path (``hold_state``)."""

    HELD = "held"  # our hold is there
    FREE = "free"  # nothing there: the hub's controller would run it
    FOREIGN = "foreign"  # another value: someone else manages it (e.g. Kueue MultiKueue)
    REFUSED = "refused"  # the kind cannot be held


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def hold_state(obj: Mapping[str, Any], hold: Hold) -> str:
    """Whether ``obj`` is held on the hub by ``hold`` (a ``HoldState`` value)."""
    if hold.kind == "refuse":
        return HoldState.REFUSED
    value = _get(obj, hold.path)
    if value == hold.value:
        return HoldState.HELD
    if hold.kind == "managedBy" and value not in (None, "") and value not in hold.controllers:
        return HoldState.FOREIGN
    return HoldState.FREE


def marker(obj: Mapping[str, Any]) -> Any:
    """The ``HOLD_ANNOTATION`` ``obj`` carries (None: none)."""
    return _get(obj, ("metadata", "annotations", HOLD_ANNOTATION))


def _pointer(parts: tuple[str, ...]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def hold_patch(obj: Mapping[str, Any], hold: Hold) -> list[dict[str, Any]]:
    """JSON Patch operations that put ``hold`` on ``obj`` (empty when already held).

    Missing parents are added whole (``/spec/runPolicy`` with the value inside), since a
    JSON Patch ``add`` needs its parent to exist. A pause also records itself in
    ``HOLD_ANNOTATION``; a marker the object came with otherwise is removed (``unmarked``):
    only the webhook says it paused an object."""
    if hold.kind == "refuse":
        return []
    if _get(obj, hold.path) == hold.value:
        return unmarked(obj)  # held as written (a user's own pause): not the webhook's
    ops: list[dict[str, Any]] = []
    node: Any = obj
    for depth, part in enumerate(hold.path):
        last = depth == len(hold.path) - 1
        child = node.get(part) if isinstance(node, Mapping) else None
        if last or not isinstance(child, Mapping):
            value: Any = hold.value
            for inner in reversed(hold.path[depth + 1:]):
                value = {inner: value}
            ops.append({"op": "add", "path": _pointer(hold.path[:depth + 1]), "value": value})
            break
        node = child
    if hold.kind != "pause":
        return ops + unmarked(obj)
    annotations = (obj.get("metadata") or {}).get("annotations")
    # a pause that is itself an annotation has just made the map, if there was none
    made = hold.path[:2] == ("metadata", "annotations")
    if not isinstance(annotations, Mapping) and not made:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {HOLD_ANNOTATION: hold.dotted}})
    else:
        ops.append({"op": "add", "path": _pointer(("metadata", "annotations",
                                                   HOLD_ANNOTATION)),
                    "value": hold.dotted})
    return ops


def unmarked(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch that removes a ``HOLD_ANNOTATION`` the object came with (only the
    webhook writes it, when it sets a pause: a tenant's own would unpause the member copy
    of an object the hub may be running)."""
    if marker(obj) is None:
        return []
    return [{"op": "remove", "path": _pointer(("metadata", "annotations", HOLD_ANNOTATION))}]


def clear_hold(obj: dict[str, Any], hold: Hold | None, *, hub_annotations: Mapping[str, Any]
               ) -> None:
    """Remove, in place, the hold from a member copy so the member's controller runs it.

    ``managedBy`` is removed when it is ours (the value names the dispatcher); a pause only
    when the hub object's ``HOLD_ANNOTATION`` says the webhook set it (a user's own pause is
    the user's). Parents below the top level left empty are removed too (``runPolicy: {}``
    is valid, but the copy then reads as the user wrote it)."""
    if hold is None or hold.kind == "refuse" or _get(obj, hold.path) != hold.value:
        return
    if hold.kind == "pause" and hub_annotations.get(HOLD_ANNOTATION) != hold.dotted:
        return
    chain: list[dict[str, Any]] = []
    node: Any = obj
    for part in hold.path[:-1]:
        node = node.get(part)
        if not isinstance(node, dict):
            return
        chain.append(node)
    node.pop(hold.path[-1], None)
    for depth in range(len(chain) - 1, 0, -1):  # never the top level (``spec``)
        if chain[depth]:
            break
        chain[depth - 1].pop(hold.path[depth], None)
