"""Small builders for placement tests: clusters from node specs, demands from shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.workloads.demand import Demand, Gang, PodShape, Toleration

from .objects import node, pod


def cluster(*specs: Mapping[str, object]) -> ClusterCapacity:
    """Nodes from dicts: name, gpus, used (bound pod GPUs), and node() keywords."""
    cap = ClusterCapacity()
    for spec in specs:
        options = dict(spec)
        name = str(options.pop("name"))
        gpus = int(str(options.pop("gpus")))
        used = int(str(options.pop("used", 0)))
        cap.upsert_node(node(name, gpus, **options))  # type: ignore[arg-type]
        if used:
            cap.upsert_pod(pod(f"busy-{name}", used, node_name=name))
    return cap


def shape(count: int, gpus: int, *, product: str | None = None,
          selector: Mapping[str, str] | None = None,
          tolerations: Sequence[Toleration] = ()) -> PodShape:
    return PodShape(count=count, gpus=gpus, gpu_product=product,
                    node_selector=dict(selector or {}), tolerations=tuple(tolerations))


def demand(*gangs: Sequence[PodShape]) -> Demand:
    return Demand(gangs=tuple(
        Gang(name=f"g{i}", pods=sum(s.count for s in shapes),
             min_pods=sum(s.count for s in shapes), pod_shapes=tuple(shapes))
        for i, shapes in enumerate(gangs)))


H100 = "NVIDIA-H100-80GB-HBM3"


def jobset_file(tmp_path: Path, *, replicas: int,
                annotations: dict[str, str] | None = None) -> str:
    """A JobSet manifest on disk (``replicas`` one-pod Jobs of 8 H100 GPUs) for the CLI."""
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "nodeSelector": {"nvidia.com/gpu.product": H100},
                "containers": [{"name": "main", "image": "trainer",
                                "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]},
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return str(path)
