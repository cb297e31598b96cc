"""Dispatch throughput and latency: hub create -> member create, and member -> hub status lag.

Real code paths end to end: a dev fleet (one etcd, a hub and 3 member kube-apiservers on
loopback, 40 GPU nodes per member), ``dispatcher run`` as its own process (leader election,
Events and metrics on, the shipped defaults otherwise), and this process acting as users:

1. creates ``--workloads`` JobSets (1 pod, 1 GPU each) on the hub, either all at once (64
   requests in flight: the "burst" case, for throughput) or at a steady rate (the "paced"
   cases, for latency below saturation), timing each create;
2. watches every member for copies (by the controller's origin label) and notes when each
   appears: dispatch latency = copy seen on the member - hub create sent; throughput =
   workloads / (last copy seen - first create sent);
3. patches the status of ``--mirror`` copies on their members, one every 20 ms, and watches
   the hub: mirror lag = hub status seen - member status patch sent.

Over each case's dispatch window (first create sent -> every copy landed and the clusters'
write counters quiet for a second, at most 30 s; the mirror phase is not in it) it also
reports the CPU seconds of every process (``cpu_s``: etcd, each kube-apiserver, the
controller with its workers; ``benchmarks/procstats.py``), the controller's CPU per dispatch
(``controller_cpu_ms_per_dispatch``, and apart: ``controller_main_cpu_ms_per_dispatch``,
``controller_workers_cpu_ms_per_dispatch``, ``workers_started_in_window``; a warm-up of
``--warmup`` dispatches runs first, outside every window, so what starts lazily is not
charged to a case),
and the write requests each cluster's apiserver served (``apiserver_request_total`` by verb
and resource, scraped with the admin token). ``writes_per_dispatch_all`` counts every write
request on the hub and the members except this benchmark's own JobSet creates and Lease
renewals (the apiservers' identity leases and the controller's leader lease: time-driven,
not per dispatch; they stay in ``writes`` by cluster). ``writes_per_dispatch`` is what each
dispatch costs: that count without the case's one-time setup, reported apart —
``setup_writes``, the member namespaces the controller creates for the case's new hub
namespace (one per member it uses), and ``dry_runs``, the pod admission dry-runs (stored
nowhere, no watch event; one per pod shape, member and namespace).

``DISPATCH_BENCH_PYTHON=/other/checkout/.venv/bin/python`` runs the controller from that
interpreter (another version's code, same fleet and measurement: alternate runs to compare).
``DISPATCH_BENCH_PROFILE=OUT`` profiles the controller (cProfile, wall clock);
``DISPATCH_BENCH_PROFILE_CLOCK=cpu`` times it by the CPU clock, ``=window`` too but only
over the first case's dispatch window (``benchmarks/cpuprofile.py``).

Prints one JSON object per case (bench, members, workloads, throughput_per_s, p50_ms,
p99_ms, mirror_p99_ms, cpu_s, controller_cpu_ms_per_dispatch, writes_per_dispatch,
writes_per_dispatch_all, setup_writes, dry_runs, writes,
load_avg, machine, ...). Runs in about a minute on 2 cores. The dev fleet is started in a
temporary directory and removed afterwards (binaries are cached).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from procstats import Processes, request_counts, writes  # benchmarks/procstats.py
from running import client_for, percentile, stop, wait_ready  # benchmarks/running.py

from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.fleet.fleetfile import FleetSpec, MemberSpec, NodePool
from dispatcher.kube import watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import NAMESPACES, ResourceRef

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
MEMBERS = ("member-1", "member-2", "member-3")
HUB_ID = "bench-hub"


def fleet_spec(nodes: int, members: tuple[str, ...] = MEMBERS) -> FleetSpec:
    return FleetSpec(members=tuple(
        MemberSpec(name=name, node_pools=(NodePool(name="h100", count=nodes, gpus=8,
                                                   gpu_product="NVIDIA-H100-80GB-HBM3"),))
        for name in members))


def jobset(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {"containers": [
                    {"name": "w", "image": "busybox",
                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}}


async def until(condition: Any, *, seconds: float) -> None:
    """Poll ``condition()`` every 50 ms until true (TimeoutError after ``seconds``)."""
    async with asyncio.timeout(seconds):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


def start_controller(state: FleetState, workdir: Path, port: int,
                     members: tuple[str, ...] = MEMBERS, *,
                     extra: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
    """``dispatcher run`` on the fleet (``extra``: more top-level config keys)."""
    config: dict[str, Any] = {
              "hubId": HUB_ID, "hub": {"kubeconfig": state.cluster("hub").kubeconfig},
              "server": {"address": "127.0.0.1", "port": port}, "log": {"level": "warning"},
              "submit": {"createNamespaces": True},
              "fleet": {"watchMemberClusters": False, "staticMembers": [
                  {"name": n, "kubeconfig": state.cluster(n).kubeconfig} for n in members]},
              **(extra or {})}
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (workdir / "controller.log").open("wb")
    profile = os.environ.get("DISPATCH_BENCH_PROFILE")  # a path: profile the controller
    # another checkout's interpreter (its venv, its code) runs the controller: A/B runs of
    # two versions on the same machine and fleet
    python = [os.environ.get("DISPATCH_BENCH_PYTHON") or sys.executable]
    if profile and os.environ.get("DISPATCH_BENCH_PROFILE_CLOCK") in ("cpu", "window"):
        python += [str(Path(__file__).with_name("cpuprofile.py")), profile]  # CPU, not wall
    elif profile:
        python += ["-m", "cProfile", "-o", profile]
    env = dict(os.environ)
    if profile and os.environ.get("DISPATCH_BENCH_PROFILE_CLOCK") == "window":
        env["CPUPROFILE_WINDOW"] = "1"  # SIGUSR1 at the window's start and end
    return subprocess.Popen([*python, "-m", "dispatcher", "run", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)


async def watch_until(client: KubeClient, ref: ResourceRef, *, namespace: str, selector: str,
                      seen: dict[str, float], key: Any, done: asyncio.Event) -> None:
    """Record the first time ``key(obj)`` is truthy per object name.

    A watch the apiserver drops (429 while a new CRD's storage initialises, a cut stream on
    a loaded machine) is started again: a re-list only adds names not seen yet.
    """
    while not done.is_set():
        try:
            async for item in watch.informer(client, ref, namespace=namespace,
                                             label_selector=selector or None):
                now = time.perf_counter()
                objects = item.objects if isinstance(item, watch.Listed) else [item.object]
                for obj in objects:
                    name = obj["metadata"]["name"]
                    if name not in seen and key(obj):
                        seen[name] = now
                if done.is_set():
                    return
        except KubeError:
            await asyncio.sleep(0.2)


async def counters(state: FleetState) -> dict[str, Any]:
    """Request counters of every cluster of the fleet, by name."""
    return {c.name: await asyncio.to_thread(request_counts, c) for c in state.clusters}


async def quiet_writes(state: FleetState, *, seconds: float = 30.0) -> dict[str, Any]:
    """Counters once no cluster served a write for a second (at most ``seconds``)."""
    last = await counters(state)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = await counters(state)
        if all(not writes(last[name], now[name]) for name in now):
            return now
        last = now
    return last


def controller_split(*, workloads: int, before: tuple[float, dict[int, float]],
                     after: tuple[float, dict[int, float]]) -> dict[str, Any]:
    """The controller's CPU per dispatch, main process and jq workers apart, and how many
    workers started inside the window (their start-up is in the workers' figure)."""
    (main0, workers0), (main1, workers1) = before, after
    workers = sum(cpu - workers0.get(pid, 0.0) for pid, cpu in workers1.items())
    return {"controller_main_cpu_ms_per_dispatch": round((main1 - main0) * 1000 / workloads, 2),
            "controller_workers_cpu_ms_per_dispatch": round(workers * 1000 / workloads, 2),
            "workers_started_in_window": sum(1 for pid in workers1 if pid not in workers0)}


def window_figures(*, workloads: int, cpu: dict[str, float], before: dict[str, Any],
                   after: dict[str, Any]) -> dict[str, Any]:
    """CPU and write figures of one dispatch window (see the module docstring)."""
    by_cluster = {name: writes(before[name], after[name]) for name in before}
    own = {"hub": {"POST jobsets": workloads}}
    total = setup = dry_runs = 0
    for name, found in by_cluster.items():
        for what, served in found.items():
            if what.endswith((" leases", " leases/status")):
                continue
            count = max(0, served - own.get(name, {}).get(what, 0))
            total += count
            if what.endswith(" (dry run)"):
                dry_runs += count
            elif name != "hub" and what == "POST namespaces":
                setup += count
    controller = cpu.get("controller", 0.0)
    return {"cpu_s": cpu, "cpu_window": "dispatch (creates -> copies landed, writes quiet)",
            "controller_cpu_ms_per_dispatch": round(controller * 1000 / workloads, 2),
            "writes_per_dispatch": round((total - setup - dry_runs) / workloads, 2),
            "writes_per_dispatch_all": round(total / workloads, 2),
            "setup_writes": setup, "dry_runs": dry_runs, "writes": by_cluster}


def profile_window(procs: Processes) -> None:
    """Start or stop the controller's window profile (``DISPATCH_BENCH_PROFILE_CLOCK=window``:
    ``benchmarks/cpuprofile.py`` toggles on SIGUSR1; the first case's window only)."""
    if os.environ.get("DISPATCH_BENCH_PROFILE_CLOCK") == "window":
        os.kill(procs.pids["controller"], signal.SIGUSR1)


async def run_case(state: FleetState, *, workloads: int, mirror: int, rate: float,
                   procs: Processes, profiled: bool = True) -> dict[str, Any]:
    """One case: ``rate`` creates per second (0: all at once, 64 in flight); ``profiled``
    False (the warm-up) leaves the window profile alone, for the first measured case."""
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    hub = await client_for(state, "hub")
    members = {n: await client_for(state, n) for n in MEMBERS}
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    names = [f"w-{i:05d}" for i in range(workloads)]
    sent: dict[str, float] = {}
    landed: dict[str, float] = {}
    where: dict[str, str] = {}
    all_landed = asyncio.Event()

    def on_member(member: str) -> Any:
        def key(obj: dict[str, Any]) -> bool:
            where.setdefault(obj["metadata"]["name"], member)
            if len(landed) + 1 >= workloads:
                all_landed.set()
            return True
        return key

    watchers = [asyncio.create_task(watch_until(
        members[m], JOBSETS, namespace=namespace, selector=f"dispatcher.io/origin={HUB_ID}",
        seen=landed, key=on_member(m), done=all_landed)) for m in MEMBERS]
    await asyncio.sleep(0.5)
    limit = asyncio.Semaphore(64)
    counts_before = await counters(state)
    if profiled:
        profile_window(procs)
    cpu_before = procs.cpu()
    parts_before = procs.cpu_parts("controller")

    async def create(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async with limit:
            sent[name] = time.perf_counter()
            await hub.request("POST", JOBSETS.collection(namespace),
                              body=jobset(name, namespace))

    start = time.perf_counter()
    await asyncio.gather(*(create(n, i / rate if rate else 0.0) for i, n in enumerate(names)))
    created_s = time.perf_counter() - start
    await until(lambda: len(landed) >= workloads, seconds=300)
    elapsed = max(landed.values()) - start
    latencies = [(landed[n] - sent[n]) * 1000 for n in names]
    counts_after = await quiet_writes(state)
    if profiled:
        profile_window(procs)
    window = window_figures(workloads=workloads, cpu=procs.cpu_delta(cpu_before, procs.cpu()),
                            before=counts_before, after=counts_after)
    window.update(controller_split(workloads=workloads, before=parts_before,
                                   after=procs.cpu_parts("controller")))

    # Mirror lag: member status patch -> hub status visible.
    mirrored: dict[str, float] = {}
    patched: dict[str, float] = {}
    mirror_done = asyncio.Event()
    hub_watch = asyncio.create_task(watch_until(
        hub, JOBSETS, namespace=namespace, selector="", seen=mirrored,
        key=lambda o: bool((o.get("status") or {}).get("terminalState") == "bench"),
        done=mirror_done))
    await asyncio.sleep(0.5)
    for name in names[:mirror]:
        patched[name] = time.perf_counter()
        await members[where[name]].request(
            "PATCH", JOBSETS.item(name, namespace, "status"),
            body={"status": {"terminalState": "bench", "replicatedJobsStatus": [
                {"name": "w", "ready": 1, "active": 1, "succeeded": 0, "failed": 0,
                 "suspended": 0}]}}, content_type=JSON_MERGE_PATCH)
        await asyncio.sleep(0.02)
    await until(lambda: all(n in mirrored for n in patched), seconds=120)
    mirror_done.set()
    lags = [(mirrored[n] - patched[n]) * 1000 for n in patched]
    for task in [*watchers, hub_watch]:
        task.cancel()
    await asyncio.gather(*watchers, hub_watch, return_exceptions=True)
    for client in (hub, *members.values()):
        await client.close()
    per_member = {m: sum(1 for n in names if where.get(n) == m) for m in MEMBERS}
    return {"bench": "dispatch", "members": len(MEMBERS), "workloads": workloads,
            "mode": f"paced {rate:g}/s" if rate else "burst",
            "throughput_per_s": round(workloads / elapsed, 1),
            "p50_ms": round(statistics.median(latencies), 1),
            "p99_ms": round(percentile(latencies, 0.99), 1),
            "mirror_p99_ms": round(percentile(lags, 0.99), 1) if lags else None,
            "mirror_p50_ms": round(statistics.median(lags), 1) if lags else None,
            "mirrored": len(lags),
            "create_s": round(created_s, 2), "per_member": per_member, **window,
            **environment()}


def environment() -> dict[str, Any]:
    """The load and the machine a figure was measured on."""
    return {"load_avg": [round(x, 2) for x in os.getloadavg()],
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, "
                       f"{platform.python_implementation()} {platform.python_version()}"}


@contextlib.asynccontextmanager
async def controller_on_fleet(nodes: int, *, prefix: str
                              ) -> AsyncIterator[tuple[FleetState, subprocess.Popen[bytes]]]:
    """A light dev fleet (``fleet_spec(nodes)``) in a temporary directory with
    ``dispatcher run`` ready on it; both stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet",
                                        fleet=fleet_spec(nodes))
        port = free_port()
        proc = start_controller(state, root, port)
        try:
            await wait_ready(port, proc)
            yield state, proc
        finally:
            await asyncio.to_thread(stop, proc)
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


async def main_async(args: argparse.Namespace) -> None:
    async with controller_on_fleet(args.nodes, prefix="dispatch-bench-") as (state, proc):
        procs = Processes.of_fleet(state, controller=proc.pid)
        if args.warmup:
            # Outside every window: the controller's first dispatches start what it starts
            # lazily (jq workers, caches), a one-time cost not charged to a case.
            warm = await run_case(state, workloads=args.warmup, mirror=0, rate=0.0,
                                  procs=procs, profiled=False)
            print(json.dumps({"bench": "dispatch-warmup", "workloads": args.warmup,
                              "controller_cpu_ms_per_dispatch":
                                  warm["controller_cpu_ms_per_dispatch"],
                              "workers_started_in_window":
                                  warm["workers_started_in_window"]}), flush=True)
        for rate in args.rates:
            result = await run_case(state, workloads=args.workloads, mirror=args.mirror,
                                    rate=rate, procs=procs)
            print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=300,
                        help="workloads per case (default: %(default)s)")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 40.0],
                        help="creates per second per case, 0 for a burst "
                             "(default: %(default)s)")
    parser.add_argument("--nodes", type=int, default=40, help="8-GPU nodes per member")
    parser.add_argument("--mirror", type=int, default=100, help="copies whose status is "
                        "changed to measure mirror lag")
    parser.add_argument("--warmup", type=int, default=20,
                        help="workloads dispatched before the first case, outside every "
                             "window (0: none; default: %(default)s)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
