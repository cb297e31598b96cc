"""MultiKueue on the dev fleet: the queues and MultiKueue objects of the ``--with-kueue``
profile, as a Kueue user would write them (``kueue.x-k8s.io/v1beta2``).

One ResourceFlavor per kind of GPU node of the fleet: a GPU product (``nvidia.com/gpu.product``
node label) and the pool's taints, so Kueue's flavor assignment honours a pod's product
selector and tolerations as kube-scheduler will. On every side one ClusterQueue ``gpus``
covering ``nvidia.com/gpu`` and one LocalQueue ``gpus`` per namespace that uses it:

- each worker's ClusterQueue has, per flavor, the member's GPUs of that flavor as nominal
  quota (its real capacity, so a worker reserves quota only for what its nodes hold);
- the manager's (hub) ClusterQueue has the fleet's total per flavor and the MultiKueue
  AdmissionCheck; the check's MultiKueueConfig lists one MultiKueueCluster per member, each
  reading the member's kubeconfig from a Secret in Kueue's namespace.

Quota is aggregate per flavor, not per node: without Topology Aware Scheduling Kueue admits
a gang whose pods fit the quota but not the nodes (``benchmarks/peers.py`` counts them).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from dispatcher.devfleet import kueue
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.fleet.fleetfile import FleetSpec, MemberSpec
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE

__all__ = ["BASE", "CHECK", "QUEUE", "Flavor", "add_queue", "apply_object", "cluster_queue",
           "configure_manager", "configure_worker", "flavors", "manager_paths", "wait_active",
           "worker_paths"]

API = "kueue.x-k8s.io/v1beta2"
BASE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE = "gpus"
"""The ClusterQueue and LocalQueue name on every side."""
CHECK = "multikueue"
"""The AdmissionCheck and MultiKueueConfig name on the manager."""
CONTROLLER = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True)
class Flavor:
    """One kind of GPU node: product and taints."""

    name: str
    product: str | None
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)

    def manifest(self) -> dict[str, Any]:
        """The ResourceFlavor."""
        spec: dict[str, Any] = {}
        if self.product:
            spec["nodeLabels"] = {GPU_PRODUCT_LABEL: self.product}
        if self.taints:
            spec["nodeTaints"] = [{"key": k, "value": v, "effect": e} for k, v, e in self.taints]
        return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": self.name},
                "spec": spec}


def _flavor_of(product: str | None, taints: tuple[tuple[str, str, str], ...]) -> Flavor:
    words = [product or "gpu", *(f"{k}-{v}" for k, v, _ in taints)]
    name = re.sub(r"[^a-z0-9]+", "-", "-".join(words).lower()).strip("-")
    return Flavor(name=name[:63], product=product, taints=taints)


def _member_quotas(member: MemberSpec) -> dict[Flavor, int]:
    quotas: dict[Flavor, int] = {}
    for pool in member.node_pools:
        if pool.gpus <= 0:
            continue
        flavor = _flavor_of(pool.gpu_product,
                            tuple((t.key, t.value, t.effect) for t in pool.taints))
        quotas[flavor] = quotas.get(flavor, 0) + pool.gpus * pool.count
    return quotas


def flavors(fleet: FleetSpec) -> dict[Flavor, int]:
    """Every flavor of the fleet with its total GPUs, in fleet-file order."""
    total: dict[Flavor, int] = {}
    for member in fleet.members:
        for flavor, gpus in _member_quotas(member).items():
            total[flavor] = total.get(flavor, 0) + gpus
    return total


def cluster_queue(quotas: dict[Flavor, int], *, check: str | None) -> dict[str, Any]:
    """The ClusterQueue ``gpus``: GPU quota per flavor, every namespace, ``check`` if any."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": [
            {"name": f.name, "resources": [{"name": GPU_RESOURCE, "nominalQuota": gpus}]}
            for f, gpus in quotas.items()]}]}
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": QUEUE},
            "spec": spec}


