"""A definition's ``copyDefinition``: what a member copy drops, how the hub holds the kind,
and which member gang mechanisms the kind's controllers carry to its pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.kube.gangapis import MECHANISMS, NONE
from dispatcher.workloads.holds import MANAGED_BY, Hold, parse_path
from dispatcher.workloads.model import Expr
from dispatcher.workloads.pathshape import path_shape_problem
from dispatcher.workloads.recorder import Recorder

__all__ = ["CopyReader"]


class CopyReader(Recorder):
    """Reads ``spec.copyDefinition`` (a part of ``reader.DocReader``)."""

    def _copy_definition(self, spec: Mapping[str, Any]
                         ) -> tuple[tuple[Expr, ...], Hold | None, tuple[str, ...]]:
        """(serverSetPaths, hubHold, memberGangs) of ``spec``."""
        copy = spec.get("copyDefinition")
        server_set = self._server_set(copy, "spec.copyDefinition")
        hold = self._hold((copy or {}).get("hubHold") if isinstance(copy, Mapping) else None,
                          "spec.copyDefinition.hubHold")
        member_gangs = self._member_gangs(copy, "spec.copyDefinition.memberGangs")
        return server_set, hold, member_gangs

    def _server_set(self, value: Any, field: str) -> tuple[Expr, ...]:
        """``copyDefinition.serverSetPaths``: jq path expressions removed from a copy."""
        raw = self._mapping(value, field,
                            allowed=frozenset({"serverSetPaths", "hubHold", "memberGangs"})) or {}
        out = []
        for i, item in enumerate(self._list(raw.get("serverSetPaths"), f"{field}.serverSetPaths")):
            expr = self._expr(item, f"{field}.serverSetPaths[{i}]", section=None)
            if expr is None:
                continue
            problem = path_shape_problem(expr.text)  # never run at load: tenants write it
            if problem:
                self._issue(expr.field, f"not a path expression: {problem}")
            else:
                out.append(expr)
        return tuple(out)

    def _member_gangs(self, value: Any, field: str) -> tuple[str, ...]:
        """``copyDefinition.memberGangs``: the member gang mechanisms whose pod fields
        (``workloadRef``, the pod-group label) this kind's controllers copy from its pod
        templates to its pods; only those are written into a copy (docs/definitions.md)."""
        raw = value.get("memberGangs") if isinstance(value, Mapping) else None
        out: list[str] = []
        for i, item in enumerate(self._list(raw, field)):
            if item not in MECHANISMS or item == NONE:
                self._issue(f"{field}[{i}]", f"must be one of "
                            f"{', '.join(m for m in MECHANISMS if m != NONE)}, not {item!r}")
            elif item not in out:
                out.append(item)
        return tuple(out)

    def _hold(self, value: Any, field: str) -> Hold | None:
        """``copyDefinition.hubHold``: exactly one of ``managedBy: {path}``,
        ``pause: {path, value}`` or ``refuse: REASON`` (``workloads/holds.py``)."""
        raw = self._mapping(value, field, allowed=frozenset({"managedBy", "pause", "refuse"}))
        if raw is None:
            return None
        if len(raw) != 1:
            self._issue(field, "give exactly one of managedBy, pause, refuse")
            return None
        (kind, body), = raw.items()
        if kind == "refuse":
            reason = self._string(body, f"{field}.refuse") or ""
            if not reason:
                self._issue(f"{field}.refuse", "say why nothing can hold this kind")
            return Hold(kind="refuse", reason=reason)
        allowed = frozenset({"path", "controllers"} if kind == "managedBy"
                            else {"path", "value"})
        item = self._mapping(body, f"{field}.{kind}", required=True, allowed=allowed) or {}
        path = parse_path(str(item.get("path") or ""))
        if path is None:
            self._issue(f"{field}.{kind}.path",
                        "must be a plain field path like .spec.managedBy (no indexes, no jq)")
            return None
        if kind == "managedBy":
            controllers = []
            for i, given in enumerate(self._list(item.get("controllers"),
                                                 f"{field}.managedBy.controllers")):
                if not isinstance(given, str) or not given or given == MANAGED_BY:
                    self._issue(f"{field}.managedBy.controllers[{i}]",
                                "must be the kind's own controller's managedBy value")
                else:
                    controllers.append(given)
            return Hold(kind="managedBy", path=path, value=MANAGED_BY,
                        controllers=tuple(controllers))
        if item.get("value") is None or isinstance(item.get("value"), (dict, list)):
            self._issue(f"{field}.pause.value", "must be a scalar (e.g. true)")
            return None
        return Hold(kind="pause", path=path, value=item["value"])
