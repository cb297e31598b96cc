"""How a member queues batch work: declared (``spec.queueing``) or discovered, and the queue
label a copy carries there.

Pure. Many GPU members run a queueing system in front of their scheduler — most often
Kueue, where quota decides what starts and a job names its LocalQueue with the label
``kueue.x-k8s.io/queue-name``. A member declares how it queues (MemberCluster
``spec.queueing``, a static member's or a fleet file's ``queueing``): ``system`` (``auto``:
as its served APIs say, ``none``, ``kueue``) and the LocalQueue a copy goes to, one for
every namespace (``localQueue``) or per namespace (``localQueues``). The copy plan
(``control.core.copyplan``) writes the label: the declared queue; else, on a member that
runs Kueue, the hub object's own label (a fleet that names its queues alike) or none (the
member's LocalQueue defaulting: a LocalQueue named ``default`` in the namespace, stable in
Kueue v0.17); on a member that runs none, never the hub's value (it would name a queue
the member does not have).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from dispatcher.kube.resources import GroupVersionKind

__all__ = ["AUTO", "KUEUE", "LOCAL_QUEUES", "NONE", "QUEUE_LABEL", "SYSTEMS", "Queueing",
           "System", "parse"]

System = Literal["auto", "none", "kueue"]
AUTO: Final = "auto"
NONE: Final = "none"
KUEUE: Final = "kueue"
SYSTEMS: tuple[System, ...] = (AUTO, NONE, KUEUE)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label a Kueue job names its LocalQueue with (``constants.QueueLabel``)."""
LOCAL_QUEUES = (GroupVersionKind.of("kueue.x-k8s.io/v1beta2", "LocalQueue"),
                GroupVersionKind.of("kueue.x-k8s.io/v1beta1", "LocalQueue"))
"""A member serving either runs Kueue (discovery; the newest version first)."""
_NO_QUEUES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class Queueing:
    """A member's queueing: ``system`` (declared; ``auto`` until ``effective`` resolves it)
    and the LocalQueue copies go to: ``local_queues`` by namespace, else ``local_queue``."""

    system: System = AUTO
    local_queue: str | None = None
    local_queues: Mapping[str, str] = field(default_factory=lambda: _NO_QUEUES)

    def effective(self, *, discovered: bool | None) -> Queueing:
        """With ``system`` resolved: ``auto`` is ``kueue`` when the member serves Kueue's
        LocalQueue (``discovered``; None: not asked yet, taken as none)."""
        if self.system != AUTO:
            return self
        return Queueing(system=KUEUE if discovered else NONE, local_queue=self.local_queue,
                        local_queues=self.local_queues)

    def queue_for(self, namespace: str) -> str | None:
        """The declared LocalQueue of ``namespace``, or None."""
        return self.local_queues.get(namespace, self.local_queue)

    def label(self, namespace: str, hub_value: str | None) -> str | None:
        """The queue label a copy in ``namespace`` carries on this member (``system``
        resolved), given the hub object's own value: see the module docstring."""
        if self.system != KUEUE:
            return None
        return self.queue_for(namespace) or hub_value

    def describe(self) -> str:
        """One cell for tables: ``kueue:team-a``, ``kueue(2 namespaces)``, ``none``."""
        if self.system != KUEUE:
            return str(self.system)
        if self.local_queues:
            default = f", else {self.local_queue}" if self.local_queue else ""
            return f"kueue({len(self.local_queues)} namespaces{default})"
        return f"kueue:{self.local_queue}" if self.local_queue else "kueue"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"system": self.system}
        if self.local_queue:
            out["localQueue"] = self.local_queue
        if self.local_queues:
            out["localQueues"] = dict(self.local_queues)
        return out


def parse(value: Any, *, where: str) -> Queueing:
    """``queueing`` as written in a MemberCluster spec, a static member or a fleet file;
    ValueError names ``where`` and the key."""
    if value is None:
        return Queueing()
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object (system, localQueue, localQueues)")
    unknown = sorted(set(value) - {"system", "localQueue", "localQueues"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (system, localQueue, "
                         f"localQueues)")
    system = value.get("system") or AUTO
    if system not in SYSTEMS:
        raise ValueError(f"{where}.system: {system!r} is not one of {', '.join(SYSTEMS)}")
    local_queue = value.get("localQueue")
    if local_queue is not None and (not isinstance(local_queue, str) or not local_queue):
        raise ValueError(f"{where}.localQueue: must be a LocalQueue name")
    by_namespace = value.get("localQueues") or {}
    if not isinstance(by_namespace, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in by_namespace.items()):
        raise ValueError(f"{where}.localQueues: must map namespaces to LocalQueue names")
    if system == NONE and (local_queue or by_namespace):
        raise ValueError(f"{where}: system none takes no LocalQueue")
    return Queueing(system=system, local_queue=local_queue,
                    local_queues=MappingProxyType(dict(by_namespace)))
