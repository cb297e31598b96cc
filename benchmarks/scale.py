"""Scale of the controller: RSS and CPU of ``dispatcher run`` with 10 and 20 real members.

For each member count N (``--members``, default 10 and 20): a light dev fleet (one etcd
shared by a hub and N member kube-apiservers on loopback, ``--nodes`` 8-GPU nodes each, as
``dispatcher dev up --light``), ``--pods`` Pods per member already bound to its nodes (the
other tenants' work the controller's pod caches hold: 1 GPU each while a node has room,
CPU only after; created before the controller starts, so it lists them all) and
``dispatcher run`` as its own process (the dispatch benchmark's configuration: leader
election, Events and metrics on). ``start`` is process start -> ``/readyz`` (every member's
nodes and pods listed) and the RSS then. Then:

1. **idle**: after ``--settle`` seconds, the controller's CPU seconds over ``--idle``
   seconds doing nothing (watches open, leases renewed) and its RSS at the end;
2. **burst**: ``--workloads`` one-GPU JobSets created on the hub at once (64 requests in
   flight), spread over the members by placement; CPU seconds from the first create until
   every copy is on a member, and the largest RSS sampled every 0.5 s meanwhile;
3. **restart**: the controller stopped (SIGTERM) and a new one started: seconds to
   ``/readyz`` with everything above (and the burst's workloads) to list again, and its RSS
   (after a SIGKILL add the leader lease's duration).

Light members have no kubelets: their pods stay Pending on their nodes and nothing churns,
so the figures are what the caches hold and what a (re)list costs, not watch traffic.

CPU and RSS are the controller process with any worker it started
(``benchmarks/procstats.py``); ``fleet_cpu_s`` is the same window for etcd, the hub's and the
members' apiservers. A last line is the capacity model's memory at ``--sim-members``
simulated members of 1,000 nodes (``benchmarks/capacity.py``'s build, GPU pods only: the
model stores nothing for the others), so the controller's memory can be read at 100 members
without starting 100 apiservers.

Prints one JSON object per (members, mode): bench, members, mode, rss_mb, cpu_s, plus
workloads, seconds, load_avg, machine (the ``capacity-model`` line: ``model_mb``, with
rss_mb and cpu_s null). Takes about five minutes on 2 cores (each fleet is
started in a temporary directory, on free loopback ports, and removed afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from capacity import build  # benchmarks/capacity.py
from dispatch import (  # benchmarks/dispatch.py
    HUB_ID,
    JOBSETS,
    fleet_spec,
    jobset,
    start_controller,
    until,
    watch_until,
)
from procstats import Processes  # benchmarks/procstats.py
from running import client_for, stop, wait_ready  # benchmarks/running.py

from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube.resources import NAMESPACES

MACHINE = (f"{platform.machine()} {os.cpu_count()} cpu, "
           f"{platform.python_implementation()} {platform.python_version()}")


def line(members: int, mode: str, **figures: Any) -> dict[str, Any]:
    return {"bench": "scale", "members": members, "mode": mode, **figures,
            "load_avg": [round(x, 2) for x in os.getloadavg()], "machine": MACHINE}


def fleet_cpu(delta: dict[str, float]) -> dict[str, float]:
    """etcd, hub apiserver and the members' apiservers together, from a per-process delta."""
    members = sum(v for k, v in delta.items() if k.startswith("apiserver-member"))
    return {"etcd": delta["etcd"], "apiserver-hub": delta["apiserver-hub"],
            "apiservers-members": round(members, 2)}


async def burst(state: FleetState, names: tuple[str, ...], *, workloads: int,
                procs: Processes) -> dict[str, Any]:
    """Create ``workloads`` JobSets at once; CPU and peak RSS until every copy landed."""
    namespace = f"scale-{uuid.uuid4().hex[:6]}"
    hub = await client_for(state, "hub")
    members = {n: await client_for(state, n) for n in names}
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    landed: dict[str, float] = {}
    done = asyncio.Event()
    watchers = [asyncio.create_task(watch_until(
        members[m], JOBSETS, namespace=namespace, selector=f"dispatcher.io/origin={HUB_ID}",
        seen=landed, key=lambda _: True, done=done)) for m in names]
    await asyncio.sleep(1.0)
    limit = asyncio.Semaphore(64)
    peak = [0.0]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], procs.rss()["controller"])
            await asyncio.sleep(0.5)

    async def create(name: str) -> None:
        async with limit:
            await hub.request("POST", JOBSETS.collection(namespace),
                              body=jobset(name, namespace))

    sampler = asyncio.create_task(sample())
    before = procs.cpu()
    start = time.perf_counter()
    await asyncio.gather(*(create(f"w-{i:05d}") for i in range(workloads)))
    await until(lambda: len(landed) >= workloads, seconds=600)
    seconds = time.perf_counter() - start
    delta = procs.cpu_delta(before, procs.cpu())
    done.set()
    sampler.cancel()
    for task in watchers:
        task.cancel()
    await asyncio.gather(sampler, *watchers, return_exceptions=True)
    for client in (hub, *members.values()):
        await client.close()
    return line(len(names), "burst", rss_mb=round(peak[0], 1), cpu_s=delta["controller"],
                workloads=workloads, seconds=round(seconds, 1),
                throughput_per_s=round(workloads / seconds, 1),
                cpu_ms_per_dispatch=round(delta["controller"] * 1000 / workloads, 2),
                fleet_cpu_s=fleet_cpu(delta))


