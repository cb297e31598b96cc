"""The gang mechanisms a member's scheduler may honour, and the APIs that tell them apart.

kube-scheduler binds pod by pod: between the dispatcher's decision and the last binding,
pods submitted directly to the member can take part of the nodes and leave a gang half
bound, its GPUs idle. A member scheduler with gang admission binds a gang all or nothing.
Known:

- ``workload-api``: Kubernetes 1.35's built-in ``scheduling.k8s.io/v1alpha1`` ``Workload``
  (``spec.podGroups[].policy.gang.minCount``, at most 8), pods joined by
  ``spec.workloadRef: {name, podGroup}``; served with
  ``--runtime-config=scheduling.k8s.io/v1alpha1=true`` and the ``GenericWorkload`` gate;
  kube-scheduler's ``GangScheduling`` plugin (gates ``GenericWorkload,GangScheduling``)
  holds the pods at PreEnqueue until ``minCount`` exist and at Permit until ``minCount``
  have a node (k8s.io/api v0.35 scheduling/v1alpha1/types.go; core/v1 WorkloadReference);
- ``podgroup-v1alpha2`` (1.36) and ``podgroup-v1beta1`` (1.37): a standalone ``PodGroup``
  per gang (``spec.schedulingPolicy.gang.minCount``), pods joined by
  ``spec.schedulingGroup: {podGroupName}`` (1.36 tombstoned ``workloadRef``); 1.37 serves
  v1beta1 with ``--runtime-config=scheduling.k8s.io/v1beta1=true`` and ``GenericWorkload``
  (Beta, off by default), its scheduler reads PodGroups through v1beta1 only and its
  plugin needs no other gate (k8s.io/api v0.36/v0.37 scheduling, core/v1 PodSchedulingGroup;
  pkg/scheduler/framework/plugins/gangscheduling at v1.37.2);
- ``compositepodgroup-v1alpha3`` (1.37, alpha): the v1beta1 PodGroups above, plus
  hierarchical gangs: a ``scheduling.k8s.io/v1alpha3`` ``CompositePodGroup``
  (``spec.schedulingPolicy.gang.minGroupCount``) whose child PodGroups name it in
  ``spec.parentCompositePodGroupName``; kube-scheduler admits a child gang only once
  ``minGroupCount`` of its siblings meet their own ``minCount``
  (pkg/scheduler/framework/plugins/gangscheduling ``checkCPGHierarchyReadiness`` at
  v1.37.2). Served with ``--runtime-config=scheduling.k8s.io/v1alpha3=true`` and the
  ``CompositePodGroup`` gate (which needs ``GenericWorkload`` and
  ``TopologyAwareWorkloadScheduling``); pods are joined as for ``podgroup-v1beta1``;
- ``coscheduling``: the scheduler-plugins ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``,
  ``spec.minMember``), pods joined by the label ``scheduling.x-k8s.io/pod-group``.

The three built-in ones are dialects of one API that changed shape across minors: a member
is spoken to in the one it serves. An apiserver lists a gang version only with both its
group enabled and its gate on (pkg/registry/scheduling/rest/storage_scheduling.go), so a
1.37 member with the gate off serves none: ``note`` says so from its version, the one
case where "not served" means "disabled here" rather than "not in this Kubernetes".

Which one a member has is read from the APIs it serves (``discovered``); a MemberCluster's
``spec.gangScheduling`` overrides it (``effective``), since serving an API does not prove
the scheduler runs the plugin. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final, Literal

from dispatcher.kube.resources import GroupVersionKind

__all__ = [
    "API_OF",
    "AUTO",
    "BUILTIN",
    "COMPOSITE_POD_GROUP",
    "COMPOSITE_V1ALPHA3",
    "COSCHEDULING",
    "MECHANISMS",
    "NONE",
    "PODGROUP_V1ALPHA2",
    "PODGROUP_V1BETA1",
    "POD_GROUP",
    "POD_GROUP_LABEL",
    "SETTINGS",
    "WORKLOAD",
    "WORKLOAD_API",
    "WORKLOAD_V1BETA1",
    "Mechanism",
    "builtin_at",
    "discovered",
    "effective",
    "leaf",
    "minor_number",
    "note",
]

Mechanism = Literal["none", "workload-api", "podgroup-v1alpha2", "podgroup-v1beta1",
                    "compositepodgroup-v1alpha3", "coscheduling"]

NONE: Final = "none"
WORKLOAD_API: Final = "workload-api"
PODGROUP_V1ALPHA2: Final = "podgroup-v1alpha2"
PODGROUP_V1BETA1: Final = "podgroup-v1beta1"
COMPOSITE_V1ALPHA3: Final = "compositepodgroup-v1alpha3"
COSCHEDULING: Final = "coscheduling"
MECHANISMS: tuple[Mechanism, ...] = (NONE, WORKLOAD_API, PODGROUP_V1ALPHA2, PODGROUP_V1BETA1,
                                     COMPOSITE_V1ALPHA3, COSCHEDULING)
_DIALECTS: tuple[Mechanism, ...] = (PODGROUP_V1BETA1, PODGROUP_V1ALPHA2, WORKLOAD_API)
BUILTIN: tuple[Mechanism, ...] = (COMPOSITE_V1ALPHA3, *_DIALECTS)
"""The dialects of the built-in gang API, newest first (hierarchical gangs before plain)."""
AUTO: Final = "auto"
SETTINGS: tuple[str, ...] = (AUTO, *MECHANISMS)
"""Values of MemberCluster ``spec.gangScheduling`` (``auto``: as discovered)."""

WORKLOAD = GroupVersionKind("scheduling.k8s.io", "v1alpha1", "Workload")
POD_GROUP = GroupVersionKind("scheduling.x-k8s.io", "v1alpha1", "PodGroup")
WORKLOAD_V1BETA1 = GroupVersionKind("scheduling.k8s.io", "v1beta1", "Workload")
"""1.37's Workload: what a hierarchical gang's groups name in ``workloadRef``."""
COMPOSITE_POD_GROUP = GroupVersionKind("scheduling.k8s.io", "v1alpha3", "CompositePodGroup")
API_OF: Mapping[Mechanism, GroupVersionKind] = {
    WORKLOAD_API: WORKLOAD,
    PODGROUP_V1ALPHA2: GroupVersionKind("scheduling.k8s.io", "v1alpha2", "PodGroup"),
    PODGROUP_V1BETA1: GroupVersionKind("scheduling.k8s.io", "v1beta1", "PodGroup"),
    COMPOSITE_V1ALPHA3: COMPOSITE_POD_GROUP,
    COSCHEDULING: POD_GROUP,
}
"""The object each mechanism's gangs are held by (what discovery must list)."""
_FIRST_MINOR: Mapping[Mechanism, int] = {WORKLOAD_API: 35, PODGROUP_V1ALPHA2: 36,
                                         PODGROUP_V1BETA1: 37}
