"""Side by side: the dispatcher and Kueue MultiKueue, same fleet, same seeded workloads.

One run, three systems, each on a freshly started real dev fleet (``devfleet.up``: the hub
and the members of ``--fleet``, each member with kube-apiserver, kube-controller-manager,
kube-scheduler, kwok and the JobSet operator; the fleet is torn down and started again
between systems):

1. ``dispatcher``: ``dispatcher run`` as its own process (configured as
   ``benchmarks/fidelity.py`` does), plain Jobs and JobSets on the hub;
2. ``multikueue``: the ``--with-kueue`` profile (Kueue v0.17.0: a MultiKueue manager on the
   hub, a worker on each member, ResourceFlavors per GPU product and taint, ClusterQueues
   sized to the GPUs, see ``dispatcher/devfleet/multikueue.py``) at Kueue's default client
   limits (QPS 20, burst 30), the same Jobs and JobSets labelled
   ``kueue.x-k8s.io/queue-name: gpus``;
3. ``multikueue-tuned``: the same with ``--tuned-qps``/``--tuned-burst`` on every Kueue;
4. ``multikueue+dispatcher``: the ``multikueue`` profile with the manager's
   ``multiKueue.dispatcherName`` set to ours and ``dispatcher run`` with
   ``mode: multikueue-dispatcher`` (Kueue keeps quota and makes the copies, we choose the
   worker: ``control/nominator.py``); ``multikueue-tuned+dispatcher`` the same at the
   tuned client limits.

The workloads are ``fidelity.stream``'s seeded mix (1-16 pods of 1, 2, 4 or 8 GPUs, some
with a GPU product selector, some tolerating the tainted pool, each pod running ``--run-s``
+-50 %); a seeded share of the multi-pod ones (``--jobset-share``) is sent as a JobSet
(one replicated Job of one pod per replica) instead of a Job. They are created on the hub
as one burst (back to back, not paced): the fleet is oversubscribed, so every system
queues, fills the fleet and reuses GPUs as pods finish.

Measured, per system (one JSON line each; times by ``time.monotonic`` in this process):

- ``throughput_per_s``: first-wave dispatch rate: workloads whose remote object (the Job or
  JobSet on a member) appeared before any pod of the run finished, over the time from the
  first create to the last of them (how fast the system fills an empty fleet);
- ``p50/p99_created_ms``: hub create -> remote object seen on a member (all workloads, so
  queueing counts) and ``first_wave_p50/p99_created_ms`` (only the first wave: no waiting
  for capacity);
- ``first_wave_stages``: with Kueue on the hub, the first wave's p50/p99 of each stage
  of that path: ``quota`` (hub create -> the hub Workload's quota reserved), ``nominated``
  (-> a worker nominated: MultiKueue's own or ours) and ``copy`` (-> the remote object);
- ``p50/p99_running_s``: hub create -> all its pods seen Running;
- ``left_pending``: workloads that waited more than 10 s in total, undispatched, while some
  member had free GPUs on nodes their pods may use (right product, tolerated taints) for
  all their pods at once (free = allocatable minus GPUs of bound, unfinished pods);
  (``left_pending_by_workload``: those workloads and their seconds);
- ``unschedulable_pods``: pods that stayed unbound more than 10 s on the member chosen;
- ``gpu_utilization``: mean share of the fleet's GPUs held by Running pods while some
  workload was still waiting for dispatch (saturation);
- ``cpu_s``/``rss_mb``: CPU seconds over the run and peak RSS of the multi-cluster
  controller (``dispatcher run`` with its children; the hub's Kueue manager), and
  ``worker_cpu_s``/``worker_rss_mb``: the same summed over the members' Kueue instances
  (MultiKueue needs one per member; the dispatcher needs nothing there);
  ``controller_cpu_ms_per_workload``/``worker_cpu_ms_per_workload`` the same per workload;
- ``copies_per_workload``: members on which a remote object of the workload (its Job or
  JobSet) was ever seen; ``remote_workloads_per_workload``: for MultiKueue, members on
  which a copy of its Kueue Workload was ever seen (the all-at-once dispatcher copies the
  Workload to every worker and the Job only to the one that admits it first);
- ``hub_writes_per_workload``: write requests the hub's kube-apiserver served from the
  first create until every workload ran (``apiserver_request_total``, Events included),
  less this benchmark's own creates and the time-driven Lease renewals, per workload;
  ``hub_writes`` by verb and resource; ``hub_conflicts`` the hub's writes answered 409
  (a writer that sent a resourceVersion the object had moved past: it reads again and
  retries, at its client's QPS), by verb and resource.

After every system of a mix ran, one ``peers-wave`` line per system gives the first
wave's create -> remote p50/p99 and stages over the workloads that were in *every*
system's first wave (the same workloads: each system's own first wave is a different set,
and one that starts more before the first pod finishes has later arrivals in its p99).

Two mixes (``--mixes``): ``stream`` (the seeded mix above, ``--workloads`` of it) and
``single`` (``--single-jobs`` single-pod 1-GPU Jobs, one burst: the per-dispatch cost with
nothing to queue on but capacity). After every system of a mix ran, one ``peers-ratio`` line
per peer says how many times the dispatcher's figure the peer's is (writes, controller
CPU, controller plus workers CPU, first-wave p50/p99).

Before the systems of the ``stream`` mix run, one ``peers-limit`` line gives the packing
limit of its workloads: the GPU use while work waits that a greedy offline packer reaches
on the same workloads in the same order (``packing_limit``: ``dispatcher simulate``'s
queue and placement core, everything there at once, exact run times, instant binding,
unbounded backfill, the best of most-free and best-fit); ``--limit-only`` prints it alone,
no fleet needed. ``--keep DIR`` keeps each system's work directory with its controller log
(``--log-level info`` logs every decision), ``fittable.json`` (for each waiting workload,
when the benchmark saw room for it and on which member) and ``pods.json`` (each pod's node
and times): what a left-pending workload's wait is compared with.

Defaults take a few minutes per system on 2 cores; ``--big`` streams four times the
workloads (and drains longer).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import procstats  # benchmarks/procstats.py
from fidelity import (  # benchmarks/fidelity.py
    PodSeen,
    Shape,
    all_running_at,
    job,
    see_pod,
    start_controller,
    stream,
)
from resolve import machine  # benchmarks/resolve.py
from running import client_for, percentile, stop, wait_ready  # benchmarks/running.py

from dispatcher.control.nominator import DISPATCHER_NAME
from dispatcher.devfleet import devfleet, multikueue
from dispatcher.devfleet.binaries import ensure_binaries, ensure_peers
from dispatcher.devfleet.controlplane import FleetState, ProcessInfo, free_port
from dispatcher.devfleet.kueue import ClientLimits
from dispatcher.fleet.fleetfile import FleetSpec, load_fleet
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NODES, PODS, ResourceRef
from dispatcher.sim.runner import run_scenario
from dispatcher.sim.scenario import QueueSpec, Scenario, WorkloadEntry
from dispatcher.workloads.podspec import GPU_RESOURCE
from dispatcher.workloads.quantity import whole_count

ROOT = Path(__file__).resolve().parent.parent
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
KUEUE_WORKLOADS = ResourceRef(group="kueue.x-k8s.io", version="v1beta2", kind="Workload",
                              plural="workloads", namespaced=True)
NAMESPACE = "peers"
WORKLOAD_LABEL = "peers.bench/workload"
KIND_LABEL = "peers.bench/kind"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRODUCT = "nvidia.com/gpu.product"
LIMIT_S = 10.0
SAMPLE_S = 0.5
SYSTEMS = ("dispatcher", "multikueue", "multikueue-tuned", "multikueue+dispatcher",
           "multikueue-tuned+dispatcher")


# -- the workloads (pure) ---------------------------------------------------------------------

def workloads(fleet: FleetSpec, *, seed: int, count: int, run_s: float,
              jobset_share: float) -> list[tuple[Shape, str]]:
    """``fidelity.stream``'s first ``count`` shapes, each with its kind: a seeded
    ``jobset_share`` of the multi-pod ones become JobSets, the rest stay Jobs."""
    shapes = []
    for shape in stream(fleet, seed=seed, rate=1.0, seconds=float("inf"), run_s=run_s):
        shapes.append(shape)
        if len(shapes) == count:
            break
    rng = random.Random(seed + 1)
    out = []
    for shape in shapes:
        if shape.pods > 1 and rng.random() < jobset_share:
            out.append((replace(shape, name=shape.name.replace("job-", "jobset-")), "JobSet"))
        else:
            out.append((shape, "Job"))
    return out


def single_pod_jobs(count: int, *, run_s: float) -> list[tuple[Shape, str]]:
    """``count`` Jobs of one pod and one GPU, any product, all at once."""
    return [(Shape(name=f"job-{i:04d}", at=0.0, pods=1, gpus=1, product=None, tolerate=(),
                   run_s=int(run_s)), "Job") for i in range(count)]


def hub_write_figures(found: Mapping[str, int], items: list[tuple[Shape, str]]
                      ) -> dict[str, Any]:
    """``hub_writes_per_workload`` of a window's hub writes (``procstats.writes``): this
    benchmark's own creates and Lease renewals left out."""
    own = {"POST jobs": sum(1 for _, k in items if k == "Job"),
           "POST jobsets": sum(1 for _, k in items if k == "JobSet")}
    total = sum(max(0, n - own.get(what, 0)) for what, n in found.items()
                if not what.endswith((" leases", " leases/status")))
    return {"hub_writes_per_workload": round(total / max(len(items), 1), 2),
            "hub_writes": dict(found)}


