"""Kueue objects as a member serves them (``kueue.x-k8s.io/v1beta2``), for quota tests."""

from __future__ import annotations

from typing import Any

API = "kueue.x-k8s.io/v1beta2"


def flavor(name: str, *, product: str | None = None,
           taints: tuple[tuple[str, str, str], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if product:
        spec["nodeLabels"] = {"nvidia.com/gpu.product": product}
    if taints:
        spec["nodeTaints"] = [{"key": k, "value": v, "effect": e} for k, v, e in taints]
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": spec}


def cluster_queue(name: str, quotas: dict[str, int], *, reserved: dict[str, int] | None = None,
                  cohort: str = "", borrowing: dict[str, int] | None = None,
                  lending: dict[str, int] | None = None, **spec: Any) -> dict[str, Any]:
    flavors = []
    for fname, nominal in quotas.items():
        quota: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
        if borrowing and fname in borrowing:
            quota["borrowingLimit"] = borrowing[fname]
        if lending and fname in lending:
            quota["lendingLimit"] = lending[fname]
        flavors.append({"name": fname, "resources": [{"name": "cpu", "nominalQuota": 100},
                                                      quota]})
    body: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [
        {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": flavors}], **spec}
    if cohort:
        body["cohortName"] = cohort
    status = {"flavorsReservation": [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", "total": str(n)}]}
        for f, n in (reserved or {}).items()]}
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": body, "status": status}


def local_queue(namespace: str, name: str, cq: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq, **spec}}
