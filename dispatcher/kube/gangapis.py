"""The gang mechanisms a member's scheduler may honour, and the APIs that tell them apart.

kube-scheduler binds pod by pod: between the dispatcher's decision and the last binding,
pods submitted directly to the member can take part of the nodes and leave a gang half
bound, its GPUs idle. A member scheduler with gang admission binds a gang all or nothing.
Two are known:

- ``workload-api``: Kubernetes 1.35's built-in ``scheduling.k8s.io/v1alpha1`` ``Workload``
  (``spec.podGroups[].policy.gang.minCount``), pods joined by ``spec.workloadRef: {name,
  podGroup}``; the apiserver serves it with ``--runtime-config=scheduling.k8s.io/v1alpha1=true``
  and the ``GenericWorkload`` gate, kube-scheduler's ``GangScheduling`` plugin (gates
  ``GenericWorkload,GangScheduling``) holds the pods at PreEnqueue until ``minCount`` exist
  and at Permit until ``minCount`` have a node (k8s.io/api scheduling/v1alpha1/types.go,
  core/v1 ``WorkloadReference``; pkg/scheduler/framework/plugins/gangscheduling);
- ``coscheduling``: the scheduler-plugins ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``,
  ``spec.minMember``), pods joined by the label ``scheduling.x-k8s.io/pod-group``.

Which one a member has is read from the APIs it serves (``discovered``); a MemberCluster's
``spec.gangScheduling`` overrides it (``effective``), since serving an API does not prove
the scheduler runs the plugin. Pure.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, Literal

from dispatcher.kube.resources import GroupVersionKind

__all__ = ["AUTO", "COSCHEDULING", "MECHANISMS", "NONE", "POD_GROUP", "POD_GROUP_LABEL",
           "SETTINGS", "WORKLOAD", "WORKLOAD_API", "Mechanism", "discovered", "effective"]

Mechanism = Literal["none", "workload-api", "coscheduling"]

NONE: Final = "none"
WORKLOAD_API: Final = "workload-api"
COSCHEDULING: Final = "coscheduling"
MECHANISMS: tuple[Mechanism, ...] = (NONE, WORKLOAD_API, COSCHEDULING)
AUTO: Final = "auto"
SETTINGS: tuple[str, ...] = (AUTO, *MECHANISMS)
"""Values of MemberCluster ``spec.gangScheduling`` (``auto``: as discovered)."""

WORKLOAD = GroupVersionKind("scheduling.k8s.io", "v1alpha1", "Workload")
POD_GROUP = GroupVersionKind("scheduling.x-k8s.io", "v1alpha1", "PodGroup")
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""The label that joins a pod to its PodGroup (scheduler-plugins coscheduling)."""


def discovered(served: Collection[GroupVersionKind]) -> Mechanism:
    """The mechanism the served APIs point to: the built-in Workload API first (the
    default scheduler's own plugin), then a PodGroup CRD, else ``none``."""
    if WORKLOAD in served:
        return WORKLOAD_API
    if POD_GROUP in served:
        return COSCHEDULING
    return NONE


def effective(setting: str, found: Mechanism | None) -> Mechanism:
    """What to use: the spec's choice, or under ``auto`` what was discovered (``none``
    while discovery has not answered)."""
    for mechanism in MECHANISMS:
        if setting == mechanism:
            return mechanism
    return found or NONE