RATIO_KEYS = ("hub_writes_per_workload", "controller_cpu_ms_per_workload",
              "total_cpu_ms_per_workload", "first_wave_p50_created_ms",
              "first_wave_p99_created_ms", "p50_running_s", "p99_running_s",
              "copies_per_workload", "remote_workloads_per_workload")


def common_wave(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``peers-wave`` row per system: the first wave's figures over the workloads that
    were in *every* system's first wave (each system's own wave is a different set: one
    that starts more workloads before the first finishes has later ones in its p99)."""
    if len(rows) < 2:  # a comparison needs two
        return []
    common = set.intersection(*(set(r["_wave"]) for r in rows))
    names = sorted(common)
    return [{"bench": "peers-wave", "mix": r.get("mix"), "system": r["system"],
             "workloads": len(names), **r["_seen"].on(names)} for r in rows]


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``peers-ratio`` row per peer of a mix: peer figure / dispatcher figure."""
    base = next((r for r in rows if r["system"] == "dispatcher"), None)
    if base is None:
        return []
    out = []
    for row in rows:
        if row is base:
            continue
        ratio: dict[str, Any] = {"bench": "peers-ratio", "mix": row.get("mix"),
                                 "system": row["system"], "vs": "dispatcher"}
        for key in RATIO_KEYS:
            mine, theirs = base.get(key), row.get(key)
            ratio[key] = (round(theirs / mine, 2) if isinstance(mine, (int, float)) and mine
                          and isinstance(theirs, (int, float)) else None)
        out.append(ratio)
    return out