def tenant_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A Pod already bound to ``node`` (as if a member's own user ran it)."""
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {
        "requests": {"cpu": "100m", "memory": "128Mi"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "resources": resources}]}}


async def populate(state: FleetState, names: tuple[str, ...], *, pods: int, nodes: int
                   ) -> float:
    """``pods`` bound Pods per member, round robin over its nodes, 1 GPU each up to 4 per
    node; seconds it took (64 creates in flight)."""
    if not pods:
        return 0.0
    limit = asyncio.Semaphore(64)
    started = time.perf_counter()

    async def one_member(name: str) -> None:
        client = await client_for(state, name)
        try:
            await client.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenants"}})

            async def create(i: int) -> None:
                node = f"{name}-h100-{i % nodes}"
                async with limit:
                    await client.request("POST", "/api/v1/namespaces/tenants/pods", body=(
                        tenant_pod(f"t-{i:06d}", node, 1 if i < nodes * 4 else 0)))

            await asyncio.gather(*(create(i) for i in range(pods)))
        finally:
            await client.close()

    await asyncio.gather(*(one_member(n) for n in names))
    return time.perf_counter() - started


async def restart(state: FleetState, root: Path, names: tuple[str, ...],
                  proc: subprocess.Popen[bytes], port: int
                  ) -> tuple[subprocess.Popen[bytes], float]:
    """Stop the controller (SIGTERM: it drains and gives up its leader lease) and start
    another: the new process, seconds to ready. After a SIGKILL the new one would first
    wait out the lease (``leaderElection``), whatever the fleet's size."""
    await asyncio.to_thread(stop, proc)
    began = time.perf_counter()
    fresh = start_controller(state, root, port, names)
    await wait_ready(port, fresh, within=600)
    return fresh, time.perf_counter() - began


async def one_fleet(count: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    names = tuple(f"member-{i + 1}" for i in range(count))
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet",
                                        fleet=fleet_spec(args.nodes, names))
        fleet_s = time.perf_counter() - began
        populate_s = await populate(state, names, pods=args.pods, nodes=args.nodes)
        port = free_port()
        began = time.perf_counter()
        proc = start_controller(state, root, port, names)
        try:
            await wait_ready(port, proc, within=600)
            procs = Processes.of_fleet(state, controller=proc.pid)
            sizes = {"nodes": count * args.nodes, "pods": count * args.pods}
            started = line(count, "start", rss_mb=procs.rss()["controller"],
                           ready_s=round(time.perf_counter() - began, 1),
                           fleet_up_s=round(fleet_s, 1), populate_s=round(populate_s, 1),
                           **sizes)
            print(json.dumps(started), flush=True)
            await asyncio.sleep(args.settle)
            before = procs.cpu()
            await asyncio.sleep(args.idle)
            delta = procs.cpu_delta(before, procs.cpu())
            idle = line(count, "idle", rss_mb=procs.rss()["controller"],
                        cpu_s=delta["controller"], seconds=args.idle,
                        cpu_percent=round(delta["controller"] * 100 / args.idle, 1),
                        fleet_cpu_s=fleet_cpu(delta), nodes_per_member=args.nodes)
            print(json.dumps(idle), flush=True)
            loaded = await burst(state, names, workloads=args.workloads, procs=procs)
            print(json.dumps(loaded), flush=True)
            proc, ready_s = await restart(state, root, names, proc, port)
            again = line(count, "restart", rss_mb=Processes({"c": proc.pid}).rss()["c"],
                         ready_s=round(ready_s, 1), workloads=args.workloads, **sizes)
            print(json.dumps(again), flush=True)
            return [started, idle, loaded, again]
        finally:
            await asyncio.to_thread(stop, proc)
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


def model_memory(members: int) -> dict[str, Any]:
    """The capacity model of ``members`` simulated members x 1,000 nodes (tracemalloc)."""
    start = time.perf_counter()
    models, node_bytes, pod_bytes, _, stored = build(
        members=members, gpus_per_node=8, all_gpu_pods=False, rng=random.Random(42),
        cpu_pods=False)
    nodes = sum(m.node_count for m in models)
    del models
    gc.collect()
    return {"bench": "scale", "members": members, "mode": "capacity-model",
            "rss_mb": None, "cpu_s": None,
            "model_mb": round((node_bytes + pod_bytes) / 2**20, 1), "nodes": nodes,
            "gpu_pods": stored, "build_s": round(time.perf_counter() - start, 1),
            "note": "simulated members: tracemalloc of the ClusterCapacity models fed real "
                    "Node/Pod dicts, not a process's RSS",
            "load_avg": [round(x, 2) for x in os.getloadavg()], "machine": MACHINE}


async def main_async(args: argparse.Namespace) -> None:
    for count in args.members:
        await one_fleet(count, args)
    if args.sim_members:
        print(json.dumps(await asyncio.to_thread(model_memory, args.sim_members)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[10, 20],
                        help="member counts, one fleet each (default: %(default)s)")
    parser.add_argument("--nodes", type=int, default=20, help="8-GPU nodes per member")
    parser.add_argument("--pods", type=int, default=0,
                        help="Pods per member bound to its nodes before the controller "
                             "starts (default: %(default)s)")
    parser.add_argument("--workloads", type=int, default=200, help="JobSets in the burst")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after ready before the idle window")
    parser.add_argument("--idle", type=float, default=20.0, help="idle window, seconds")
    parser.add_argument("--sim-members", type=int, default=100,
                        help="simulated members for the capacity model line (0: none)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
