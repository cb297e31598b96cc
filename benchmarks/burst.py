"""One tenant's burst, end to end: tenant A creates 2,000 small workloads at once while
tenant B creates one every second; B's latencies during A's burst against B alone.

Real code paths end to end: a dev fleet (one etcd, a hub and 3 member kube-apiservers on
loopback, ``--nodes`` 8-GPU nodes each, enough for every workload), ``dispatcher run`` as
its own process (``benchmarks/dispatch.py``'s configuration: the shipped defaults, Events
and leader election on), and this process acting as the two tenants, each in its own hub
namespace:

* ``alone``: B creates ``--b-workloads`` single-pod JobSets, one per second;
* ``burst``: A creates ``--a-workloads`` single-pod JobSets at once (64 requests in
  flight) and B starts its schedule with A's first create.

For each of B's workloads: dispatch latency = its copy seen on a member - hub create sent;
as soon as the copy is seen, its status is patched on the member, and mirror latency = the
status seen on the hub object - member patch sent. The controller's workers take turns
between namespaces (``control.workers``), so B's figures should barely move while A's
2,000 wait their turn.

Prints one JSON object per case: bench (``burst``), case, a_workloads, b_workloads,
b_measured (in ``burst``, only B's workloads created before A's last copy landed count),
b_dispatch_p50_s, b_dispatch_p99_s, b_mirror_p50_s, b_mirror_p99_s, a_landed_s (A's first
create -> A's last copy seen; burst only), a_throughput_per_s, load_avg, machine. A few
minutes on 2 cores; the dev fleet lives in a temporary directory and is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
from typing import Any

from dispatch import (  # benchmarks/dispatch.py
    HUB_ID,
    JOBSETS,
    MEMBERS,
    controller_on_fleet,
    environment,
    jobset,
    until,
    watch_until,
)
from running import client_for, percentile  # benchmarks/running.py

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import NAMESPACES

ORIGIN = f"dispatcher.io/origin={HUB_ID}"
BENCH_STATE = "bench"


def figures(sent: dict[str, float], seen: dict[str, float]) -> tuple[float, float]:
    """p50 and p99 (seconds) of seen - sent over the names seen."""
    lags = [seen[n] - sent[n] for n in sent if n in seen]
    if not lags:
        return float("nan"), float("nan")
    return round(statistics.median(lags), 3), round(percentile(lags, 0.99), 3)


async def namespace(hub: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


async def run_case(state: FleetState, *, case: str, a_workloads: int,
                   b_workloads: int) -> dict[str, Any]:
    hub = await client_for(state, "hub")
    members = {n: await client_for(state, n) for n in MEMBERS}
    ns_a, ns_b = await namespace(hub, "tenant-a"), await namespace(hub, "tenant-b")
    b_sent: dict[str, float] = {}
    b_landed: dict[str, float] = {}
    patched: dict[str, float] = {}
    mirrored: dict[str, float] = {}
    a_sent: dict[str, float] = {}
    a_landed: dict[str, float] = {}
    done = asyncio.Event()
    patches: set[asyncio.Task[None]] = set()

    async def patch(member: KubeClient, name: str) -> None:
        patched[name] = time.perf_counter()
        await member.request(
            "PATCH", JOBSETS.item(name, ns_b, "status"), content_type=JSON_MERGE_PATCH,
            body={"status": {"terminalState": BENCH_STATE, "replicatedJobsStatus": [
                {"name": "w", "ready": 1, "active": 1, "succeeded": 0, "failed": 0,
                 "suspended": 0}]}})

    def on_b_copy(member: KubeClient) -> Any:
        def key(obj: dict[str, Any]) -> bool:
            name = obj["metadata"]["name"]
            if name not in b_landed:
                task = asyncio.create_task(patch(member, name))
                patches.add(task)
                task.add_done_callback(patches.discard)
            return True
        return key

    tasks = [asyncio.create_task(watch_until(
        client, JOBSETS, namespace=ns_b, selector=ORIGIN, seen=b_landed,
        key=on_b_copy(client), done=done)) for client in members.values()]
    tasks.append(asyncio.create_task(watch_until(
        hub, JOBSETS, namespace=ns_b, selector="", seen=mirrored, done=done,
        key=lambda o: (o.get("status") or {}).get("terminalState") == BENCH_STATE)))
    if case == "burst":
        tasks += [asyncio.create_task(watch_until(
            client, JOBSETS, namespace=ns_a, selector=ORIGIN, seen=a_landed,
            key=lambda _o: True, done=done)) for client in members.values()]
    await asyncio.sleep(1.0)  # the watches have listed
    limit = asyncio.Semaphore(64)

    async def create(ns: str, name: str, sent: dict[str, float], delay: float) -> None:
        await asyncio.sleep(delay)
        # B's creates never wait for A's
        async with limit if ns == ns_a else contextlib.nullcontext():
            sent[name] = time.perf_counter()
            await hub.request("POST", JOBSETS.collection(ns), body=jobset(name, ns))

    a_names = [f"a-{i:05d}" for i in range(a_workloads)] if case == "burst" else []
    b_names = [f"b-{i:03d}" for i in range(b_workloads)]
    start = time.perf_counter()
    await asyncio.gather(*(create(ns_a, n, a_sent, 0.0) for n in a_names),
                         *(create(ns_b, n, b_sent, float(i)) for i, n in enumerate(b_names)))
    await until(lambda: len(mirrored) >= len(b_names) and len(a_landed) >= len(a_names),
                seconds=600)
    done.set()
    for task in [*tasks, *patches]:
        task.cancel()
    await asyncio.gather(*tasks, *patches, return_exceptions=True)
    for client in (hub, *members.values()):
        await client.close()
    a_span = (max(a_landed.values()) - start) if a_landed else None
    if a_landed:  # only B's workloads created while A's burst was still landing
        last = max(a_landed.values())
        b_sent = {n: t for n, t in b_sent.items() if t <= last}
        patched = {n: t for n, t in patched.items() if n in b_sent}
    dispatch_p50, dispatch_p99 = figures(b_sent, b_landed)
    mirror_p50, mirror_p99 = figures(patched, mirrored)
    return {"bench": "burst", "case": case, "a_workloads": len(a_names),
            "b_workloads": len(b_names), "b_measured": len(b_sent),
            "b_dispatch_p50_s": dispatch_p50, "b_dispatch_p99_s": dispatch_p99,
            "b_mirror_p50_s": mirror_p50, "b_mirror_p99_s": mirror_p99,
            "a_landed_s": round(a_span, 1) if a_span else None,
            "a_throughput_per_s": round(len(a_names) / a_span, 1) if a_span else None,
            **environment()}


async def main_async(args: argparse.Namespace) -> None:
    async with controller_on_fleet(args.nodes, prefix="burst-bench-") as (state, _proc):
        for case in args.cases:
            result = await run_case(state, case=case, a_workloads=args.a_workloads,
                                    b_workloads=args.b_workloads)
            print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["alone", "burst"],
                        choices=["alone", "burst"], help="(default: %(default)s)")
    parser.add_argument("--a-workloads", type=int, default=2000,
                        help="tenant A's burst (default: %(default)s)")
    parser.add_argument("--b-workloads", type=int, default=30,
                        help="tenant B's workloads, one per second (default: %(default)s)")
    parser.add_argument("--nodes", type=int, default=90,
                        help="8-GPU nodes per member (default: %(default)s: every workload "
                             "fits)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