def manifest(shape: Shape, kind: str, *, queue: str | None) -> dict[str, Any]:
    """The hub object: ``fidelity.job`` for a Job; for a JobSet, one replicated Job of
    ``shape.pods`` replicas, one pod each, with the same pod template. Both carry the
    benchmark's labels on the object and its pods, and ``queue``'s label if given."""
    base = job(shape, NAMESPACE)
    labels = {WORKLOAD_LABEL: shape.name, KIND_LABEL: kind}
    if queue:
        labels[QUEUE_LABEL] = queue
    template = base["spec"]["template"]
    template["metadata"]["labels"] = {WORKLOAD_LABEL: shape.name}
    if kind == "Job":
        base["metadata"]["labels"] = labels
        return base
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": shape.name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"replicatedJobs": [{"name": "worker", "replicas": shape.pods,
                                         "template": {"spec": {
                                             "parallelism": 1, "completions": 1,
                                             "backoffLimit": 0, "template": template}}}]}}


def packing_limit(fleet: FleetSpec, items: list[tuple[Shape, str]], *,
                  policies: tuple[str, ...] = ("most-free", "best-fit")) -> dict[str, Any]:
    """The best GPU use while work waits that a greedy offline packer reaches on the same
    workloads in the same arrival order: ``dispatcher simulate`` (the controller's own
    queue and placement core over the capacity model) with every workload there at once,
    each pod running exactly its ``run_s``, binding instant, backfill unbounded and no
    claims, sampled every second; the best of ``policies``. A live system also pays pod
    start-up, watch latency and the kwok stages, so it ends below this."""
    entries = tuple(WorkloadEntry(at=0.0, manifest=manifest(shape, kind, queue=None),
                                  run_time=float(shape.run_s)) for shape, kind in items)
    scenario = Scenario(name="peers-packing-limit", source="benchmarks/peers.py", seed=0,
                        duration=24 * 3600.0, policies=policies, fleet=fleet,
                        workloads=entries, sample_interval=1.0,
                        queue=QueueSpec(backfill_limit=10**9, claim_after_s=0.0))
    gpus = {m.name: sum(p.count * p.gpus for p in m.node_pools) for m in fleet.members}
    total = sum(gpus.values()) or 1
    best: dict[str, Any] = {}
    for result in run_scenario(scenario).results:
        busy = [sum(u * gpus.get(m, 0) for m, u in s.utilization.items()) / total
                for s in result.samples if s.pending]
        waits = [d.wait for d in result.decisions]
        row: dict[str, Any] = {"policy": result.policy,
                               "gpu_utilization": round(statistics.fmean(busy), 3)
                               if busy else None,
                               "saturated_s": len(busy),
                               "p50_wait_s": round(percentile(waits, 0.5), 1)
                               if waits else None,
                               "p99_wait_s": round(percentile(waits, 0.99), 1)
                               if waits else None}
        if not best or (row["gpu_utilization"] or 0) > (best["gpu_utilization"] or 0):
            best = row
    return {"bench": "peers-limit", "workloads": len(items), **best}


