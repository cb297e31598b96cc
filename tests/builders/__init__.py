"""Workloads as tests write them, shared by the unit, integration, e2e and security tests.

``gpu_pod`` (a pod spec: one busybox container asking for GPUs, optionally pinned to a GPU
product), ``job`` (a batch Job of such pods) and ``jobset`` (a JobSet of one replicated
job of one-pod Jobs). Each builds the plain manifest a user would ``kubectl create``: the
apiserver defaults the rest.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GPU", "GPU_PRODUCT", "gpu_pod", "job", "jobset"]

GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"


def gpu_pod(gpus: int = 1, *, product: str | None = None, **fields: Any) -> dict[str, Any]:
    """A pod spec of one container asking for ``gpus`` GPUs (none: no resources), on
    ``product`` nodes when given; ``fields`` are more pod spec fields."""
    spec: dict[str, Any] = {"containers": [{"name": "w", "image": "busybox", "resources": {
        "limits": {GPU: gpus}} if gpus else {}}]}
    if product:
        spec["nodeSelector"] = {GPU_PRODUCT: product}
    return {**spec, **fields}


def _meta(name: str, namespace: str | None,
          annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {})}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def job(name: str, *, namespace: str | None = None, pods: int = 1, gpus: int = 1,
        product: str | None = None, pod: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job of ``pods`` pods at once (and in all), each ``pod`` (default: ``gpu_pod``)."""
    spec = pod if pod is not None else gpu_pod(gpus, product=product, restartPolicy="Never")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(name, namespace, annotations),
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"spec": spec}}}


def jobset(name: str, *, namespace: str | None = None, replicas: int = 1, gpus: int = 1,
           product: str | None = None, pod: dict[str, Any] | None = None,
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A JobSet of one replicated job ``worker``: ``replicas`` Jobs of one pod each, each
    ``pod`` (default: ``gpu_pod(gpus, product=product)``)."""
    spec = pod if pod is not None else gpu_pod(gpus, product=product)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": _meta(name, namespace, annotations),
            "spec": {"replicatedJobs": [{"name": "worker", "replicas": replicas, "template": {
                "spec": {"parallelism": 1, "completions": 1,
                         "template": {"spec": spec}}}}]}}
