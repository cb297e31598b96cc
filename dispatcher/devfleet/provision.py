"""Fill freshly started control planes: CRDs on every cluster, GPU Nodes on members.

The hub gets the dispatcher's own CRDs (``deploy/crds/``); every cluster gets stand-in CRDs
for the catalog's workload kinds, since users create workloads on the hub and the
dispatcher creates copies on members. Members get the Nodes of their fleet-file pools.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import workload_crds
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.fleet.fleetfile import MemberSpec, node_manifests
from dispatcher.sources import source_path

__all__ = ["crds_dir", "install_crds", "provision_hub", "provision_member"]

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crds_dir() -> Path:
    """The dispatcher's CRDs in the source tree (``deploy/crds``)."""
    return source_path("deploy", "crds")


def dispatcher_crds() -> list[dict[str, Any]]:
    """The CRDs of deploy/crds/*.yaml."""
    docs: list[dict[str, Any]] = []
    for path in sorted(crds_dir().glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def install_crds(rest: Rest, crds: Iterable[dict[str, Any]], *, timeout: float = 30.0) -> None:
    """Create (or update) CRDs and wait until each is Established and served."""
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            rest.request("POST", CRD_PATH, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = rest.get(f"{CRD_PATH}/{name}")
            version = current["metadata"]["resourceVersion"]
            rest.request("PUT", f"{CRD_PATH}/{name}",
                         {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}})
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conditions = {c["type"]: c["status"]
                          for c in rest.get(f"{CRD_PATH}/{name}").get("status", {})
                          .get("conditions", [])}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)


def _workload_crds() -> list[dict[str, Any]]:
    return [workload_crds.crd_manifest(group=g, version=v, kind=k, plural=p)
            for g, v, k, p in workload_crds.WORKLOAD_KINDS]


def provision_hub(rest: Rest) -> None:
    """Dispatcher CRDs, workload CRDs and the dispatcher-system namespace on the hub."""
    install_crds(rest, dispatcher_crds() + _workload_crds())
    rest.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "dispatcher-system"}})


def provision_member(rest: Rest, member: MemberSpec) -> int:
    """Workload CRDs and the member's GPU Nodes; returns the number of nodes created."""
    install_crds(rest, _workload_crds())
    created = 0
    for node in node_manifests(member):
        if rest.ensure("/api/v1/nodes", node) is not None:
            created += 1
    return created