_LAST_MINOR: Mapping[Mechanism, int] = {WORKLOAD_API: 35, PODGROUP_V1ALPHA2: 36}
_VERSION = re.compile(r"^v?1\.(\d+)")
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""The label that joins a pod to its PodGroup (scheduler-plugins coscheduling)."""


def discovered(served: Collection[GroupVersionKind]) -> Mechanism:
    """The mechanism the served APIs point to: the newest built-in dialect first (the
    default scheduler's own plugin), then a PodGroup CRD, else ``none``."""
    for mechanism in (*BUILTIN, COSCHEDULING):
        if API_OF[mechanism] in served:
            return mechanism
    return NONE


def minor_number(version: str | None) -> int | None:
    """ "v1.37.2" -> 37; None when unknown or unreadable."""
    match = _VERSION.match(version or "")
    return int(match.group(1)) if match else None


def builtin_at(version: str | None) -> Mechanism | None:
    """The built-in dialect a Kubernetes ``version`` ("v1.37.2") has, None before 1.35 (or
    an unreadable version)."""
    minor = minor_number(version)
    if minor is None:
        return None
    for mechanism in _DIALECTS:
        if _FIRST_MINOR[mechanism] <= minor <= _LAST_MINOR.get(mechanism, minor):
            return mechanism
    return None


def note(version: str | None, found: Mechanism | None) -> str:
    """Why a member has no built-in gangs although its Kubernetes has them ("" when it has
    them, or its version has none): served only with the group enabled and the gate on."""
    if found in BUILTIN:
        return ""
    has = builtin_at(version)
    if has is None:
        return ""
    gvk = API_OF[has]
    return (f"Kubernetes {version} has the built-in gang API ({gvk.group}/{gvk.version} "
            f"{gvk.kind}) but does not serve it: GenericWorkload off or "
            f"--runtime-config={gvk.group}/{gvk.version} not set")


def leaf(mechanism: Mechanism) -> Mechanism:
    """The mechanism whose objects hold a gang of pods and whose field joins them: a
    composite member's leaf gangs are ``podgroup-v1beta1`` PodGroups."""
    return PODGROUP_V1BETA1 if mechanism == COMPOSITE_V1ALPHA3 else mechanism


def effective(setting: str, found: Mechanism | None) -> Mechanism:
    """What to use: the spec's choice, or under ``auto`` what was discovered (``none``
    while discovery has not answered). ``workload-api`` names the built-in API whatever
    its dialect: the one discovered when it is built-in."""
    if setting == WORKLOAD_API and found in BUILTIN:
        return found
    for mechanism in MECHANISMS:
        if setting == mechanism:
            return mechanism
    return found or NONE