# -- what the watches saw ---------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    member: str
    name: str
    gpus: int
    product: str | None
    taints: tuple[tuple[str, str, str], ...]


def _tolerated(taint: tuple[str, str, str], tolerations: tuple[dict[str, str], ...]) -> bool:
    key, value, effect = taint
    if effect not in ("NoSchedule", "NoExecute"):
        return True
    return any(t.get("key") == key and t.get("value", "") == value
               and t.get("effect", effect) == effect for t in tolerations)


@dataclass
class Observed:
    """Everything the watches saw, by time."""

    shapes: dict[str, Shape] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    remote: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> member, t
    copies: dict[str, set[str]] = field(default_factory=dict)  # name -> members ever
    remote_workloads: dict[str, set[str]] = field(default_factory=dict)  # the same, Kueue's
    quota_at: dict[str, float] = field(default_factory=dict)  # hub Workload's quota seen
    nominated_at: dict[str, float] = field(default_factory=dict)  # its first nominations
    pods: dict[tuple[str, str], PodSeen] = field(default_factory=dict)
    nodes: dict[tuple[str, str], Node] = field(default_factory=dict)
    samples: list[tuple[float, bool]] = field(default_factory=list)
    fittable_s: dict[str, float] = field(default_factory=dict)
    fittable_at: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # --keep
    first_done: float | None = None

    def pod_event(self, member: str, pod: Mapping[str, Any], now: float, *,
                  deleted: bool = False) -> None:
        seen = see_pod(self.pods, member, pod, now, label=WORKLOAD_LABEL, deleted=deleted)
        if (seen is not None and seen.phase in ("Succeeded", "Failed")
                and self.first_done is None):
            self.first_done = now

    def remote_event(self, member: str, obj: Mapping[str, Any], now: float) -> None:
        name = ((obj.get("metadata") or {}).get("labels") or {}).get(WORKLOAD_LABEL)
        if name in self.created:
            self.remote.setdefault(str(name), (member, now))
            self.copies.setdefault(str(name), set()).add(member)

    def remote_workload(self, member: str, obj: Mapping[str, Any]) -> None:
        """A member's copy of a hub Kueue Workload (MultiKueue names it as the hub's:
        ``<kind>-<job name>-<hash>``)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        kind, _, rest = name.partition("-")
        job = rest.rpartition("-")[0]
        if job in self.created and kind == self.kinds[job].lower():
            self.remote_workloads.setdefault(job, set()).add(member)

    def hub_workload(self, obj: Mapping[str, Any], now: float) -> None:
        """The hub's Kueue Workload of a job: when its quota was first seen reserved and
        when a worker was first nominated for it (the stages before a copy exists)."""
        owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
        job = next((str(o.get("name")) for o in owners if o.get("controller")), "")
        if job not in self.created:
            return
        status = obj.get("status") or {}
        if status.get("admission") is not None or any(
                c.get("type") == "QuotaReserved" and c.get("status") == "True"
                for c in status.get("conditions") or ()):
            self.quota_at.setdefault(job, now)
        if status.get("nominatedClusterNames"):
            self.nominated_at.setdefault(job, now)

    def stages(self, wave: list[str]) -> dict[str, dict[str, float | None]] | None:
        """First-wave p50/p99 ms of each stage from the hub create to the copy: Kueue
        reserves quota, a worker is nominated, the copy appears on it."""
        if not self.quota_at:
            return None
        marks = {"quota": self.quota_at, "nominated": self.nominated_at,
                 "copy": {n: t for n, (_, t) in self.remote.items()}}
        out: dict[str, dict[str, float | None]] = {}
        before = {n: self.created[n] for n in wave}
        for stage, mark in marks.items():
            spans = [t - before[n] for n in wave if (t := mark.get(n)) is not None]
            for n in wave:
                if (t := mark.get(n)) is not None:
                    before[n] = t
            out[stage] = {"p50_ms": round(percentile(spans, 0.5) * 1000, 1) if spans
                          else None,
                          "p99_ms": round(percentile(spans, 0.99) * 1000, 1) if spans
                          else None}
        return out

    def _fits_somewhere(self, shape: Shape) -> str | None:
        held: dict[tuple[str, str], int] = {}
        for pod in self.pods.values():
            if pod.holds:
                held[(pod.member, str(pod.node))] = held.get((pod.member, str(pod.node)),
                                                             0) + pod.gpus
        by_member: dict[str, int] = {}
        for key, node in self.nodes.items():
            if shape.product and node.product != shape.product:
                continue
            if not all(_tolerated(t, shape.tolerate) for t in node.taints):
                continue
            free = node.gpus - held.get(key, 0)
            by_member[node.member] = by_member.get(node.member, 0) + max(0, free) // shape.gpus
        return next((m for m, slots in by_member.items() if slots >= shape.pods), None)

    def sample(self, dt: float) -> None:
        total = sum(n.gpus for n in self.nodes.values()) or 1
        used = sum(p.gpus for p in self.pods.values()
                   if p.phase == "Running" and not p.gone)
        waiting = [n for n in self.created if n not in self.remote]
        self.samples.append((used / total, bool(waiting)))
        for name in waiting:
            if (member := self._fits_somewhere(self.shapes[name])) is not None:
                self.fittable_s[name] = self.fittable_s.get(name, 0.0) + dt
                self.fittable_at.setdefault(name, []).append(
                    (time.strftime("%H:%M:%S", time.gmtime()), member))

    def all_running_at(self, name: str) -> float | None:
        return all_running_at(self.pods.values(), name, self.shapes[name].pods)

    def done(self) -> bool:
        return all(n in self.remote and self.all_running_at(n) is not None
                   for n in self.created)

    def wave(self, *, end: float) -> list[str]:
        """The first wave: workloads whose remote object appeared before any pod of the
        run finished."""
        cutoff = self.first_done if self.first_done is not None else end
        return [n for n, (_, t) in self.remote.items() if t <= cutoff]

    def on(self, names: list[str]) -> dict[str, Any]:
        """create -> remote p50/p99 ms and the stages over exactly ``names`` (the
        ``peers-wave`` row: the same workloads in every system)."""
        spans = [self.remote[n][1] - self.created[n] for n in names if n in self.remote]
        return {"p50_created_ms": round(percentile(spans, 0.5) * 1000, 1) if spans else None,
                "p99_created_ms": round(percentile(spans, 0.99) * 1000, 1) if spans else None,
                "stages": self.stages(names)}

    def result(self, *, end: float) -> dict[str, Any]:
        start = min(self.created.values())
        created = {n: self.remote[n][1] - self.created[n] for n in self.remote}
        wave = self.wave(end=end)
        wave_end = max((self.remote[n][1] for n in wave), default=start)
        running = {n: t - self.created[n] for n in self.remote
                   if (t := self.all_running_at(n)) is not None}
        saturated = [share for share, waiting in self.samples if waiting]

        def ms(values: list[float], q: float) -> float | None:
            return round(percentile(values, q) * 1000, 1) if values else None

        def s(values: list[float], q: float) -> float | None:
            return round(percentile(values, q), 1) if values else None

        return {
            "workloads": len(self.created),
            "jobsets": sum(1 for kind in self.kinds.values() if kind == "JobSet"),
            "dispatched": len(self.remote), "fully_running": len(running),
            "copies_per_workload": round(statistics.fmean(len(m) for m in self.copies.values()),
                                         2) if self.copies else None,
            "remote_workloads_per_workload": round(statistics.fmean(
                len(m) for m in self.remote_workloads.values()), 2)
            if self.remote_workloads else None,
            "throughput_per_s": (round(len(wave) / (wave_end - start), 2)
                                 if wave and wave_end > start else None),
            "first_wave": len(wave),
            "p50_created_ms": ms(list(created.values()), 0.5),
            "p99_created_ms": ms(list(created.values()), 0.99),
            "first_wave_p50_created_ms": ms([created[n] for n in wave], 0.5),
            "first_wave_p99_created_ms": ms([created[n] for n in wave], 0.99),
            "first_wave_stages": self.stages(wave),
            "p50_running_s": s(list(running.values()), 0.5),
            "p99_running_s": s(list(running.values()), 0.99),
            "left_pending": sum(1 for t in self.fittable_s.values() if t > LIMIT_S),
            "left_pending_s": round(sum(self.fittable_s.values()), 1),
            "left_pending_by_workload": {n: round(t, 1) for n, t in sorted(
                self.fittable_s.items()) if t > LIMIT_S},
            "_fittable_at": self.fittable_at,
            "unschedulable_pods": sum(1 for p in self.pods.values()
                                      if ((p.bound or end) - p.first) > LIMIT_S),
            "pods_never_bound": sum(1 for p in self.pods.values() if p.bound is None),
            "gpu_utilization": round(statistics.fmean(saturated), 3) if saturated else None,
            "saturated_s": round(len(saturated) * SAMPLE_S, 1),
            "gpus": sum(n.gpus for n in self.nodes.values()),
            "requested_gpus": sum(s.pods * s.gpus for s in self.shapes.values()),
        }


# -- process accounting -----------------------------------------------------------------------

def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) of ``pids`` and their live descendants."""
    return sum(procstats.cpu_seconds(pid) for pid in pids)


