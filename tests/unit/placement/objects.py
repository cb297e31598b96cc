"""Builders for raw v1.Node / v1.Pod dicts, shaped like what a watch delivers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def node(name: str, gpus: int, *, product: str | None = None, ready: bool = True,
         unschedulable: bool = False, taints: Sequence[tuple[str, str, str]] = (),
         labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if product is not None:
        all_labels["nvidia.com/gpu.product"] = product
    spec: dict[str, Any] = {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "resourceVersion": "1"},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "63", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, gpus: int, *, node_name: str | None = None, phase: str = "Running",
        namespace: str = "team-a", init_gpus: Sequence[int] = (),
        use_requests: bool = False) -> dict[str, Any]:
    section = "requests" if use_requests else "limits"
    container: dict[str, Any] = {"name": "main", "image": "trainer",
                                 "resources": {section: {"nvidia.com/gpu": str(gpus)}}
                                 if gpus else {}}
    spec: dict[str, Any] = {"containers": [container, {"name": "log", "image": "busybox"}]}
    if init_gpus:
        spec["initContainers"] = [
            {"name": f"init-{i}", "image": "x", "resources": {"limits": {"nvidia.com/gpu": g}}}
            for i, g in enumerate(init_gpus)]
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": spec, "status": {"phase": phase}}
