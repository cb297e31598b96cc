"""Restart at scale: how long a new controller takes to be ready and to dispatch again when
1,000, 5,000 and 10,000 workloads are already dispatched across 10 members.

A light dev fleet (one etcd, a hub and ``--members`` member kube-apiservers on loopback,
``--nodes`` 8-GPU nodes each) and ``dispatcher run`` as its own process, configured like the
dispatch benchmark. For each size (cumulative: the next size adds to the fleet):

1. one-GPU JobSets are created on the hub until ``size`` exist (64 requests in flight), and
   the benchmark waits until every one has its copy on a member (the state a running hub
   has: hub objects with finalizers, Dispatch records with decisions and reservations,
   copies on the members);
2. the controller is stopped (SIGTERM: it hands its Lease over, as a rolling update does)
   and a new process started; ``ready_s`` is process start -> ``/readyz`` 200 (leader,
   caches synced: every hub workload and Dispatch listed, the member copies watched);
3. one new JobSet is created at once; ``first_dispatch_s`` is process start -> its copy
   seen on a member (the new controller re-listed, resolved and restored the reservations of
   everything before it could place it);
4. ``rss_mb`` and ``cpu_s`` are the new process's (with any worker) at that moment.

Prints one JSON object per size: bench (restart), members, workloads, ready_s,
first_dispatch_s, rss_mb, cpu_s, plus fill_s (the time to dispatch the added workloads),
load_avg, machine. Takes about ten minutes on 2 cores; the fleet is started in a temporary
directory and removed afterwards (binaries are cached).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path

from dispatch import HUB_ID, JOBSETS, fleet_spec, jobset, start_controller, until, watch_until
from procstats import Processes  # benchmarks/procstats.py
from running import client_for, stop, wait_ready  # benchmarks/running.py

from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NAMESPACES

MACHINE = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


async def fill(hub: KubeClient, namespace: str, start: int, stop_at: int,
               landed: dict[str, float]) -> float:
    """Create JobSets ``start``..``stop_at``-1; seconds until each has its copy."""
    limit = asyncio.Semaphore(64)

    async def create(i: int) -> None:
        async with limit:
            await hub.request("POST", JOBSETS.collection(namespace),
                              body=jobset(f"w-{i:05d}", namespace))

    began = time.perf_counter()
    await asyncio.gather(*(create(i) for i in range(start, stop_at)))
    await until(lambda: len(landed) >= stop_at, seconds=1800)
    return time.perf_counter() - began


async def restart(state: FleetState, names: tuple[str, ...], workdir: Path, *,
                  hub: KubeClient, namespace: str, landed: dict[str, float],
                  probe: str) -> dict[str, float]:
    """A new controller process: seconds to ready and to its first new dispatch."""
    port = free_port()
    began = time.perf_counter()
    proc = start_controller(state, workdir, port, names)
    try:
        await wait_ready(port, proc)
        ready = time.perf_counter() - began
        await hub.request("POST", JOBSETS.collection(namespace), body=jobset(probe, namespace))
        await until(lambda: probe in landed, seconds=600)
        first = time.perf_counter() - began
        procs = Processes(pids={"controller": proc.pid})
        return {"ready_s": round(ready, 2), "first_dispatch_s": round(first, 2),
                "rss_mb": round(procs.rss()["controller"], 1),
                "cpu_s": round(procs.cpu()["controller"], 2), "pid": proc.pid}
    finally:
        await asyncio.to_thread(stop, proc)


async def main_async(args: argparse.Namespace) -> None:
    names = tuple(f"member-{i + 1}" for i in range(args.members))
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        root = Path(tmp)
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet",
                                        fleet=fleet_spec(args.nodes, names))
        hub = await client_for(state, "hub")
        members = {n: await client_for(state, n) for n in names}
        namespace = f"restart-{uuid.uuid4().hex[:6]}"
        await hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        landed: dict[str, float] = {}
        done = asyncio.Event()
        watchers = [asyncio.create_task(watch_until(
            members[m], JOBSETS, namespace=namespace,
            selector=f"dispatcher.io/origin={HUB_ID}", seen=landed, key=lambda _: True,
            done=done)) for m in names]
        port = free_port()
        proc = start_controller(state, root, port, names)
        filled = 0
        try:
            await wait_ready(port, proc)
            for size in args.sizes:
                fill_s = await fill(hub, namespace, filled, size, landed)
                filled = size
                await asyncio.to_thread(stop, proc)
                result = await restart(state, names, root, hub=hub, namespace=namespace,
                                       landed=landed, probe=f"probe-{size}")
                filled_with_probe = len(landed)
                port = free_port()
                proc = start_controller(state, root, port, names)  # for the next fill
                await wait_ready(port, proc)
                result.pop("pid")
                print(json.dumps({
                    "bench": "restart", "members": len(names), "workloads": size, **result,
                    "fill_s": round(fill_s, 1), "dispatched": filled_with_probe,
                    "load_avg": [round(x, 2) for x in os.getloadavg()],
                    "machine": MACHINE}), flush=True)
        finally:
            done.set()
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await asyncio.to_thread(stop, proc)
            for client in (hub, *members.values()):
                await client.close()
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10, help="light members")
    parser.add_argument("--nodes", type=int, default=130,
                        help="8-GPU nodes per member (room for every workload's GPU: "
                             "copies never run on light members, so reservations hold)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000],
                        help="workloads already dispatched at each restart (cumulative)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
