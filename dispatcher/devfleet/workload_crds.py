"""Stand-in CRDs for the workload kinds of the catalog, for local control planes.

The dev fleet has no framework operators, only apiservers: these CRDs give each workload kind
its real group, version, kind, plural and scope, with an open schema and a status
subresource, so objects can be created, watched and status-patched as on a real cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from dispatcher.devfleet.rest import ApiError, Rest

__all__ = ["CRD_PATH", "WORKLOAD_KINDS", "crd_manifest", "crds_for", "install_crds"]

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# (group, version, kind, plural); a kind served in several versions has one entry per
# version, the first its storage version (one CRD with every version: crds_for).
WORKLOAD_KINDS: tuple[tuple[str, str, str, str], ...] = (
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    ("kubeflow.org", "v1", "TFJob", "tfjobs"),
    ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),
    ("ray.io", "v1", "RayCluster", "rayclusters"),
    ("ray.io", "v1", "RayJob", "rayjobs"),
    ("ray.io", "v1", "RayService", "rayservices"),
    ("serving.kserve.io", "v1beta1", "InferenceService", "inferenceservices"),
    ("serving.knative.dev", "v1", "Service", "services"),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    ("apps.nvidia.com", "v1alpha1", "NIMService", "nimservices"),
    ("milvus.io", "v1beta1", "Milvus", "milvuses"),
    ("grove.io", "v1alpha1", "PodCliqueSet", "podcliquesets"),
    ("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"),
    ("nvidia.com", "v1beta1", "DynamoGraphDeployment", "dynamographdeployments"),
    ("apps.nvidia.com", "v1alpha1", "NIMCache", "nimcaches"),
    ("serving.kserve.io", "v1alpha2", "LLMInferenceService", "llminferenceservices"),
    ("serving.kserve.io", "v1alpha1", "LLMInferenceService", "llminferenceservices"),
    ("agents.x-k8s.io", "v1beta1", "Sandbox", "sandboxes"),
)


def crd_manifest(*, group: str, version: str, kind: str, plural: str,
                 also_served: tuple[str, ...] = ()) -> dict[str, Any]:
    """An open-schema, namespaced CRD with a status subresource; ``version`` is stored,
    ``also_served`` are served too (no conversion: a stand-in keeps what was written)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}",
                     "labels": {"dispatcher.io/devfleet-standin": "true"}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "versions": [{
                "name": name, "served": True, "storage": name == version,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            } for name in (version, *also_served)],
        },
    }


def crds_for(kinds: Iterable[tuple[str, str, str, str]]) -> dict[str, dict[str, Any]]:
    """One stand-in CRD per resource of ``kinds`` (``WORKLOAD_KINDS`` entries), by CRD
    name; the first entry of a resource names its storage version."""
    versions: dict[tuple[str, str, str], list[str]] = {}
    for group, version, kind, plural in kinds:
        versions.setdefault((group, kind, plural), []).append(version)
    return {f"{plural}.{group}": crd_manifest(group=group, version=names[0], kind=kind,
                                              plural=plural, also_served=tuple(names[1:]))
            for (group, kind, plural), names in versions.items()}


CRD_WRITE_S = 60.0


def install_crds(rest: Rest, crds: Iterable[dict[str, Any]], *, timeout: float = 30.0) -> None:
    """Create (or update) CRDs and wait until each is Established and served.

    A write gets ``CRD_WRITE_S``, not the default 10 s: the operators' CRDs are up to 1.3 MB
    and an apiserver on a loaded 2-core machine took longer than 10 s to store one (the
    real fleet then failed to start with a read timeout)."""
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            rest.request("POST", CRD_PATH, crd, timeout=CRD_WRITE_S)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = rest.get(f"{CRD_PATH}/{name}")
            version = current["metadata"]["resourceVersion"]
            rest.request("PUT", f"{CRD_PATH}/{name}",
                         {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}},
                         timeout=CRD_WRITE_S)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conditions = {c["type"]: c["status"]
                          for c in (rest.get(f"{CRD_PATH}/{name}").get("status") or {})
                          .get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)
