"""Reading the few fields capacity needs out of raw ``v1.Node`` and ``v1.Pod`` dicts.

Watches deliver whole objects; the capacity model keeps only what placement uses: per node the
allocatable ``nvidia.com/gpu``, the GPU product label, Ready, unschedulable, taints and labels;
per pod the node it is bound to and its GPUs. Everything here is a pure function of one dict,
so the same code reads Nodes from a live cluster and from ``fleetfile.node_manifests()``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE, pod_gpus
from dispatcher.workloads.quantity import whole_count

__all__ = [
    "HARD_EFFECTS",
    "HOSTNAME_LABEL",
    "NodeFacts",
    "TaintTuple",
    "node_facts",
    "pod_binding",
    "pod_key",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
# Taint effects that keep a pod that does not tolerate them off a node.
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

TaintTuple = tuple[str, str, str]  # (key, value, effect)


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``: stable across updates; a recreated pod replaces its predecessor."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def pod_binding(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """(node name, GPUs) if the pod holds GPUs on a node now, else None.

    Only bound pods (``spec.nodeName`` set) that are not terminated (phase Succeeded/Failed)
    hold GPUs; a pod being deleted still holds them until it is gone, as for the scheduler.
    Pods without GPUs return None: capacity does not track them at all (their GPU request is
    immutable, so they can never start to matter).
    """
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or not isinstance(node, str):
        return None
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    gpus = pod_gpus(spec)
    if gpus <= 0:
        return None
    return sys.intern(node), gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFacts:
    """What capacity keeps of one Node. ``labels`` leaves out the node's own hostname label
    (it equals the name on every real node), so nodes of one pool share one label set."""

    name: str
    capacity: int
    allocatable: int
    product: str | None
    ready: bool
    unschedulable: bool
    labels: tuple[tuple[str, str], ...]
    taints: tuple[TaintTuple, ...]


def _ready(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """The capacity-relevant facts of a ``v1.Node`` dict; strings are interned (shared)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = sys.intern(str(meta.get("name") or ""))
    raw_labels = meta.get("labels") or {}
    labels = tuple(sorted(
        (sys.intern(str(k)), sys.intern(str(v))) for k, v in raw_labels.items()
        if not (k == HOSTNAME_LABEL and v == name)))
    taints = tuple(sorted(
        (sys.intern(str(t.get("key") or "")), sys.intern(str(t.get("value") or "")),
         sys.intern(str(t.get("effect") or "")))
        for t in spec.get("taints") or () if isinstance(t, Mapping)))
    product = raw_labels.get(GPU_PRODUCT_LABEL)
    return NodeFacts(
        name=name,
        capacity=whole_count((status.get("capacity") or {}).get(GPU_RESOURCE, 0)),
        allocatable=whole_count((status.get("allocatable") or {}).get(GPU_RESOURCE, 0)),
        product=None if product is None else sys.intern(str(product)),
        ready=_ready(status),
        unschedulable=bool(spec.get("unschedulable")),
        labels=labels,
        taints=taints,
    )
