"""Which scheduling fields a tenant's pod template may set: the operator's policy, pure.

The fields (``workloads.podfields``: ``nodeName``, ``priority``, ``priorityClassName``,
``schedulerName``) decide how a member schedules a pod, so they are the member's policy,
not the tenant's choice (docs/security.md, finding 5). The rule, per hub namespace:

- ``nodeName`` and ``priority``: always refused. A pod bound to a node skips the
  scheduler, its taints and the dispatcher's own node accounting (placement chose nodes
  and reserved their GPUs; a pinned pod lands outside them); no setting allows it, so
  placement can never miss a pod the copy pins itself. ``priority`` is computed by the
  member from the class and never needs to be written.
- ``priorityClassName``: allowed when the class is in ``submit.podTemplate
  .allowedPriorityClasses`` (every namespace) or in the namespace's ``byNamespace`` entry,
  or equals the class the operator forces on every pod (``submit.podTemplate
  .priorityClassName``); otherwise refused. Default: no class is allowed.
- ``schedulerName``: the same with ``allowedSchedulers``; ``default-scheduler`` (the
  member's own, what an unset field means) is always allowed.

A refusal parks the workload before placement (``PendingReason.POD_TEMPLATE_REFUSED``, the
field's JSON path in the message), and a spec change that adds one is not written to the
copy: refusing loses nothing silently, where stripping the field would run the workload
differently than its owner asked and say nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from dispatcher.workloads.podfields import (
    DEFAULT_SCHEDULER,
    NODE_NAME,
    PRIORITY,
    PRIORITY_CLASS,
    SCHEDULER,
    PodField,
)

__all__ = ["DEFAULT_SCHEDULER", "Allowed", "PodFieldPolicy", "refusal", "refusals"]

_NO_NAMESPACES: Mapping[str, Allowed] = MappingProxyType({})
_LISTED = 5  # allowed names (and refusals) shown in a message
_VALUE_LIMIT = 80


@dataclass(frozen=True, kw_only=True)
class Allowed:
    """Names a tenant's pod template may give (``allowedPriorityClasses``,
    ``allowedSchedulers``)."""

    priority_classes: frozenset[str] = frozenset()
    schedulers: frozenset[str] = frozenset()

    def __or__(self, other: Allowed) -> Allowed:
        return Allowed(priority_classes=self.priority_classes | other.priority_classes,
                       schedulers=self.schedulers | other.schedulers)


@dataclass(frozen=True, kw_only=True)
class PodFieldPolicy:
    """``submit.podTemplate``'s allow-lists, and the values it forces on every pod.

    ``allowed`` holds in every namespace; ``by_namespace`` adds to it for one. ``forced_*``
    are ``submit.podTemplate.priorityClassName``/``schedulerName`` (written over every
    pod template of every copy): a tenant value equal to them is allowed, any other is
    refused rather than silently overwritten.
    """

    allowed: Allowed = field(default_factory=Allowed)
    by_namespace: Mapping[str, Allowed] = field(default_factory=lambda: _NO_NAMESPACES)
    forced_priority_class: str | None = None
    forced_scheduler: str | None = None

    def with_forced(self, *, priority_class: str | None, scheduler: str | None
                    ) -> PodFieldPolicy:
        """The same allow-lists with the forced values of ``submit.podTemplate``."""
        return replace(self, forced_priority_class=priority_class, forced_scheduler=scheduler)

    def for_namespace(self, namespace: str) -> Allowed:
        """What a pod template of ``namespace`` may name (forced values included)."""
        allowed = self.allowed | self.by_namespace.get(namespace, Allowed())
        forced = Allowed(
            priority_classes=frozenset(filter(None, [self.forced_priority_class])),
            schedulers=frozenset([DEFAULT_SCHEDULER, *filter(None, [self.forced_scheduler])]))
        return allowed | forced


def _names(values: frozenset[str]) -> str:
    shown = sorted(values)
    more = f", … ({len(shown) - _LISTED} more)" if len(shown) > _LISTED else ""
    return ", ".join(shown[:_LISTED]) + more if shown else "none"


def _shown(value: object) -> str:
    """A tenant's value for a message: quoted, escaped (no terminal control), bounded."""
    text = repr(value)
    return text if len(text) <= _VALUE_LIMIT else text[:_VALUE_LIMIT - 1] + "…"


def _why(item: PodField, allowed: Allowed, namespace: str) -> str | None:
    """Why ``item`` may not be set in ``namespace``, or None when it may."""
    value, shown = item.value, _shown(item.value)
    if item.field == NODE_NAME:
        return (f"{item.path}: nodeName {shown} binds the pod past the member's scheduler "
                f"and its taints; the dispatcher places pods, remove it (use a "
                f"nodeSelector or affinity)")
    if item.field == PRIORITY:
        return (f"{item.path}: priority {shown} is set by the member from the priority "
                f"class; remove it")
    if item.field == PRIORITY_CLASS:
        if isinstance(value, str) and value in allowed.priority_classes:
            return None
        return (f"{item.path}: priority class {shown} is not allowed in namespace "
                f"{namespace} (allowed: {_names(allowed.priority_classes)}; "
                f"submit.podTemplate.allowedPriorityClasses)")
    if item.field == SCHEDULER:
        if isinstance(value, str) and value in allowed.schedulers:
            return None
        return (f"{item.path}: scheduler {shown} is not allowed in namespace {namespace} "
                f"(allowed: {_names(allowed.schedulers)}; "
                f"submit.podTemplate.allowedSchedulers)")
    return None


def refusals(fields: Iterable[PodField], *, namespace: str, policy: PodFieldPolicy
             ) -> list[str]:
    """Every field of ``fields`` a pod template of ``namespace`` may not set, each as
    ``<JSON path>: <why>``, in the order given (pod templates in definition order)."""
    items = tuple(fields)
    if not items:  # the common case, on every placement: nothing to look up
        return []
    allowed = policy.for_namespace(namespace)
    return [why for item in items if (why := _why(item, allowed, namespace)) is not None]


def refusal(fields: Iterable[PodField], *, namespace: str, policy: PodFieldPolicy
            ) -> str | None:
    """The message that parks a workload whose pod templates set a refused field (all of
    them, ``; ``-separated), or None when every field is allowed."""
    found = refusals(fields, namespace=namespace, policy=policy)
    if not found:
        return None
    more = f"; and {len(found) - _LISTED} more" if len(found) > _LISTED else ""
    return (f"pod template refused: {'; '.join(found[:_LISTED])}{more}; never submitted "
            f"until it is fixed")
