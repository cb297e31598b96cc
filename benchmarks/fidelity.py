"""Placement fidelity: do the real kube-schedulers of the members honour the dispatcher's fits?

Real code paths end to end: the real dev fleet (hub + the members of a fleet file, each with
kube-apiserver, kube-controller-manager, kube-scheduler and kwok), ``dispatcher run`` as its
own process (``submit.createNamespaces``, the shipped defaults otherwise), and this process
acting as users:

1. streams a seeded mix of batch/v1 Jobs and JobSets at the hub (Poisson arrivals,
   ``--rate`` per second for ``--seconds``): 1-16 pods of 1, 2, 4 or 8 GPUs, some with a
   ``nvidia.com/gpu.product`` nodeSelector, some tolerating the fleet's tainted pool; each pod
   runs ``--run-s`` seconds (randomised +-50 %, kwok's ``pod-complete`` delay annotation),
   so the fleet saturates and freed GPUs are reused. A share ``--jobsets`` of the workloads
   (drawn from a second generator seeded from ``--seed``, so ``--jobsets 0`` streams exactly
   the Jobs-only mix of earlier runs) are JobSets of the same size: a ``leader`` Job of one
   pod and a ``workers`` replicated Job of the other pods (two Jobs when their count is even),
   every pod with GPUs, one gang for the dispatcher; the members' JobSet operator (webhooks
   on) makes their Jobs, kube-controller-manager their pods.
2. watches the members' pods (by the hub-uid label the dispatcher stamps on pod templates),
   the copies (Jobs and JobSets) and the hub's Dispatch objects (the node plan each
   reservation recorded);
3. after the stream, waits up to ``--drain-s`` for the backlog to be dispatched and running.

Measured (one JSON line): ``dispatched`` (a copy appeared on a member), ``fully_scheduled``
(dispatched workloads whose pods all reached Running), ``pods_left_pending`` (pods unbound for
more than 10 s on the member the dispatcher chose), ``overcommitted_gpus`` (sum over nodes of
the largest max(0, GPUs of Running pods - allocatable) seen: must be 0), ``p50_running_s`` /
``p99_running_s`` (hub create -> all pods Running), ``gpu_utilization`` (mean share of the
fleet's GPUs held by Running pods while some created Job was still waiting to be dispatched:
saturation), plus ``off_plan_pods`` (pods the scheduler bound to a node the plan did not give
their Job: the dispatcher's node-level plan and kube-scheduler's pod-by-pod choice differ),
``by_kind`` (workloads, dispatched, fully scheduled and p50/p99 per kind), ``seed`` and
``machine``.

``--contention`` adds local users: a seeded stream of Jobs submitted straight to the
members (namespace ``local``, 1-4 pods of 1 GPU, any untainted GPU node), which the
members' kube-schedulers bind between the dispatcher's decisions and its gangs' bindings.
Gang figures (every row; a JobSet is one gang, a Job's pods are independent):
``partial_gangs`` (gangs some pods of which held GPUs for more than ``PARTIAL_S`` before
the last was bound, or until the end without it), ``partial_gang_gpu_s`` (GPU-seconds held
by bound pods of gangs not yet whole), ``gang_start_p99_s`` (first pod of a gang seen on
its member -> its last pod bound), ``gang_mechanism`` (what the Dispatches of the gangs
record: ``workload-api`` when the members' Workload API is used, else ``none``; set the
members with ``--gang-scheduling``) and ``contention``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from resolve import machine  # benchmarks/resolve.py: the shared machine description
from running import client_for, percentile, stop, wait_ready  # benchmarks/running.py

from dispatcher.control.core import record as records
from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.fleet.fleetfile import FleetSpec, load_fleet
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, NODES, PODS, ResourceRef
from dispatcher.workloads.podspec import pod_gpus
from dispatcher.workloads.quantity import whole_count

ROOT = Path(__file__).resolve().parent.parent
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
KINDS = {"Job": JOBS, "JobSet": JOBSETS}
HUB_ID = "fidelity-hub"
UID_LABEL = "dispatcher.io/hub-uid"
PENDING_LIMIT_S = 10.0
PARTIAL_S = 2.0
PRODUCT = "nvidia.com/gpu.product"
LOCAL_NAMESPACE = "local"


# -- the workload mix (pure) ----------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """One workload of the stream: a Job of ``pods`` pods, or a JobSet of as many."""

    name: str
    at: float  # seconds after the stream starts
    pods: int
    gpus: int
    product: str | None
    tolerate: tuple[dict[str, str], ...]
    run_s: int
    member: str | None = None  # pinned (``dispatcher.io/cluster``)
    kind: str = "Job"


def pools(fleet: FleetSpec) -> list[tuple[str | None, int, int, tuple[dict[str, str], ...]]]:
    """(product, GPUs per node, nodes, taints) per GPU pool, over all members."""
    out = []
    for member in fleet.members:
        for pool in member.node_pools:
            if pool.gpus > 0:
                taints = tuple({"key": t.key, "value": t.value or "", "effect": t.effect}
                               for t in pool.taints)
                out.append((pool.gpu_product, pool.gpus, pool.count, taints))
    return out


def stream(fleet: FleetSpec, *, seed: int, rate: float, seconds: float,
           run_s: float, jobsets: float = 0.0) -> Iterator[Shape]:
    """Seeded workloads whose every pod fits one pool of the fleet (so each can run
    somewhere): a third pick a pool's product, a sixth tolerate a tainted pool (and pick
    it), the rest ask for any GPU of an untainted pool. A share ``jobsets`` of those with
    at least 2 pods are JobSets (decided by a second generator: the sizes, times and
    products do not depend on ``jobsets``)."""
    rng = random.Random(seed)
    kinds = random.Random(seed * 7919 + 1)
    choices = pools(fleet)
    open_pools = [p for p in choices if not p[3]]
    tainted = [p for p in choices if p[3]]
    at, index = 0.0, 0
    while True:
        at += rng.expovariate(rate)
        if at > seconds:
            return
        roll = rng.random()
        if tainted and roll < 1 / 6:
            product, per_node, nodes, taints = rng.choice(tainted)
            tolerate, selector = taints, product
        else:
            product, per_node, nodes, _ = rng.choice(open_pools)
            tolerate, selector = (), product if roll < 1 / 2 else None
            if selector is None:  # any untainted GPU node: the smallest node bounds the pod
                per_node = min(p[1] for p in open_pools)
                nodes = sum(p[2] for p in open_pools)
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= per_node])
        most = min(16, nodes * (per_node // gpus))
        pods = max(1, int(most ** rng.random()))  # log-uniform: many small, some wide
        kind = "JobSet" if pods >= 2 and kinds.random() < jobsets else "Job"
        yield Shape(name=f"{kind.lower()}-{index:04d}", at=at, pods=pods, gpus=gpus,
                    product=selector,
                    tolerate=tuple(dict(t, operator="Equal") for t in tolerate),
                    run_s=max(5, round(run_s * rng.uniform(0.5, 1.5))), kind=kind)
        index += 1


def interleave(fleet: FleetSpec, *, run_s: float, gap: float) -> list[Shape]:
    """Two gangs decided back to back on one member, before either's pods are bound.

    The member's largest GPU product pool is filled but for two nodes (``fill``); then a
    gang of small pods (``small``: one node's worth of 1-GPU pods) and a one-pod gang of a
    whole node (``whole``) arrive ``gap`` seconds apart. The dispatcher packs ``small`` on one node
    (best fit) and plans ``whole`` on the other; kube-scheduler places pod by pod and
    spreads ``small`` over both free nodes, so ``whole`` finds no node until ``small``
    finishes: the case where the default scheduler breaks a node-level plan.
    """
    member, pool = max(((m, p) for m in fleet.members for p in m.node_pools
                        if p.gpu_product and not p.taints and p.count >= 3),
                       key=lambda mp: (mp[1].count * mp[1].gpus, mp[0].name))

    def gang(name: str, at: float, pods: int, gpus: int, seconds: float) -> Shape:
        return Shape(name=name, at=at, pods=pods, gpus=gpus, product=pool.gpu_product,
                     tolerate=(), run_s=round(seconds), member=member.name)

    return [gang("fill", 0.0, pool.count - 2, pool.gpus, run_s * 4),
            gang("small", 8.0, pool.gpus, 1, run_s),
            gang("whole", 8.0 + gap, 1, pool.gpus, run_s)]


def workload(shape: Shape, namespace: str) -> dict[str, Any]:
    """The hub object for ``shape``: a Job, or a JobSet."""
    return jobset(shape, namespace) if shape.kind == "JobSet" else job(shape, namespace)


def _pod_template(shape: Shape) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "train", "image": "registry.invalid/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": shape.gpus}}}]}
    if shape.product:
        spec["nodeSelector"] = {PRODUCT: shape.product}
    if shape.tolerate:
        spec["tolerations"] = [dict(t) for t in shape.tolerate]
    return {"metadata": {"annotations": {
        "pod-complete.stage.kwok.x-k8s.io/delay": f"{shape.run_s}s"}}, "spec": spec}


def _metadata(shape: Shape, namespace: str) -> dict[str, Any]:
    annotations = {"dispatcher.io/cluster": shape.member} if shape.member else {}
    return {"name": shape.name, "namespace": namespace, "annotations": annotations}


def job(shape: Shape, namespace: str) -> dict[str, Any]:
    """The hub Job for ``shape``: ``pods`` pods at once (parallelism = completions)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(shape, namespace),
            "spec": {"parallelism": shape.pods, "completions": shape.pods, "backoffLimit": 0,
                     "template": _pod_template(shape)}}


