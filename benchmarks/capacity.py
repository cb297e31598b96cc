"""Capacity model memory and event cost: 100 members x 1,000 nodes x 30 pods per node.

Every member is a ``ClusterCapacity`` fed real v1.Node and v1.Pod dicts through the same
``upsert_node``/``upsert_pod`` calls the watches use. Memory is what tracemalloc sees
allocated by the models (the event dicts are discarded after each call, as after a watch
event). Per node: 30 pods, of which a few hold GPUs (the GPU pods of an 8-GPU node) and the
rest are system, daemonset and CPU pods; the model stores only pods holding GPUs, so
``bytes_per_pod`` is per pod delivered and ``bytes_per_gpu_pod`` per pod stored. A second
case makes all 30 pods hold a GPU (32-GPU nodes) as the worst case for pod memory; it runs on
20 members to keep the benchmark within a few minutes (memory is per member, so
``total_mb_at_100`` scales it to 100 members).

``event_us`` is the mean cost of one watch event on the full fleet (pod bound, pod
finished, node cordoned/uncordoned), measured after the build without tracemalloc.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import time
import tracemalloc
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity

MEMBERS, NODES, PODS_PER_NODE = 100, 1000, 30
PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")


def node(name: str, *, gpus: int, product: str, zone: str, cordoned: bool = False
         ) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus),
                 "ephemeral-storage": "1Ti"}
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": product,
              "nvidia.com/gpu.count": str(gpus), "topology.kubernetes.io/zone": zone,
              "node.kubernetes.io/instance-type": "p5.48xlarge"}
    conditions = [{"type": t, "status": "False"} for t in
                  ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady"})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
            "spec": {"unschedulable": cordoned, "taints": []},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": conditions}}


def pod(name: str, node_name: str, gpus: int, *, phase: str = "Running") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "main", "image": "img", "resources": resources}]},
            "status": {"phase": phase}}


def gpu_pods(node_gpus: int, rng: random.Random) -> list[int]:
    """GPU sizes of the pods filling a node (at most its GPUs)."""
    sizes, left = [], node_gpus
    while left > 0:
        size = min(left, rng.choice([1, 1, 2, 4, 8]))
        sizes.append(size)
        left -= size
        if rng.random() < 0.2:
            break
    return sizes


def build(*, members: int, gpus_per_node: int, all_gpu_pods: bool, rng: random.Random,
          cpu_pods: bool = True) -> tuple[list[ClusterCapacity], int, int, int, int]:
    """The fleet; returns (models, node bytes, pod bytes, pods delivered, GPU pods).

    ``cpu_pods`` False delivers only the pods holding GPUs (the model stores nothing for the
    others, so its memory is the same; the build is ten times faster).
    """
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    models = []
    for m in range(members):
        cap = ClusterCapacity()
        for i in range(NODES):
            cap.upsert_node(node(f"m{m}-node-{i:04d}", gpus=gpus_per_node,
                                 product=PRODUCTS[i % 2], zone="abc"[i % 3]))
        models.append(cap)
    after_nodes = tracemalloc.get_traced_memory()[0]
    delivered = stored = 0
    for m, cap in enumerate(models):
        for i in range(NODES):
            name = f"m{m}-node-{i:04d}"
            sizes = [1] * PODS_PER_NODE if all_gpu_pods else gpu_pods(gpus_per_node, rng)
            if cpu_pods:
                sizes += [0] * (PODS_PER_NODE - len(sizes))
            for j, gpus in enumerate(sizes):
                cap.upsert_pod(pod(f"{name}-p{j}", name, gpus))
            delivered += len(sizes)
        stored += cap.pod_count
    after_pods = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return models, after_nodes - base, after_pods - after_nodes, delivered, stored


def event_cost(models: list[ClusterCapacity], *, gpus_per_node: int, rng: random.Random,
               events: int = 60_000) -> dict[str, float]:
    members = len(models)
    """Mean microseconds per event kind (event dicts are built before the clock starts)."""
    batch = []
    for k in range(events // 3):
        m = rng.randrange(members)
        name = f"m{m}-node-{rng.randrange(NODES):04d}"
        started = pod(f"bench-{k}", name, rng.choice([1, 2]))
        finished = pod(f"bench-{k}", name, 1, phase="Succeeded")
        cordon = node(name, gpus=gpus_per_node, product=PRODUCTS[0], zone="a",
                      cordoned=bool(k % 2))
        batch.append((models[m], started, finished, cordon))
    timings: dict[str, float] = {"pod": 0.0, "node": 0.0}
    for cap, started, finished, cordon in batch:
        t0 = time.perf_counter_ns()
        cap.upsert_pod(started)
        cap.upsert_pod(finished)
        t1 = time.perf_counter_ns()
        cap.upsert_node(cordon)
        t2 = time.perf_counter_ns()
        timings["pod"] += t1 - t0
        timings["node"] += t2 - t1
    n = len(batch)
    return {"pod_event_us": round(timings["pod"] / (2 * n) / 1000, 2),
            "node_event_us": round(timings["node"] / n / 1000, 2),
            "event_us": round((timings["pod"] + timings["node"]) / (3 * n) / 1000, 2)}


def main() -> None:
    machine = f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}"
    for case, members, gpus_per_node, all_gpu in (("typical", MEMBERS, 8, False),
                                                  ("all-gpu-pods", 20, 32, True)):
        rng = random.Random(42)
        start = time.perf_counter()
        models, node_bytes, pod_bytes, delivered, stored = build(
            members=members, gpus_per_node=gpus_per_node, all_gpu_pods=all_gpu, rng=rng)
        build_s = time.perf_counter() - start
        nodes = members * NODES
        costs = event_cost(models, gpus_per_node=gpus_per_node, rng=rng)
        total_mb = (node_bytes + pod_bytes) / 2**20
        print(json.dumps({
            "bench": "capacity", "case": case, "members": members, "nodes": NODES,
            "pods_per_node": PODS_PER_NODE, "bytes_per_node": round(node_bytes / nodes),
            "bytes_per_pod": round(pod_bytes / delivered),
            "bytes_per_gpu_pod": round(pod_bytes / stored) if stored else None,
            "gpu_pods": stored, "pods": delivered, "total_mb": round(total_mb, 1),
            "total_mb_at_100": round(total_mb * MEMBERS / members, 1),
            **costs, "build_s": round(build_s, 1), "machine": machine}), flush=True)
        del models
        gc.collect()


if __name__ == "__main__":
    main()
