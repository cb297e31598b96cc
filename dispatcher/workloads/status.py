"""Generic status of a workload from its phase and conditions (upstream matcher semantics).

Upstream returns every matched status in a fixed order and never picks one; here the order
is the definition's precedence (default: upstream's newer order plus ``pending``) and the
first is *the* status. No match -> ``unknown`` (upstream ``Undefined``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.workloads.jqrun import JqFailure
from dispatcher.workloads.model import (
    GENERIC_OF_KEY,
    Condition,
    Expr,
    GenericStatus,
    Matcher,
    StatusRules,
)

_MAP = (dict, Mapping)  # dict first: isinstance on the Mapping ABC is slow

__all__ = ["ConditionValue", "StatusReading", "read_status"]

Results = Sequence[list[Any] | JqFailure]
Fail = Callable[[Expr, str], Exception]


@dataclass(frozen=True, kw_only=True)
class ConditionValue:
    """One condition read from the object with the definition's field names."""

    type: str
    status: str | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class StatusReading:
    """Phase, conditions and the matched generic statuses (precedence order, deduped)."""

    phase: str | None
    conditions: tuple[ConditionValue, ...]
    statuses: tuple[GenericStatus, ...]
    upstream_differs: str | None = None
    """The ``differsFromUpstream`` reason of the matcher that decided the status."""

    @property
    def status(self) -> GenericStatus:
        """The winning generic status."""
        return self.statuses[0]


def read_status(rules: StatusRules | None, results: Results, *, fail: Fail) -> StatusReading:
    """Evaluate the status rules on batch ``results``; ``fail`` builds the error to raise."""
    if rules is None:
        return StatusReading(phase=None, conditions=(), statuses=(GenericStatus.UNKNOWN,))
    phase = _phase(rules.phase, results, fail=fail)
    conditions = _conditions(rules, results, fail=fail)
    by_type = {c.type: c for c in conditions}  # a later entry of a type overwrites
    matched: list[GenericStatus] = []
    note: str | None = None
    for key, matchers in rules.mappings:
        generic = GENERIC_OF_KEY[key]
        if generic in matched:
            continue
        hit = next((m for m in matchers if _matches(m, phase=phase, by_type=by_type,
                                                     results=results, fail=fail)), None)
        if hit is not None:
            if not matched:  # the winner's: what decided the status
                note = hit.upstream_differs
            matched.append(generic)
    return StatusReading(phase=phase, conditions=conditions,
                         statuses=tuple(matched) or (GenericStatus.UNKNOWN,),
                         upstream_differs=note)


def _first(expr: Expr, results: Results, *, fail: Fail) -> tuple[bool, Any]:
    value = results[expr.slot]
    if isinstance(value, JqFailure):
        raise fail(expr, value.message)
    return (True, value[0]) if value else (False, None)


def _phase(expr: Expr | None, results: Results, *, fail: Fail) -> str | None:
    if expr is None:
        return None
    found, value = _first(expr, results, fail=fail)
    if not found:
        return None
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(expr, f"phase must be a string, not {type(value).__name__}")
    return value


def _conditions(rules: StatusRules, results: Results, *, fail: Fail
                ) -> tuple[ConditionValue, ...]:
    expr = rules.conditions
    if expr is None:
        return ()
    value = results[expr.slot]
    if isinstance(value, JqFailure):
        raise fail(expr, value.message)
    out: list[ConditionValue] = []
    for item in value:
        if item is None:
            continue
        if not isinstance(item, list):
            raise fail(expr, f"failed to extract conditions: want a list, got "
                             f"{type(item).__name__}")
        for entry in item:
            if not isinstance(entry, _MAP):
                raise fail(expr, "failed to extract conditions: an entry is not an object")
            out.append(ConditionValue(
                type=_text(entry.get(rules.type_field)) or "",
                status=_text(entry.get(rules.status_field)),
                reason=_text(entry.get(rules.reason_field)),
                message=_text(entry.get(rules.message_field))))
    return tuple(out)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _matches(matcher: Matcher, *, phase: str | None, by_type: Mapping[str, ConditionValue],
             results: Results, fail: Fail) -> bool:
    if matcher.phase and phase != matcher.phase:
        return False
    if not all(_condition_holds(c, by_type) for c in matcher.conditions):
        return False
    if matcher.expression is not None:
        _, value = _first(matcher.expression, results, fail=fail)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise fail(matcher.expression, "failed to match status: not a boolean")
        return value
    return True


def _condition_holds(expected: Condition, by_type: Mapping[str, ConditionValue]) -> bool:
    actual = by_type.get(expected.type)
    if expected.absent:
        return actual is None
    if expected.status_not is not None:
        if actual is not None and (actual.status or "") == expected.status_not:
            return False
        return not expected.reason or (actual is not None
                                       and (actual.reason or "") == expected.reason)
    if actual is None:
        return False  # upstream: an absent condition never matches
    if expected.status and (actual.status or "") != expected.status:
        return False
    return not expected.reason or (actual.reason or "") == expected.reason
