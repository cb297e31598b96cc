"""A hub Kueue Workload as MultiKueue's external dispatcher reads it (Kueue v0.17.0).

Pure. With the manager's ``multiKueue.dispatcherName`` set to ours, MultiKueue copies a job
only to the worker clusters a dispatcher lists in ``status.nominatedClusterNames``
(``pkg/controller/admissionchecks/multikueue/workload.go``, the external path). A Workload
waits for a nomination when (``workloaddispatcher/incrementaldispatcher.go``, the
built-in's filter): it is not being deleted nor finished, holds quota (``QuotaReserved``
True), its MultiKueue admission check is ``Pending`` and it has no ``status.clusterName``.
Once a worker admits a copy MultiKueue sets ``clusterName`` and empties the nominations in
one patch; an eviction resets both, and the check returns to ``Pending``.

``pod_sets_demand`` reads what the workload asks of a worker from its pod sets when its
job's own definition cannot say more (gangs, topology): one gang of every pod, as Kueue
admits a workload all at once (a pod set's ``minCount``: partial admission).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.workloads.demand import Demand, Gang, PodShape
from dispatcher.workloads.podspec import pod_needs

__all__ = ["MAX_NOMINATED", "MULTIKUEUE_CONTROLLER", "KueueWorkload", "pod_sets_demand"]

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""``AdmissionCheck.spec.controllerName`` of a MultiKueue check."""
MAX_NOMINATED = 20
"""``status.nominatedClusterNames`` holds at most this many (``MaxItems=20``)."""


@dataclass(frozen=True, kw_only=True)
class KueueWorkload:
    """One hub Workload, read for nomination. ``check`` is its MultiKueue admission check
    (the name of one whose AdmissionCheck has the MultiKueue controller), ``check_state``
    that check's state and ``check_since`` its last transition (epoch seconds)."""

    uid: str
    namespace: str
    name: str
    owner: tuple[str, str, str] | None  # (apiVersion, kind, name) of its job
    queue: str
    quota_reserved: bool
    finished: bool
    deleting: bool
    check: str | None
    check_state: str | None
    check_since: float | None
    cluster: str | None
    nominated: tuple[str, ...]
    resource_version: str

    @classmethod
    def of(cls, obj: Mapping[str, Any], multikueue_checks: frozenset[str],
           parse_time: Callable[[Any], float | None]) -> KueueWorkload:
        """Read ``obj``; ``multikueue_checks`` names the AdmissionChecks whose controller is
        MultiKueue's; ``parse_time`` turns an RFC 3339 stamp into epoch seconds (or None)."""
        meta = obj.get("metadata") or {}
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        conditions = {str(c.get("type")): str(c.get("status"))
                      for c in status.get("conditions") or () if isinstance(c, Mapping)}
        check = next((c for c in status.get("admissionChecks") or ()
                      if isinstance(c, Mapping) and c.get("name") in multikueue_checks), None)
        owner = next((r for r in meta.get("ownerReferences") or ()
                      if isinstance(r, Mapping) and r.get("controller") is True), None)
        nominated = status.get("nominatedClusterNames") or ()
        return cls(
            uid=str(meta.get("uid") or ""), namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            owner=(str(owner.get("apiVersion")), str(owner.get("kind")), str(owner.get("name")))
            if owner else None,
            queue=str(spec.get("queueName") or ""),
            quota_reserved=conditions.get("QuotaReserved") == "True",
            finished=conditions.get("Finished") == "True",
            deleting=bool(meta.get("deletionTimestamp")),
            check=str(check["name"]) if check else None,
            check_state=str(check.get("state") or "") if check else None,
            check_since=parse_time(check.get("lastTransitionTime")) if check else None,
            cluster=str(status["clusterName"]) if status.get("clusterName") else None,
            nominated=tuple(str(n) for n in nominated if isinstance(n, str)),
            resource_version=str(meta.get("resourceVersion") or ""))

    def waiting(self) -> str | None:
        """None when it waits for a nomination, else why it does not (for the log)."""
        if self.check is None:
            return "no MultiKueue admission check"
        if self.deleting or self.finished:
            return "finished" if self.finished else "being deleted"
        if self.cluster is not None:
            return f"running on {self.cluster} (MultiKueue chose it)"
        if not self.quota_reserved:
            return "no quota reserved on the hub yet (Kueue decides that)"
        if self.check_state != "Pending":
            return f"its MultiKueue check is {self.check_state}"
        return None


def pod_sets_demand(obj: Mapping[str, Any]) -> Demand:
    """The Workload's pod sets as one gang (Kueue admits them together); ValueError when a
    pod set is not a valid count and pod template."""
    shapes: list[PodShape] = []
    pods = min_pods = 0
    for index, pod_set in enumerate((obj.get("spec") or {}).get("podSets") or ()):
        where = f"spec.podSets[{index}]"
        if not isinstance(pod_set, Mapping):
            raise ValueError(f"{where} is not an object")
        count, least = pod_set.get("count", 1), pod_set.get("minCount")
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"{where}.count must be a non-negative integer, got {count!r}")
        if least is not None and (not isinstance(least, int) or not 0 <= least <= count):
            raise ValueError(f"{where}.minCount must be an integer in 0..count, got {least!r}")
        template = pod_set.get("template") or {}
        needs = pod_needs(template.get("spec") if isinstance(template, Mapping) else None)
        if count:
            shapes.append(PodShape(count=count, gpus=needs.gpus, gpu_product=needs.gpu_product,
                                   cpu=needs.cpu, memory=needs.memory,
                                   node_selector=needs.node_selector,
                                   tolerations=needs.tolerations))
        pods += count
        min_pods += count if least is None else least
    name = str((obj.get("metadata") or {}).get("name") or "workload")
    return Demand(gangs=(Gang(name=name, pods=pods, min_pods=min_pods,
                              pod_shapes=tuple(shapes)),) if pods else ())