def jobset(shape: Shape, namespace: str) -> dict[str, Any]:
    """The hub JobSet for ``shape`` (``pods`` >= 2): a ``leader`` Job of one pod and a
    ``workers`` replicated Job of the rest (2 Jobs of half when even, else one Job)."""
    workers = shape.pods - 1
    replicas = 2 if workers % 2 == 0 else 1

    def replicated(name: str, count: int, pods: int) -> dict[str, Any]:
        return {"name": name, "replicas": count, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": _pod_template(shape)}}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": _metadata(shape, namespace),
            "spec": {"replicatedJobs": [replicated("leader", 1, 1),
                                        replicated("workers", replicas, workers // replicas)]}}


# -- what the watches saw ---------------------------------------------------------------------

@dataclass
class PodSeen:
    """One pod as the member watches saw it; ``owner`` is the workload it belongs to (the
    value of the label the benchmark follows pods by)."""

    owner: str
    member: str
    gpus: int
    first: float
    node: str | None = None
    bound: float | None = None
    running: float | None = None
    phase: str = "Pending"
    gone: bool = False
    ended: float | None = None  # first seen finished or deleted

    @property
    def holds(self) -> bool:
        """Whether it holds its node's GPUs (bound, neither finished nor deleted)."""
        return bool(self.node) and not self.gone and self.phase not in ("Succeeded", "Failed")


def see_pod(pods: dict[tuple[str, str], PodSeen], member: str, pod: Mapping[str, Any],
            now: float, *, label: str, deleted: bool = False) -> PodSeen | None:
    """Record a pod event (first seen, bound, Running) in ``pods``; None for a pod without
    the owner ``label``."""
    meta = pod.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(label)
    if not owner:
        return None
    key = (member, f"{meta.get('namespace')}/{meta.get('name')}")
    seen = pods.get(key)
    if seen is None:
        seen = pods[key] = PodSeen(owner=str(owner), member=member, first=now,
                                   gpus=pod_gpus(pod.get("spec") or {}))
    node = (pod.get("spec") or {}).get("nodeName")
    if node and seen.bound is None:
        seen.node, seen.bound = str(node), now
    seen.phase = str((pod.get("status") or {}).get("phase") or "Pending")
    seen.gone = seen.gone or deleted
    if seen.ended is None and (seen.gone or seen.phase in ("Succeeded", "Failed")):
        seen.ended = now
    if seen.phase == "Running" and seen.running is None:
        seen.running = now
    return seen


def all_running_at(pods: Iterable[PodSeen], owner: str, wanted: int) -> float | None:
    """When the ``wanted``-th pod of ``owner`` was first seen Running, else None."""
    times = sorted(p.running for p in pods if p.owner == owner and p.running is not None)
    return times[wanted - 1] if len(times) >= wanted else None


@dataclass
class Observed:
    """Everything the watches saw, by time (``time.monotonic``)."""

    created: dict[str, float] = field(default_factory=dict)  # hub uid -> create sent
    pods_wanted: dict[str, int] = field(default_factory=dict)  # hub uid -> pods at once
    kinds: dict[str, str] = field(default_factory=dict)  # hub uid -> Job / JobSet
    dispatched: dict[str, str] = field(default_factory=dict)  # hub uid -> member
    plans: dict[str, dict[str, int]] = field(default_factory=dict)  # uid -> node -> GPUs
    pods: dict[tuple[str, str], PodSeen] = field(default_factory=dict)
    allocatable: dict[tuple[str, str], int] = field(default_factory=dict)  # (member, node)
    overcommit: dict[tuple[str, str], int] = field(default_factory=dict)
    samples: list[tuple[float, bool]] = field(default_factory=list)  # (used share, waiting)
    mechanisms: dict[str, str] = field(default_factory=dict)  # hub uid -> gang mechanism

    def pod_event(self, member: str, pod: Mapping[str, Any], now: float) -> None:
        seen = see_pod(self.pods, member, pod, now, label=UID_LABEL)
        if seen is not None and seen.node is not None:
            self._check_node(member, seen.node)

    def _check_node(self, member: str, node: str) -> None:
        held = sum(p.gpus for p in self.pods.values()
                   if p.member == member and p.node == node and p.phase == "Running")
        excess = max(0, held - self.allocatable.get((member, node), 0))
        if excess > self.overcommit.get((member, node), 0):
            self.overcommit[(member, node)] = excess

    def sample(self) -> None:
        total = sum(self.allocatable.values()) or 1
        used = sum(p.gpus for p in self.pods.values() if p.phase == "Running")
        waiting = any(uid not in self.dispatched for uid in self.created)
        self.samples.append((used / total, waiting))

    def all_running_at(self, uid: str) -> float | None:
        """When the Job's ``parallelism``-th pod was first seen Running, else None."""
        return all_running_at(self.pods.values(), uid, self.pods_wanted[uid])

    def off_plan(self) -> int:
        """Pods bound to a node their Job's plan gave fewer of its GPUs than it got there."""
        count = 0
        for uid, plan in self.plans.items():
            left = dict(plan)
            for pod in sorted((p for p in self.pods.values() if p.owner == uid and p.node),
                              key=lambda p: p.bound or 0.0):
                node = str(pod.node)
                if left.get(node, 0) >= pod.gpus:
                    left[node] -= pod.gpus
                else:
                    count += 1
        return count

    def placement(self, uid: str) -> dict[str, Any]:
        """A Job's recorded node plan next to where its pods were bound (GPUs per node)."""
        bound: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.owner == uid and pod.node:
                bound[pod.node] = bound.get(pod.node, 0) + pod.gpus
        return {"plan": self.plans.get(uid), "bound": dict(sorted(bound.items()))}

    def gangs(self, *, end: float) -> dict[str, Any]:
        """The gang figures (module docstring) over the dispatched JobSets."""
        partial, gpu_s, starts = 0, 0.0, []
        for uid in self.dispatched:
            if self.kinds.get(uid) != "JobSet":
                continue
            mine = [p for p in self.pods.values() if p.owner == uid]
            bound = sorted(p.bound for p in mine if p.bound is not None)
            if not bound:
                continue
            wanted = self.pods_wanted[uid]
            whole = bound[wanted - 1] if len(bound) >= wanted else None
            until = end if whole is None else whole
            held = sum(p.gpus * max(0.0, min(until, p.ended or end) - p.bound)
                       for p in mine if p.bound is not None and p.bound < until)
            gpu_s += held
            if whole is None or whole - bound[0] > PARTIAL_S:
                partial += 1
            if whole is not None:
                starts.append(whole - min(p.first for p in mine))
        used = sorted(set(self.mechanisms.values()))
        return {"gangs": sum(1 for u in self.dispatched if self.kinds.get(u) == "JobSet"),
                "partial_gangs": partial, "partial_gang_gpu_s": round(gpu_s, 1),
                "gang_start_p50_s": round(statistics.median(starts), 2) if starts else None,
                "gang_start_p99_s": round(percentile(starts, 0.99), 2) if starts else None,
                "gang_mechanism": ",".join(used) if used else "none"}

    def result(self, *, end: float) -> dict[str, Any]:
        running = {uid: t for uid in self.dispatched
                   if (t := self.all_running_at(uid)) is not None}
        latencies = [running[uid] - self.created[uid] for uid in running]
        pending = [p for p in self.pods.values()
                   if ((p.bound or end) - p.first) > PENDING_LIMIT_S]
        saturated = [share for share, waiting in self.samples if waiting]
        by_kind = {}
        for kind in sorted(set(self.kinds.values())):
            uids = {uid for uid, k in self.kinds.items() if k == kind}
            times = [running[uid] - self.created[uid] for uid in uids if uid in running]
            by_kind[kind] = {
                "workloads": len(uids), "dispatched": len(uids & set(self.dispatched)),
                "fully_scheduled": len(times),
                "p50_running_s": round(statistics.median(times), 1) if times else None,
                "p99_running_s": round(percentile(times, 0.99), 1) if times else None}
        return {
            "bench": "fidelity", "members": len({m for m, _ in self.allocatable}),
            "workloads": len(self.created), "dispatched": len(self.dispatched),
            "fully_scheduled": len(running), "pods": len(self.pods),
            "pods_left_pending": len(pending),
            "pods_still_pending": sum(1 for p in pending if p.bound is None),
            "overcommitted_gpus": sum(self.overcommit.values()),
            "p50_running_s": round(statistics.median(latencies), 1) if latencies else None,
            "p99_running_s": round(percentile(latencies, 0.99), 1) if latencies else None,
            "gpu_utilization": round(statistics.fmean(saturated), 3) if saturated else None,
            "saturated_s": round(len(saturated) * SAMPLE_S, 1),
            "peak_utilization": round(max((s for s, _ in self.samples), default=0.0), 3),
            "off_plan_pods": self.off_plan(),
            "gpus": sum(self.allocatable.values()),
            "by_kind": by_kind,
            **self.gangs(end=end),
        }


SAMPLE_S = 0.5
QUOTA_WAIT_S = 10.0
KUEUE_API = "kueue.x-k8s.io"
WORKLOADS = ResourceRef(group=KUEUE_API, version="v1beta2", kind="Workload",
                        plural="workloads", namespaced=True)
CLUSTER_QUEUES = ResourceRef(group=KUEUE_API, version="v1beta2", kind="ClusterQueue",
                             plural="clusterqueues", namespaced=False)


@dataclass
class QuotaWaits:
    """On Kueue members: when each copy's Workload was first seen and first had quota, and
    every member's unreserved team-a quota over time (``time.monotonic``)."""

    queue: str = "team-a"
    copies: dict[str, str] = field(default_factory=dict)  # copy uid -> hub uid
    gpus: dict[str, int] = field(default_factory=dict)  # hub uid -> GPUs
    first: dict[str, tuple[str, float]] = field(default_factory=dict)  # hub uid -> (member, t)
    reserved: dict[str, float] = field(default_factory=dict)  # hub uid -> t
    rooms: list[tuple[float, str, int]] = field(default_factory=list)  # (t, member, free)

    def copy_event(self, obj: Mapping[str, Any]) -> None:
        uid = (obj["metadata"].get("labels") or {}).get(UID_LABEL)
        if uid:
            self.copies[str(obj["metadata"]["uid"])] = str(uid)

    def workload_event(self, member: str, obj: Mapping[str, Any], now: float) -> None:
        copy_uid = (obj["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid")
        uid = self.copies.get(str(copy_uid))
        if uid is None:
            return
        self.first.setdefault(uid, (member, now))
        if any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ()):
            self.reserved.setdefault(uid, now)

    def queue_event(self, member: str, obj: Mapping[str, Any], now: float) -> None:
        if obj["metadata"]["name"] != self.queue:
            return
        nominal = sum(whole_count(r.get("nominalQuota", 0))
                      for g in obj["spec"].get("resourceGroups") or ()
                      for f in g.get("flavors") or () for r in f.get("resources") or ()
                      if r.get("name") == "nvidia.com/gpu")
        used = sum(whole_count(r.get("total", 0))
                   for f in (obj.get("status") or {}).get("flavorsReservation") or ()
                   for r in f.get("resources") or () if r.get("name") == "nvidia.com/gpu")
        self.rooms.append((now, member, nominal - used))

    def _room_at(self, member: str, t: float) -> int:
        last = 0
        for at, name, free in self.rooms:
            if name == member and at <= t:
                last = free
        return last

    def result(self, *, end: float) -> dict[str, Any]:
        members = {m for _, m, _ in self.rooms}
        waited = {uid: (member, t) for uid, (member, t) in self.first.items()
                  if self.reserved.get(uid, end) - t > QUOTA_WAIT_S}
        elsewhere = [uid for uid, (member, t) in waited.items()
                     if any(self._room_at(m, t + QUOTA_WAIT_S) >= self.gpus.get(uid, 0)
                            for m in members - {member})]
        return {"copies": len(self.first), "waited_over_10s": len(waited),
                "waited_while_room_elsewhere": len(elsewhere)}


# -- the run ----------------------------------------------------------------------------------

def local_stream(fleet: FleetSpec, *, seed: int, rate: float, seconds: float,
                 run_s: float) -> Iterator[tuple[float, str, int, int]]:
    """Local users' Jobs: (at, member, pods, run seconds), Poisson at ``rate`` over the
    members with untainted GPU nodes; 1-4 pods of 1 GPU each (seeded apart from the hub's
    stream, so ``--contention`` leaves the hub's workloads as they were)."""
    rng = random.Random(seed * 104729 + 3)
    members = [m.name for m in fleet.members
               if any(p.gpus and not p.taints for p in m.node_pools)]
    at = 0.0
    while members:
        at += rng.expovariate(rate)
        if at > seconds:
            return
        yield (at, rng.choice(members), rng.randint(1, 4),
               max(5, round(run_s * rng.uniform(0.5, 1.5))))


def local_job(name: str, pods: int, run_s: int) -> dict[str, Any]:
    """A Job a member's own user submits there: ``pods`` pods of 1 GPU on any untainted
    GPU node, running ``run_s`` s."""
    template = {"metadata": {"annotations": {
        "pod-complete.stage.kwok.x-k8s.io/delay": f"{run_s}s"}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "local", "image": "registry.invalid/local:1",
             "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": template}}


def race(fleet: FleetSpec, *, rounds: int, run_s: float) -> list[Shape]:
    """``rounds`` gangs, each a JobSet of one pod of 1 GPU per GPU of a member's smallest
    untainted product pool, pinned there: each fits exactly on an idle pool."""
    member, pool = min(((m, p) for m in fleet.members for p in m.node_pools
                        if p.gpu_product and not p.taints),
                       key=lambda mp: (mp[1].count * mp[1].gpus, mp[0].name))
    return [Shape(name=f"race-{i}", at=0.0, pods=pool.count * pool.gpus, gpus=1,
                  product=pool.gpu_product, tolerate=(), run_s=round(run_s),
                  member=member.name, kind="JobSet") for i in range(rounds)]


async def _until(check: Any, *, step: float, deadline: float = float("inf")) -> None:
    """Poll ``check()`` every ``step`` s until it is true or ``deadline`` passed."""
    while True:
        if check() or time.monotonic() > deadline:
            return
        await asyncio.sleep(step)


async def race_rounds(hub: KubeClient, members: Mapping[str, KubeClient], *, namespace: str,
                      shapes: list[Shape], seen: Observed, args: argparse.Namespace,
                      counts: dict[str, int]) -> None:
    """One gang at a time on an idle pool: once its Dispatch holds the decision (the
    dispatcher's view said it fits), a local user submits a Job of half the pool's GPUs
    straight to that member, the race a member's users run against every dispatch. The
    next round starts when the gang's and the local pods are done."""
    for client in members.values():
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOCAL_NAMESPACE}})
    await asyncio.sleep(3.0)  # the namespaces' default ServiceAccounts
    for index, shape in enumerate(shapes):
        assert shape.member is not None and shape.product is not None
        sent = time.monotonic()
        created = await hub.request("POST", JOBSETS.collection(namespace),
                                    body=workload(shape, namespace))
        uid = str(created["metadata"]["uid"])
        seen.created[uid], seen.pods_wanted[uid], seen.kinds[uid] = sent, shape.pods, "JobSet"
        # the decision recorded (the Dispatch's reservation): the view said it fits
        await _until(lambda u=uid: u in seen.plans, step=0.01)
        local = local_job(f"race-local-{index}", shape.pods // 2, round(args.local_run_s))
        local["spec"]["template"]["spec"]["nodeSelector"] = {PRODUCT: shape.product}
        await members[shape.member].request("POST", JOBS.collection(LOCAL_NAMESPACE),
                                            body=local)
        counts["local_jobs"] += 1
        counts["local_pods"] += shape.pods // 2
        deadline = time.monotonic() + args.local_run_s + shape.run_s * 2 + 60
        await _until(lambda u=uid: seen.all_running_at(u) is not None, step=0.5,
                     deadline=deadline)
        await asyncio.sleep(shape.run_s * 1.5 + 5)  # its pods finish, the pool is idle


async def local_users(members: Mapping[str, KubeClient], fleet: FleetSpec,
                      args: argparse.Namespace, start: float, counts: dict[str, int]
                      ) -> None:
    """Submit the local stream straight to the members (never through the hub)."""
    for client in members.values():
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": LOCAL_NAMESPACE}})
    for index, (at, member, pods, run_s) in enumerate(local_stream(
            fleet, seed=args.seed, rate=args.local_rate, seconds=args.seconds,
            run_s=args.local_run_s)):
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        await members[member].request("POST", JOBS.collection(LOCAL_NAMESPACE),
                                      body=local_job(f"local-{index:04d}", pods, run_s))
        counts["local_jobs"] += 1
        counts["local_pods"] += pods


def start_controller(state: FleetState, fleet: FleetSpec, workdir: Path,
                     port: int, gang_scheduling: str = "auto", *,
                     mode: str = "dispatch", log_level: str = "warning"
                     ) -> subprocess.Popen[bytes]:
    config = {"hubId": HUB_ID, "mode": mode, "hub": {"kubeconfig": state.cluster("hub").kubeconfig},
              "server": {"address": "127.0.0.1", "port": port}, "log": {"level": log_level},
              "submit": {"createNamespaces": True},
              "fleet": {"watchMemberClusters": False, "staticMembers": [
                  {"name": m.name, "kubeconfig": state.cluster(m.name).kubeconfig,
                   "labels": dict(m.labels), "gangScheduling": gang_scheduling}
                  for m in fleet.members]}}
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (workdir / "controller.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "dispatcher", "run", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT)


async def follow(client: KubeClient, ref: ResourceRef, namespace: str, selector: str | None,
                 handle: Any) -> None:
    """Feed every object of every list and event to ``handle(obj, now)``, forever."""
    async for item in watch.informer(client, ref, namespace=namespace,
                                     label_selector=selector):
        now = time.monotonic()
        for obj in item.objects if isinstance(item, watch.Listed) else [item.object]:
            handle(obj, now)


async def run(state: FleetState, fleet: FleetSpec, args: argparse.Namespace) -> dict[str, Any]:
    quota = QuotaWaits() if args.member_kueue else None
    namespace = quota.queue if quota is not None else "fidelity"
    hub = await client_for(state, "hub")
    members = {m.name: await client_for(state, m.name) for m in fleet.members}
    seen = Observed()
    for name, client in members.items():
        for node in (await watch.list_objects(client, NODES)).objects:
            gpus = whole_count(((node.get("status") or {}).get("allocatable") or {})
                                .get("nvidia.com/gpu", 0))
            if gpus:
                seen.allocatable[(name, node["metadata"]["name"])] = gpus
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    def on_copy(member: str) -> Any:
        def handle(obj: dict[str, Any], now: float) -> None:
            uid = (obj["metadata"].get("labels") or {}).get(UID_LABEL)
            if uid:
                seen.dispatched.setdefault(str(uid), member)
            if quota is not None:
                quota.copy_event(obj)
        return handle

    def on_pod(member: str) -> Any:
        return lambda obj, now: seen.pod_event(member, obj, now)

    def on_dispatch(obj: dict[str, Any], now: float) -> None:
        remote = (obj.get("status") or {}).get("remote") or {}
        workload = (obj.get("spec") or {}).get("workload") or {}
        if remote.get("gangMechanism") and workload.get("kind") == "JobSet":
            seen.mechanisms[str(workload.get("uid"))] = str(remote["gangMechanism"])
        reservation = ((obj.get("status") or {}).get("decision") or {}).get("reservation")
        if reservation and reservation.get("workloadUID") not in seen.plans:
            plan: dict[str, int] = {}
            for item in reservation.get("nodes") or ():
                plan[item["node"]] = plan.get(item["node"], 0) + int(item["gpus"])
            seen.plans[str(reservation["workloadUID"])] = plan

    tasks = [asyncio.create_task(follow(hub, DISPATCHES, namespace, None, on_dispatch))]
    for name, client in members.items():
        for ref in KINDS.values():  # a JobSet's own Jobs, if labelled, name the same uid
            tasks.append(asyncio.create_task(follow(client, ref, namespace,
                                                    f"dispatcher.io/origin={HUB_ID}",
                                                    on_copy(name))))
        tasks.append(asyncio.create_task(follow(client, PODS, namespace, UID_LABEL,
                                                on_pod(name))))
        if quota is not None:
            tasks.append(asyncio.create_task(follow(
                client, WORKLOADS, namespace, None,
                lambda obj, now, m=name: quota.workload_event(m, obj, now))))
            tasks.append(asyncio.create_task(follow(
                client, CLUSTER_QUEUES, "", None,
                lambda obj, now, m=name: quota.queue_event(m, obj, now))))

    async def sampler() -> None:
        while True:
            seen.sample()
            await asyncio.sleep(SAMPLE_S)

    tasks.append(asyncio.create_task(sampler()))
    if args.case == "interleave":
        shapes = interleave(fleet, run_s=args.run_s, gap=args.gap)
    elif args.case == "race":
        shapes = race(fleet, rounds=args.rounds, run_s=args.run_s)
    else:
        shapes = list(stream(fleet, seed=args.seed, rate=args.rate, seconds=args.seconds,
                             run_s=args.run_s, jobsets=args.jobsets))
    start = time.monotonic()
    local = {"local_jobs": 0, "local_pods": 0}
    if args.contention and args.case != "race":
        tasks.append(asyncio.create_task(local_users(members, fleet, args, start, local)))
    if args.case == "race":
        await race_rounds(hub, members, namespace=namespace, shapes=shapes, seen=seen,
                          args=args, counts=local)
    for shape in shapes if args.case != "race" else ():
        await asyncio.sleep(max(0.0, start + shape.at - time.monotonic()))
        sent = time.monotonic()
        created = await hub.request("POST", KINDS[shape.kind].collection(namespace),
                                    body=workload(shape, namespace))
        uid = str(created["metadata"]["uid"])
        seen.created[uid] = sent
        if quota is not None:
            quota.gpus[uid] = shape.pods * shape.gpus
        seen.pods_wanted[uid] = shape.pods
        seen.kinds[uid] = shape.kind
    deadline = time.monotonic() + args.drain_s
    while time.monotonic() < deadline:
        if all(uid in seen.dispatched and seen.all_running_at(uid) is not None
               for uid in seen.created):
            break
        await asyncio.sleep(1.0)
    end = time.monotonic()
    waiting = await undispatched(hub, namespace, seen, shapes)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in (hub, *members.values()):
        await client.close()
    result = seen.result(end=end)
    if quota is not None:
        result["quota"] = quota.result(end=end)
    if args.case == "interleave":
        result["detail"] = {shape.name: seen.placement(uid)
                            for uid, shape in zip(seen.created, shapes, strict=True)}
    result["mechanism_dispatches"] = len(seen.mechanisms)
    result.update(contention=bool(args.contention) or args.case == "race", **local,
                  gang_scheduling_setting=args.gang_scheduling)
    result.update(case=args.case, seed=args.seed, rate=args.rate, jobsets=args.jobsets,
                  stream_s=args.seconds,
                  run_s=args.run_s, wall_s=round(end - start, 1),
                  requested_gpus=sum(s.pods * s.gpus for s in shapes), undispatched=waiting)
    return result


async def undispatched(hub: KubeClient, namespace: str, seen: Observed,
                       shapes: list[Shape]) -> list[dict[str, Any]]:
    """The Jobs still waiting at the end, with their shape and the dispatcher's reason."""
    by_uid = {uid: shape for uid, shape in zip(seen.created, shapes, strict=True)}
    out = []
    for obj in (await watch.list_objects(hub, DISPATCHES, namespace=namespace)).objects:
        record = records.read(obj)
        shape = by_uid.get(record.workload_uid)
        if shape is None or record.workload_uid in seen.dispatched:
            continue
        out.append({"job": shape.name, "pods": shape.pods, "gpus": shape.gpus,
                    "product": shape.product, "tolerates": bool(shape.tolerate),
                    "phase": record.phase, "why": record.pending_message[:300]})
    return sorted(out, key=lambda item: str(item["job"]))


async def main_async(args: argparse.Namespace) -> None:
    fleet = load_fleet(args.fleet or ROOT / "clusters" / (
        "kueue-members.yaml" if args.member_kueue else "local.yaml"))
    with tempfile.TemporaryDirectory(prefix="fidelity-bench-") as tmp:
        root = Path(tmp)
        began = time.monotonic()
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet", fleet=fleet,
                                        real=True, member_kueue=args.member_kueue)
        print(f"# real fleet up in {time.monotonic() - began:.0f}s", file=sys.stderr)
        port = free_port()
        proc = start_controller(state, fleet, root, port, args.gang_scheduling)
        try:
            await wait_ready(port, proc)
            result = await run(state, fleet, args)
            result["machine"] = machine()
            print(json.dumps(result), flush=True)
        finally:
            await asyncio.to_thread(stop, proc)
            if args.keep_log:
                await asyncio.to_thread(Path(args.keep_log).write_bytes,
                                        (root / "controller.log").read_bytes())
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--member-kueue", action="store_true",
                        help="members run their own Kueue (default fleet: "
                             "clusters/kueue-members.yaml); reports quota waits")
    parser.add_argument("--fleet", default=None,
                        help="fleet file (default: clusters/local.yaml, with --member-kueue "
                             "clusters/kueue-members.yaml)")
    parser.add_argument("--case", choices=["stream", "interleave", "race"], default="stream",
                        help="stream: the seeded oversubscribing mix; interleave: two gangs "
                             "decided back to back (see interleave()); race: a local Job "
                             "races each gang to its pool (see race_rounds())")
    parser.add_argument("--rounds", type=int, default=4, help="race: gangs, one at a time")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="interleave: seconds between the two gangs' creates")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rate", type=float, default=0.4, help="workloads per second")
    parser.add_argument("--jobsets", type=float, default=0.5,
                        help="share of the multi-pod workloads streamed as JobSets "
                             "(0: Jobs only, the mix of earlier runs)")
    parser.add_argument("--seconds", type=float, default=90.0, help="stream duration")
    parser.add_argument("--run-s", type=float, default=45.0,
                        help="mean seconds a pod runs before it succeeds")
    parser.add_argument("--drain-s", type=float, default=150.0,
                        help="after the stream, wait this long at most for the backlog")
    parser.add_argument("--keep-log", help="copy the controller's log here")
    parser.add_argument("--contention", action="store_true",
                        help="local users submit Jobs straight to the members meanwhile")
    parser.add_argument("--local-rate", type=float, default=0.5,
                        help="--contention: local Jobs per second (over all members)")
    parser.add_argument("--local-run-s", type=float, default=30.0,
                        help="--contention: mean seconds a local pod runs")
    parser.add_argument("--gang-scheduling", default="auto",
                        choices=["auto", "none", "workload-api", "coscheduling"],
                        help="the members' gangScheduling (auto: the Workload API the dev "
                             "fleet's members serve)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