def apply_object(rest: Rest, collection: str, body: dict[str, Any]) -> None:
    """Create ``body``, or replace the existing object of that name (idempotent set-up)."""
    try:
        rest.request("POST", collection, body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        path = f"{collection}/{body['metadata']['name']}"
        current = rest.get(path)
        rest.request("PUT", path, {**body, "metadata": {
            **body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})


def add_queue(rest: Rest, namespace: str) -> None:
    """The namespace (if missing) and its LocalQueue ``gpus`` pointing at ClusterQueue
    ``gpus``: on the manager and on every worker alike (MultiKueue creates the remote
    objects in the same namespace and queue, and creates no namespace)."""
    rest.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": namespace}})
    apply_object(rest, f"{BASE}/namespaces/{namespace}/localqueues", {
        "apiVersion": API, "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": QUEUE}})


def configure_worker(rest: Rest, member: MemberSpec, *, namespaces: tuple[str, ...]) -> None:
    """A member as a MultiKueue worker: its flavors and a ClusterQueue of its GPUs."""
    _queues(rest, _member_quotas(member), check=None, namespaces=namespaces)


def configure_manager(rest: Rest, fleet: FleetSpec, *, kubeconfigs: dict[str, bytes],
                      namespaces: tuple[str, ...]) -> None:
    """The hub as the MultiKueue manager: a kubeconfig Secret and a MultiKueueCluster per
    member, the MultiKueueConfig and AdmissionCheck, and a ClusterQueue of the fleet's GPUs
    gated by that check."""
    for member in fleet.members:
        secret = f"{member.name}-kubeconfig"
        apply_object(rest, f"/api/v1/namespaces/{kueue.NAMESPACE}/secrets",
               kueue.kubeconfig_secret(secret, kubeconfigs[member.name]))
        apply_object(rest, f"{BASE}/multikueueclusters", {
            "apiVersion": API, "kind": "MultiKueueCluster", "metadata": {"name": member.name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                      "location": secret}}}})
    apply_object(rest, f"{BASE}/multikueueconfigs", {
        "apiVersion": API, "kind": "MultiKueueConfig", "metadata": {"name": CHECK},
        "spec": {"clusters": [m.name for m in fleet.members]}})
    apply_object(rest, f"{BASE}/admissionchecks", {
        "apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
        "spec": {"controllerName": CONTROLLER, "parameters": {
            "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": CHECK}}})
    _queues(rest, flavors(fleet), check=CHECK, namespaces=namespaces)


def _queues(rest: Rest, quotas: dict[Flavor, int], *, check: str | None,
            namespaces: tuple[str, ...]) -> None:
    """The flavors, the ClusterQueue of their GPUs (behind ``check`` if any) and a
    LocalQueue in each namespace: the same on both sides."""
    for flavor in quotas:
        apply_object(rest, f"{BASE}/resourceflavors", flavor.manifest())
    apply_object(rest, f"{BASE}/clusterqueues", cluster_queue(quotas, check=check))
    for namespace in namespaces:
        add_queue(rest, namespace)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def wait_active(rest: Rest, paths: list[str], *, timeout: float = 60.0) -> None:
    """Until every object at ``paths`` has condition ``Active`` True; TimeoutError names
    the first that has not, with its condition's reason and message."""
    deadline = time.monotonic() + timeout
    for path in paths:
        while True:
            cond = None
            try:
                cond = _condition(rest.get(path), "Active")
            except ApiError as exc:
                if exc.status != 404:
                    raise
            if cond and cond.get("status") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} not Active after {timeout:.0f}s: {cond}")
            time.sleep(0.3)


def manager_paths(fleet: FleetSpec) -> list[str]:
    """The manager objects that must turn Active: clusters, check, ClusterQueue."""
    return [*(f"{BASE}/multikueueclusters/{m.name}" for m in fleet.members),
            f"{BASE}/admissionchecks/{CHECK}", f"{BASE}/clusterqueues/{QUEUE}"]


def worker_paths() -> list[str]:
    """The worker objects that must turn Active."""
    return [f"{BASE}/clusterqueues/{QUEUE}"]
