"""Reading a ``statusDefinition``: phase and conditions paths, matchers, precedence.

Applies the CRD defaults for condition field names (an explicit null also means the
default) and orders the mappings by the definition's ``statusPrecedence`` extension.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from dispatcher.workloads.model import (
    DEFAULT_PRECEDENCE,
    GENERIC_OF_KEY,
    Condition,
    Expr,
    Matcher,
    StatusRules,
)
from dispatcher.workloads.recorder import Recorder

__all__ = ["StatusReader", "precedence_rank"]

_STATUSDEF = frozenset({"phaseDefinition", "conditionsDefinition", "statusMappings",
                        "statusPrecedence"})
_CONDDEF = {"typeFieldName": "type", "statusFieldName": "status",
            "messageFieldName": "message", "reasonFieldName": "reason"}
_MATCHER = frozenset({"byPhase", "byConditions", "byExpression", "differsFromUpstream"})
_EXPECTED = frozenset({"type", "status", "reason", "absent", "statusNot"})


def precedence_rank(key: str, given: list[str]) -> tuple[int, int]:
    """Sort key of a ``statusMappings`` key: the generic statuses the definition lists
    first, in its order; every other key after them in upstream's order of *keys*.

    Ranking by key, not by generic status, matters: ``resuming`` is an alias of
    ``initializing`` and comes first in upstream's order, so ranking generic statuses by
    the first key that maps to them put ``initializing`` before ``completed`` and a
    finished PyTorchJob (Created and Succeeded both True) read ``initializing``.
    Upstream ranks its ``Resuming`` first but its ``Initializing`` after Completed.
    """
    generic = GENERIC_OF_KEY[key]
    if generic in given:
        return (given.index(generic), DEFAULT_PRECEDENCE.index(key))
    return (len(given) + DEFAULT_PRECEDENCE.index(key), 0)


class StatusReader(Recorder):
    """The status part of a definition reader."""

    def _status(self, value: Any, field: str, *, used: bool) -> StatusRules | None:
        raw = self._mapping(value, field, allowed=_STATUSDEF)
        if raw is None:
            return None
        section: Literal["status"] | None = "status" if used else None
        phase_raw = self._mapping(raw.get("phaseDefinition"), f"{field}.phaseDefinition",
                                  allowed=frozenset({"path"}))
        phase = None
        if phase_raw is not None:
            self._string(phase_raw.get("path"), f"{field}.phaseDefinition.path",
                         required=True)
            phase = self._expr(phase_raw.get("path"), f"{field}.phaseDefinition.path",
                               section=section)
        cond_raw = self._mapping(raw.get("conditionsDefinition"),
                                 f"{field}.conditionsDefinition",
                                 allowed=frozenset({"path", *_CONDDEF}))
        conditions = None
        names = dict(_CONDDEF)
        if cond_raw is not None:
            self._string(cond_raw.get("path"), f"{field}.conditionsDefinition.path",
                         required=True)
            conditions = self._expr(cond_raw.get("path"), f"{field}.conditionsDefinition.path",
                                    section=section)
            for key, default in _CONDDEF.items():
                # CRD default; an explicit null also means the default (as the API server)
                names[key] = self._string(cond_raw.get(key),
                                          f"{field}.conditionsDefinition.{key}") or default
        mappings_raw = self._mapping(raw.get("statusMappings"), f"{field}.statusMappings") or {}
        mappings: dict[str, tuple[Matcher, ...]] = {}
        for key, matchers in mappings_raw.items():
            where = f"{field}.statusMappings.{key}"
            if key not in GENERIC_OF_KEY:
                self._issue(where, f"unknown status; use one of {', '.join(GENERIC_OF_KEY)}")
                continue
            mappings[key] = tuple(
                self._matcher(m, f"{where}[{i}]", section=section)
                for i, m in enumerate(self._list(matchers, where)))
        given = self._precedence(raw.get("statusPrecedence"), f"{field}.statusPrecedence")
        ordered = sorted(mappings, key=lambda key: precedence_rank(key, given))
        return StatusRules(
            phase=phase, conditions=conditions, type_field=names["typeFieldName"],
            status_field=names["statusFieldName"], reason_field=names["reasonFieldName"],
            message_field=names["messageFieldName"],
            mappings=tuple((key, mappings[key]) for key in ordered))

    def _precedence(self, value: Any, field: str) -> list[str]:
        """The generic statuses named by ``statusPrecedence``, in order (aliases resolved)."""
        given: list[str] = []
        for i, item in enumerate(self._list(value, field)):
            name = self._string(item, f"{field}[{i}]")
            if name is None:
                continue
            generic = GENERIC_OF_KEY.get(name)
            if generic is None:
                self._issue(f"{field}[{i}]", f"unknown status {name!r}")
            elif generic not in given:
                given.append(generic)
        return given

    def _matcher(self, value: Any, field: str, *, section: Literal["status"] | None) -> Matcher:
        raw = self._mapping(value, field, allowed=_MATCHER)
        if raw is None:
            return Matcher(phase="\0never")  # already reported
        phase = self._string(raw.get("byPhase"), f"{field}.byPhase") or ""
        conditions = tuple(
            self._expected(c, f"{field}.byConditions[{i}]")
            for i, c in enumerate(self._list(raw.get("byConditions"), f"{field}.byConditions")))
        expression = None
        expr_raw = self._mapping(raw.get("byExpression"), f"{field}.byExpression",
                                 allowed=frozenset({"expression", "expectedResult"}))
        if expr_raw is not None:
            text = self._string(expr_raw.get("expression"),
                                f"{field}.byExpression.expression", required=True)
            expected = self._string(expr_raw.get("expectedResult"),
                                    f"{field}.byExpression.expectedResult", required=True)
            if text:
                self._check_jq(text, f"{field}.byExpression.expression")
                wrapped = f"(({text}\n) | tostring) == {json.dumps(expected or '')}"
                expression = Expr(text=text, field=f"{field}.byExpression.expression",
                                  slot=-1, section="status")
                if section is not None:
                    slots = self._texts["status"]
                    slots.append(wrapped)
                    expression = Expr(text=text, field=expression.field,
                                      slot=len(slots) - 1, section="status")
        note = self._string(raw.get("differsFromUpstream"), f"{field}.differsFromUpstream")
        return Matcher(phase=phase, conditions=conditions, expression=expression,
                       upstream_differs=note or None)

    def _expected(self, value: Any, field: str) -> Condition:
        raw = self._mapping(value, field, allowed=_EXPECTED) or {}
        ctype = self._string(raw.get("type"), f"{field}.type", required=True) or ""
        status = self._string(raw.get("status"), f"{field}.status") or ""
        reason = self._string(raw.get("reason"), f"{field}.reason") or ""
        absent = raw.get("absent", False)
        if not isinstance(absent, bool):
            self._issue(f"{field}.absent", "must be true or false")
            absent = False
        status_not = self._string(raw.get("statusNot"), f"{field}.statusNot")
        if absent and (status or reason or status_not is not None):
            self._issue(field, "absent: true cannot be combined with status, reason or "
                        "statusNot")
        if status and status_not is not None:
            self._issue(field, "status and statusNot cannot be combined")
        return Condition(type=ctype, status=status, reason=reason, absent=absent,
                         status_not=status_not)
