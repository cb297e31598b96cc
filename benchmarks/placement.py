"""Placement decision latency: a 3-gang workload over 10 and 100 members x 100 and 1,000 nodes.

Each member is a ``ClusterCapacity`` fed real v1.Node and v1.Pod dicts (three node pools:
8-GPU H100, 8-GPU A100, 4-GPU L40S tainted for inference, with random GPU pods bound), so
the decision runs the controller's code path. Between timed decisions a few pod events
change the fleet (untimed), as in a live controller. Two modes are measured:

- ``decide``: what the controller does per workload: gates and O(1) capacity checks for
  every member, gang packing in rank order until the best-ranked feasible member is found
  (members ranked below it are reported as not evaluated), node assignment for the choice;
- ``exhaustive``: the same, but every member is packed (a verdict for each);
- ``explain``: ``dispatcher explain``: exhaustive, and also counts how many times the demand
  fits on every feasible member and materialises every feasible member's assignment.

The first decision of a case finds every member's memo empty (as the controller's first
decision after it starts): it is reported apart as ``first_us`` and left out of the
percentiles, which are over the decisions after it.

Prints one JSON object per case: bench, members, nodes, gangs, p50_us, p99_us (wall clock)
(+ mode, decisions, feasible_members, load_avg, machine), and ``p50_cpu_us``/``p99_cpu_us``:
the same decisions timed with this thread's CPU clock, which leaves out the time the thread
waited for a core. On a shared machine (load average above the core count) the wall p99 is
mostly other processes' time slices; the CPU figures say what a decision costs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import time
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement.engine import decide
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.demand import Demand, Gang, PodShape, Toleration

H100, A100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"
POOLS = ((H100, 8, 0.6, ()), (A100, 8, 0.3, ()), (L40S, 4, 0.1, (("inference", "", "NoSchedule"),)))


def _node(name: str, *, product: str, gpus: int, taints: tuple[tuple[str, str, str], ...],
          zone: str) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "nvidia.com/gpu.product": product,
                "topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": "x"}},
            "spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "load", "uid": name},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def build_member(index: int, nodes: int, rng: random.Random) -> tuple[ClusterCapacity,
                                                                      list[tuple[str, int]]]:
    """A member with ``nodes`` nodes in three pools, about half of its GPUs in use."""
    cap = ClusterCapacity()
    gpu_nodes: list[tuple[str, int]] = []
    for pool, (product, gpus, share, taints) in enumerate(POOLS):
        for i in range(max(1, int(nodes * share))):
            name = f"m{index}-p{pool}-{i}"
            cap.upsert_node(_node(name, product=product, gpus=gpus, taints=taints,
                                  zone="abc"[i % 3]))
            gpu_nodes.append((name, gpus))
    for name, gpus in gpu_nodes:
        used = rng.choice([0, 0, 1, 2, 4, gpus])
        if used:
            cap.upsert_pod(_pod(f"{name}-busy", name, min(used, gpus)))
    return cap, gpu_nodes


def workload() -> Demand:
    """3 gangs: 4 x 8 H100 trainers, 2 x 2-GPU parameter servers anywhere, 1 x 4 L40S eval."""
    tolerate = (Toleration(key="inference", operator="Exists"),)
    return Demand(gangs=(
        Gang(name="trainer", pods=4, min_pods=4,
             pod_shapes=(PodShape(count=4, gpus=8, gpu_product=H100),)),
        Gang(name="ps", pods=2, min_pods=2, pod_shapes=(PodShape(count=2, gpus=2),)),
        Gang(name="eval", pods=1, min_pods=1,
             pod_shapes=(PodShape(count=1, gpus=4, gpu_product=L40S, tolerations=tolerate),)),
    ))


def run_case(*, members: int, nodes: int, decisions: int, mode: str) -> dict[str, Any]:
    rng = random.Random(members * 7919 + nodes)
    built = [build_member(i, nodes, rng) for i in range(members)]
    snapshots = [MemberSnapshot(name=f"member-{i:03d}", capacity=cap)
                 for i, (cap, _) in enumerate(built)]
    request = PlacementRequest(demand=workload(), count_fits=mode == "explain",
                               exhaustive=mode == "exhaustive")
    samples = []
    cpu_samples = []
    feasible = 0
    churn: list[tuple[ClusterCapacity, dict[str, Any]]] = []
    # The fleet model is long-lived: keep the collector's full passes off the decisions, as
    # the controller does after its initial list (gc.freeze()).
    gc.collect()
    gc.freeze()
    first_us = 0.0
    for step in range(decisions + 1):
        # Untimed churn: a few pods start, as many finish; utilisation stays level.
        for _ in range(3):
            cap, gpu_nodes = built[rng.randrange(members)]
            name, gpus = rng.choice(gpu_nodes)
            pod = _pod(f"churn-{step}-{name}", name, rng.choice([1, 2, gpus]))
            cap.upsert_pod(pod)
            churn.append((cap, pod))
        while len(churn) > 3 * members:
            cap, pod = churn.pop(rng.randrange(len(churn)))
            cap.delete_pod(pod)
        start = time.perf_counter_ns()
        cpu_start = time.thread_time_ns()
        decision = decide(snapshots, request)
        if step == 0:
            first_us = (time.perf_counter_ns() - start) / 1000
            continue
        cpu_samples.append((time.thread_time_ns() - cpu_start) / 1000)
        samples.append((time.perf_counter_ns() - start) / 1000)
        feasible = sum(v.feasible is True for v in decision.verdicts)
    samples.sort()
    cpu_samples.sort()
    return {"bench": "placement", "members": members, "nodes": nodes,
            "gangs": len(request.demand.gangs), "mode": mode, "decisions": decisions,
            "p50_us": round(statistics.median(samples), 1),
            "p99_us": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 1),
            "first_us": round(first_us, 1),
            "p50_cpu_us": round(statistics.median(cpu_samples), 1),
            "p99_cpu_us": round(cpu_samples[min(len(cpu_samples) - 1,
                                                int(len(cpu_samples) * 0.99))], 1),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "feasible_members": feasible, "gc_frozen": True,
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, "
                       f"Python {platform.python_version()}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["10x100", "10x1000", "100x100",
                                                       "100x1000"],
                        help="MEMBERSxNODES cases (default: %(default)s)")
    parser.add_argument("--modes", nargs="+", default=["decide", "exhaustive", "explain"],
                        choices=["decide", "exhaustive", "explain"])
    args = parser.parse_args()
    for case in args.cases:
        members, nodes = (int(x) for x in case.split("x"))
        for mode in args.modes:
            # p99 of 100 samples would be their maximum: 1,000 but for the slow explain
            decisions = 100 if mode == "explain" else 1000
            print(json.dumps(run_case(members=members, nodes=nodes, decisions=decisions,
                                      mode=mode)), flush=True)


if __name__ == "__main__":
    main()
