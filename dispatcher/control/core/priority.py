"""A workload's queue priority: the user's annotation, capped by what the operator allows.

Any hub user can write any annotation, so ``dispatcher.io/priority`` alone cannot be trusted:
it is honoured only up to the cap the operator set for the workload's namespace in the
config file (``queue.priority``). A per-namespace cap in the config was chosen over
PriorityClass objects because the namespace is already the unit the operator grants (RBAC,
``allowedNamespaces``), the cap is checked at start with the other settings, and it needs no
new RBAC rule nor a watch; a PriorityClass name would still need a per-namespace allow-list
to stop a team from naming the highest class.

``priority = min(annotation, or the default when absent; the namespace's cap)``. A value that
is not a plain integer within ``±PRIORITY_LIMIT`` is an error on the Dispatch, never a
silent 0: the user asked for something, and guessing what would be worse than saying no.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["PRIORITY_ANNOTATION", "PRIORITY_LIMIT", "InvalidPriority", "PriorityPolicy"]

PRIORITY_ANNOTATION = "dispatcher.io/priority"
PRIORITY_LIMIT = 1_000_000_000
"""Largest magnitude accepted (Kubernetes' user PriorityClass range ends here too)."""

_INTEGER = re.compile(r"[+-]?[0-9]{1,10}")
_EMPTY: Mapping[str, int] = MappingProxyType({})


class InvalidPriority(ValueError):
    """The annotation is not an integer in range; the message is for the Dispatch."""


@dataclass(frozen=True, kw_only=True)
class PriorityPolicy:
    """``queue.priority`` in the config file: the default and the caps."""

    default: int = 0
    """Priority of a workload without the annotation (before the cap)."""
    max: int = 0
    """Cap for namespaces not in ``max_by_namespace``: by default the annotation can only
    lower a workload's priority."""
    max_by_namespace: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    """Cap per namespace (a namespace may also be capped below the default)."""

    def __post_init__(self) -> None:
        values = {"default": self.default, "max": self.max,
                  **{f"maxByNamespace.{k}": v for k, v in self.max_by_namespace.items()}}
        for key, value in values.items():
            if abs(value) > PRIORITY_LIMIT:
                raise ValueError(f"queue.priority.{key} must be between -{PRIORITY_LIMIT} "
                                 f"and {PRIORITY_LIMIT}, got {value}")

    def cap(self, namespace: str) -> int:
        """The highest priority a workload of ``namespace`` may have."""
        return self.max_by_namespace.get(namespace, self.max)

    def of(self, annotations: Mapping[str, str] | None, namespace: str) -> int:
        """The workload's priority; InvalidPriority when the annotation is junk."""
        raw = (annotations or {}).get(PRIORITY_ANNOTATION)
        if raw is None:
            return min(self.default, self.cap(namespace))
        text = str(raw).strip()
        if not _INTEGER.fullmatch(text) or abs(int(text)) > PRIORITY_LIMIT:
            shown = text if len(text) <= 40 else f"{text[:37]}... ({len(text)} characters)"
            raise InvalidPriority(
                f"invalid annotation {PRIORITY_ANNOTATION}={shown!r}: expected an integer "
                f"between -{PRIORITY_LIMIT} and {PRIORITY_LIMIT} (capped at "
                f"{self.cap(namespace)} in namespace {namespace or '(none)'}); "
                f"not dispatched until it is fixed")
        return min(int(text), self.cap(namespace))