def rss_mb(pids: list[int]) -> float:
    """Resident memory (MiB) of ``pids`` and their descendants now."""
    return sum(procstats.rss_mb(pid) for pid in pids)


# -- one system -------------------------------------------------------------------------------

async def follow(client: KubeClient, ref: ResourceRef, selector: str | None,
                 handle: Any) -> None:
    """Feed every object of every list and event to ``handle(obj, now, deleted)``."""
    async for item in watch.informer(client, ref, namespace=NAMESPACE,
                                     label_selector=selector):
        now = time.monotonic()
        if isinstance(item, watch.Listed):
            for obj in item.objects:
                handle(obj, now, False)
        else:
            handle(item.object, now, item.type == "DELETED")


async def measure(state: FleetState, fleet: FleetSpec, items: list[tuple[Shape, str]], *,
                  queue: str | None, controller: list[int], workers: list[int],
                  drain_s: float) -> dict[str, Any]:
    """Create ``items`` on the hub as one burst and watch the members until every workload
    runs (or ``drain_s`` passes)."""
    hub = await client_for(state, "hub")
    members = {m.name: await client_for(state, m.name) for m in fleet.members}
    seen = Observed()
    for name, client in members.items():
        for node in (await watch.list_objects(client, NODES)).objects:
            gpus = whole_count(((node.get("status") or {}).get("allocatable") or {})
                               .get(GPU_RESOURCE, 0))
            if gpus:
                meta, spec = node["metadata"], node.get("spec") or {}
                seen.nodes[(name, meta["name"])] = Node(
                    member=name, name=meta["name"], gpus=gpus,
                    product=(meta.get("labels") or {}).get(PRODUCT),
                    taints=tuple((t["key"], t.get("value", ""), t["effect"])
                                 for t in spec.get("taints") or ()))
    tasks = []
    for name, client in members.items():
        tasks += [
            asyncio.create_task(follow(client, JOBS, f"{KIND_LABEL}=Job",
                                       lambda o, t, _d, m=name: seen.remote_event(m, o, t))),
            asyncio.create_task(follow(client, JOBSETS, f"{KIND_LABEL}=JobSet",
                                       lambda o, t, _d, m=name: seen.remote_event(m, o, t))),
            asyncio.create_task(follow(client, PODS, WORKLOAD_LABEL,
                                       lambda o, t, d, m=name: seen.pod_event(m, o, t,
                                                                              deleted=d)))]
        if queue is not None:  # MultiKueue: its Workload copies too
            tasks.append(asyncio.create_task(follow(
                client, KUEUE_WORKLOADS, None,
                lambda o, _t, _d, m=name: seen.remote_workload(m, o))))
    if queue is not None:
        tasks.append(asyncio.create_task(follow(
            hub, KUEUE_WORKLOADS, None, lambda o, t, _d: seen.hub_workload(o, t))))
    peak = {"controller": 0.0, "workers": 0.0}

    async def sampler() -> None:
        while True:
            seen.sample(SAMPLE_S)
            peak["controller"] = max(peak["controller"], rss_mb(controller))
            peak["workers"] = max(peak["workers"], rss_mb(workers))
            await asyncio.sleep(SAMPLE_S)

    await asyncio.sleep(2.0)  # the watches have listed
    counts0 = await asyncio.to_thread(procstats.request_counts, state.cluster("hub"))
    cpu0, wcpu0 = cpu_s(controller), cpu_s(workers)
    tasks.append(asyncio.create_task(sampler()))
    for shape, kind in items:
        ref = JOBS if kind == "Job" else JOBSETS
        seen.shapes[shape.name], seen.kinds[shape.name] = shape, kind
        seen.created[shape.name] = time.monotonic()
        await hub.request("POST", ref.collection(NAMESPACE),
                          body=manifest(shape, kind, queue=queue))
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline:
        if seen.done():
            break
        await asyncio.sleep(1.0)
    end = time.monotonic()
    cpu1, wcpu1 = cpu_s(controller), cpu_s(workers)
    counts1 = await asyncio.to_thread(procstats.request_counts, state.cluster("hub"))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in (hub, *members.values()):
        await client.close()
    result = seen.result(end=end)
    result["_seen"], result["_wave"] = seen, seen.wave(end=end)
    count = max(len(items), 1)
    result.update(cpu_s=round(cpu1 - cpu0, 1), rss_mb=round(peak["controller"]),
                  worker_cpu_s=round(wcpu1 - wcpu0, 1), worker_rss_mb=round(peak["workers"]),
                  controller_cpu_ms_per_workload=round((cpu1 - cpu0) * 1000 / count, 1),
                  worker_cpu_ms_per_workload=round((wcpu1 - wcpu0) * 1000 / count, 1),
                  total_cpu_ms_per_workload=round((cpu1 - cpu0 + wcpu1 - wcpu0) * 1000
                                                  / count, 1),
                  wall_s=round(end - min(seen.created.values()), 1),
                  **hub_write_figures(procstats.writes(counts0, counts1), items),
                  hub_conflicts=procstats.conflicts(counts0, counts1))
    return result


def _kueue_pids(state: FleetState) -> tuple[list[int], list[int]]:
    def pid(procs: list[ProcessInfo]) -> list[int]:
        return [p.pid for p in procs if p.role == "kueue"]
    hub = pid(state.cluster("hub").components)
    return hub, [x for c in state.clusters if c.name != "hub" for x in pid(c.components)]


async def run_system(system: str, fleet: FleetSpec, items: list[tuple[Shape, str]],
                     args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start a fresh fleet for ``system``, measure, stop it."""
    root = workdir / system
    limits = None
    if system == "multikueue":
        limits = ClientLimits()
    elif system == "multikueue-tuned":
        limits = ClientLimits(qps=args.tuned_qps, burst=args.tuned_burst)
    elif system == "multikueue+dispatcher":
        limits = ClientLimits(dispatcher_name=DISPATCHER_NAME)
    elif system == "multikueue-tuned+dispatcher":
        limits = ClientLimits(qps=args.tuned_qps, burst=args.tuned_burst,
                              dispatcher_name=DISPATCHER_NAME)
    began = time.monotonic()
    state = await asyncio.to_thread(devfleet.up, root=root / "fleet", fleet=fleet, real=True,
                                    job_seconds=args.run_s, kueue=limits)
    print(f"# {system}: fleet up in {time.monotonic() - began:.0f}s", file=sys.stderr)
    proc: subprocess.Popen[bytes] | None = None
    try:
        if limits is None:
            port = free_port()
            proc = start_controller(state, fleet, root, port, log_level=args.log_level)
            await wait_ready(port, proc)
            await asyncio.to_thread(state.cluster("hub").rest().ensure, "/api/v1/namespaces",
                                    {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": NAMESPACE}})
            controller, workers = [proc.pid], list[int]()
        else:
            for cluster in state.clusters:
                await asyncio.to_thread(multikueue.add_queue, cluster.rest(), NAMESPACE)
            controller, workers = _kueue_pids(state)
            if limits.dispatcher_name is not None:  # ours chooses: the manager's and ours
                port = free_port()
                proc = start_controller(state, fleet, root, port,
                                        mode="multikueue-dispatcher",
                                        log_level=args.log_level)
                await wait_ready(port, proc)
                controller = [*controller, proc.pid]
        result = await measure(state, fleet, items, queue=None if limits is None
                               else multikueue.QUEUE, controller=controller, workers=workers,
                               drain_s=args.drain_s)
    finally:
        if proc is not None:
            await asyncio.to_thread(stop, proc)
        await asyncio.to_thread(devfleet.down, root=root / "fleet")
    if args.keep:
        (root / "fittable.json").write_text(json.dumps(result["_fittable_at"]))
        (root / "pods.json").write_text(json.dumps(
            [{"owner": p.owner, "member": m, "pod": name, "node": p.node, "gpus": p.gpus,
              "first": p.first, "bound": p.bound, "running": p.running, "ended": p.ended}
             for (m, name), p in result["_seen"].pods.items()]))
    limits_out = None if limits is None else {"qps": limits.qps or 20.0,
                                              "burst": limits.burst or 30}
    return {"bench": "peers", "system": system, **result, "kueue_client": limits_out}


async def main_async(args: argparse.Namespace) -> None:
    fleet = load_fleet(args.fleet)
    os.environ.setdefault("DISPATCHER_DEV_OPERATORS", "jobset")  # the only operator used
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown system(s) {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    count = args.workloads * (4 if args.big else 1)
    if args.limit_only:
        items = workloads(fleet, seed=args.seed, count=count, run_s=args.run_s,
                          jobset_share=args.jobset_share)
        print(json.dumps({**packing_limit(fleet, items), "seed": args.seed}), flush=True)
        return
    await asyncio.to_thread(ensure_binaries)
    if any(s.startswith("multikueue") for s in systems):
        await asyncio.to_thread(ensure_peers)
    mixes = [m for m in args.mixes.split(",") if m]
    if set(mixes) - {"stream", "single"}:
        raise SystemExit(f"unknown mix(es) {sorted(set(mixes) - {'stream', 'single'})}; "
                         f"known: stream, single")
    with (contextlib.nullcontext(args.keep) if args.keep
          else tempfile.TemporaryDirectory(prefix="peers-bench-")) as tmp:
        for mix in mixes:
            items = (single_pod_jobs(args.single_jobs, run_s=args.run_s) if mix == "single"
                     else workloads(fleet, seed=args.seed, count=count, run_s=args.run_s,
                                    jobset_share=args.jobset_share))
            if mix == "stream":
                print(json.dumps({**packing_limit(fleet, items), "mix": mix,
                                  "seed": args.seed}), flush=True)
            rows = []
            for system in systems:
                result = await run_system(system, fleet, items, args, Path(tmp) / mix)
                result.update(mix=mix, seed=args.seed, run_s=args.run_s, machine=machine())
                rows.append(result)
                print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}),
                      flush=True)
            for row in [*common_wave(rows), *ratios(rows)]:
                print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default=str(ROOT / "clusters" / "local.yaml"),
                        help="fleet file (default: clusters/local.yaml)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, in order (default: {','.join(SYSTEMS)})")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--workloads", type=int, default=20,
                        help="workloads in the burst (default: %(default)s)")
    parser.add_argument("--big", action="store_true",
                        help="four times the workloads, and --drain-s 600 unless given")
    parser.add_argument("--jobset-share", type=float, default=0.3,
                        help="share of the multi-pod workloads sent as JobSets")
    parser.add_argument("--run-s", type=float, default=30.0,
                        help="mean seconds a pod runs before it succeeds")
    parser.add_argument("--drain-s", type=float, default=None,
                        help="wait this long at most for every workload to run "
                             "(default: 240, --big: 600)")
    parser.add_argument("--mixes", default="stream,single",
                        help="comma-separated: stream (the seeded mix), single "
                             "(--single-jobs single-pod Jobs) (default: %(default)s)")
    parser.add_argument("--single-jobs", type=int, default=200,
                        help="Jobs in the single mix (default: %(default)s)")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="work in DIR and keep it: each system's controller.log, "
                             "fittable.json (when the benchmark saw room for each waiting "
                             "workload, and on which member) and pods.json (each pod's "
                             "node and times)")
    parser.add_argument("--log-level", default="warning",
                        help="the controller's log level (info logs every decision)")
    parser.add_argument("--limit-only", action="store_true",
                        help="print the stream mix's packing limit (peers-limit) and stop: "
                             "no fleet")
    parser.add_argument("--tuned-qps", type=float, default=200.0)
    parser.add_argument("--tuned-burst", type=int, default=400)
    args = parser.parse_args()
    if args.drain_s is None:
        args.drain_s = 600.0 if args.big else 240.0
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
