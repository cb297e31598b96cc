"""Scale of the controller: RSS and CPU of ``dispatcher run`` with 10 and 20 real members.

For each member count N (``--members``, default 10 and 20): a light dev fleet (one etcd
shared by a hub and N member kube-apiservers on loopback, ``--nodes`` 8-GPU nodes each, as
``dispatcher dev up --light``), ``--pods`` Pods per member already bound to its nodes (the
other tenants' work the controller's pod caches hold: 1 GPU each while a node has room,
CPU only after; created before the controller starts, so it lists them all) and
``dispatcher run`` as its own process (the dispatch benchmark's configuration, Events and
metrics on, without leader election: ``CONTROLLER``). ``start`` is process start ->
``/readyz`` (every member's nodes and pods listed) and the RSS then. Then:

1. **idle**: after ``--settle`` seconds, the controller's CPU seconds over ``--idle``
   seconds doing nothing (watches open, leases renewed) and its RSS at the end;
2. **burst**: ``--workloads`` one-GPU JobSets created on the hub at once (64 requests in
   flight), spread over the members by placement; CPU seconds from the first create until
   every copy is on a member, and the largest RSS sampled every 0.5 s meanwhile;
3. **restart**: the controller stopped (SIGTERM) and a new one started: seconds to
   ``/readyz`` with everything above (and the burst's workloads) to list again, and its RSS
   (with leader election, after a SIGKILL add the leader lease's duration).

Light members have no kubelets: their pods stay Pending on their nodes and nothing churns,
so the figures are what the caches hold and what a (re)list costs, not watch traffic.
``--kubelets`` gives each member simulated kubelets: one kwok per member (the real members'
stage file) owning its Nodes, which it makes Ready and heartbeats (a fresh node status every
4-9 minutes, as a kubelet's status report), and the tenant pods, which it runs (Running, pod
IPs, container statuses: the objects the caches then hold are a real cluster's) and removes
when deleted. Node Leases last ``KWOK_LEASE_S`` (the controller watches no Lease; a
kubelet's 40 s lease on 10,000 nodes is 1,000 writes a second that a real fleet's member
apiservers serve on their own machines, here the same 2 cores as the controller). Between
the idle window and the burst a **churn** window follows: ``--churn`` tenant pods a second
across the fleet replaced (a graceful delete, which kwok completes, and a new bound pod,
which it runs: four pod watch events each for the controller) while the nodes heartbeat;
the line gives the controller's CPU and the watch events a second (pod events counted from
the replacements, node events by this process's own node watches), and the CPU per pod
event over the idle window's rate. The churn goes on through the burst and the restart.

CPU and RSS are the controller process with any worker it started
(``benchmarks/procstats.py``); ``fleet_cpu_s`` is the same window for etcd, the hub's and the
members' apiservers. A last line is the capacity model's memory at ``--sim-members``
simulated members of 1,000 nodes (``benchmarks/capacity.py``'s build, GPU pods only: the
model stores nothing for the others), so the controller's memory can be read at 100 members
without starting 100 apiservers.

Prints one JSON object per (members, mode): bench, members, mode, rss_mb, cpu_s, plus
workloads, seconds, load_avg, machine (the ``capacity-model`` line: ``model_mb``, with
rss_mb and cpu_s null; the ``churn`` line: cpu_percent, replacements, pod_events_per_s,
node_events_per_s, cpu_us_per_pod_event). Takes about five minutes on 2 cores, and about
15 with ``--kubelets`` at 50 members of 200 nodes and 1,000 pods (each fleet is started in
a temporary directory, on free loopback ports, and removed afterwards; when the controller
fails, its log is kept as ``$TMPDIR/scale-controller-<members>.log``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
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

from dispatcher.devfleet import devfleet, provision
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.components import kwok_argv, render_stages
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState, free_port
from dispatcher.devfleet.operatorkit import OperatorRun
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NAMESPACES, NODES, PODS

KWOK_LEASE_S = 3600
"""Node Lease duration in ``--kubelets`` mode (module docstring)."""
CONTROLLER = {"leaderElection": {"enabled": False}}
"""The controller's config over the dispatch benchmark's: no leader election. Here the hub
apiserver, 50 member apiservers and their kwoks share 2 cores with the controller, whose
renewal then stalls: a leader that cannot renew for a lease duration exits by design, and
at 50 members with kubelets it did, with the shipped 15 s and with 60 s ("leader.lost ...
timed out"). One replica runs; what is measured is its memory, CPU and readiness."""
TENANTS = "tenants"
"""The member namespace of the other tenants' pods."""

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


def slot_pod(member: str, slot: int, *, nodes: int, generation: int = 0) -> dict[str, Any]:
    """The tenant pod of ``slot`` on ``member`` (its ``generation``-th replacement): bound
    round robin over the nodes, 1 GPU while a node has 4 or fewer, CPU only after."""
    name = f"t-{slot:06d}" + (f"-g{generation}" if generation else "")
    return tenant_pod(name, f"{member}-h100-{slot % nodes}", 1 if slot < nodes * 4 else 0)


async def populate(state: FleetState, names: tuple[str, ...], *, pods: int, nodes: int
                   ) -> float:
    """``pods`` bound Pods per member, round robin over its nodes, 1 GPU each up to 4 per
    node; seconds it took (64 creates in flight)."""
    if not pods:
        return 0.0
    limit = asyncio.Semaphore(64)
    started = time.perf_counter()

    async def work(name: str, client: KubeClient) -> None:
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANTS}})

        async def create(i: int) -> None:
            async with limit:
                await client.request("POST", PODS.collection(TENANTS),
                                     body=slot_pod(name, i, nodes=nodes))

        await asyncio.gather(*(create(i) for i in range(pods)))

    await each_member(state, names, work)
    return time.perf_counter() - started


async def start_kubelets(root: Path, state: FleetState, names: tuple[str, ...]) -> None:
    """One kwok per member, recorded in the fleet's state (``devfleet.down`` stops it)."""
    kwok = (await asyncio.to_thread(ensure_binaries)).kwok
    planes = ControlPlanes(root=root, binaries=None)
    for name in names:
        stages = root / name / "kwok-stages.yaml"
        stages.write_text(render_stages())
        port = free_port()
        argv = kwok_argv(kwok, kubeconfig=state.cluster(name).kubeconfig, stages=stages,
                         port=port, lease_seconds=KWOK_LEASE_S)
        await asyncio.to_thread(planes.add_processes, name, [OperatorRun(
            name="kwok", argv=argv, health=f"http://127.0.0.1:{port}/healthz", crds=[],
            webhooks=[])])


async def each_member(state: FleetState, names: tuple[str, ...],
                      work: Callable[[str, KubeClient], Awaitable[None]]) -> None:
    """``await work(name, client)`` for every member at once, each with its own client."""
    async def one(name: str) -> None:
        client = await client_for(state, name)
        try:
            await work(name, client)
        finally:
            await client.close()

    await asyncio.gather(*(one(n) for n in names))


async def kubelet_nodes(state: FleetState, names: tuple[str, ...], nodes: int) -> float:
    """Create each member's Nodes as its kwok's (no conditions) and wait until kwok made
    every one Ready; the seconds it took."""
    started = time.perf_counter()
    limit = asyncio.Semaphore(64)

    async def work(name: str, client: KubeClient) -> None:
        spec = fleet_spec(nodes, (name,)).members[0]

        async def create(node: dict[str, Any]) -> None:
            async with limit:
                await client.request("POST", NODES.collection(), body=node)

        await asyncio.gather(*(create(n) for n in provision.member_nodes(spec, real=True)))
        while True:
            listed = (await client.request("GET", NODES.collection()))["items"]
            if sum(1 for n in listed if n.get("status", {}).get("phase") == "Running") >= nodes:
                return
            await asyncio.sleep(2.0)

    await each_member(state, names, work)
    return time.perf_counter() - started


async def until_running(state: FleetState, names: tuple[str, ...]) -> float:
    """Until kwok ran every tenant pod (none Pending); the seconds it took."""
    started = time.perf_counter()

    async def work(name: str, client: KubeClient) -> None:
        query = [("fieldSelector", "status.phase=Pending"), ("limit", "1")]
        while True:
            if not (await client.request("GET", PODS.collection(TENANTS), query=query))["items"]:
                return
            await asyncio.sleep(2.0)

    await each_member(state, names, work)
    return time.perf_counter() - started


class Churn:
    """Tenant pods replaced at ``rate`` a second round robin over the members (a graceful
    delete and a new bound pod in the same slot), and node watch events counted."""

    def __init__(self, state: FleetState, names: tuple[str, ...], *, pods: int, nodes: int,
                 rate: float) -> None:
        self.state, self.names, self.pods, self.nodes = state, names, pods, nodes
        self.rate = rate
        self.replaced = 0
        self.node_events = 0
        self.failed = 0
        self.running = asyncio.Event()
        self._clients: dict[str, KubeClient] = {}
        self._generation: dict[tuple[str, int], int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        self._clients = {n: await client_for(self.state, n) for n in self.names}
        self._tasks = [asyncio.create_task(self._count_nodes(c)) for c in self._clients.values()]
        self._tasks.append(asyncio.create_task(self._drive()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients.values():
            await client.close()

    async def _count_nodes(self, client: KubeClient) -> None:
        async for item in watch.informer(client, NODES):
            if not isinstance(item, watch.Listed):
                self.node_events += 1

    async def _drive(self) -> None:
        rng = random.Random(7)
        limit = asyncio.Semaphore(32)
        pending: set[asyncio.Task[None]] = set()
        turn = 0
        try:
            while True:
                await self.running.wait()
                member = self.names[turn % len(self.names)]
                turn += 1
                task = asyncio.create_task(self._replace(member, rng.randrange(self.pods),
                                                         limit))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(1.0 / self.rate)
        finally:  # stopped: the replacements in flight go too (before their clients close)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _replace(self, member: str, slot: int, limit: asyncio.Semaphore) -> None:
        client = self._clients[member]
        generation = self._generation.get((member, slot), 0)
        self._generation[(member, slot)] = generation + 1
        old = slot_pod(member, slot, nodes=self.nodes, generation=generation)
        new = slot_pod(member, slot, nodes=self.nodes, generation=generation + 1)
        async with limit:
            try:
                await client.request("DELETE", PODS.item(old["metadata"]["name"], TENANTS))
                await client.request("POST", PODS.collection(TENANTS), body=new)
            except Exception:  # counted (the line's churn_failed), the churn goes on
                self.failed += 1
                return
        self.replaced += 1

    async def window(self, seconds: float, procs: Processes) -> dict[str, Any]:
        """Churn for ``seconds``: the controller's CPU, replacements and node events."""
        replaced, node_events = self.replaced, self.node_events
        before = procs.cpu()
        self.running.set()
        await asyncio.sleep(seconds)
        delta = procs.cpu_delta(before, procs.cpu())
        return {"cpu_s": delta["controller"], "seconds": seconds,
                "replacements": self.replaced - replaced, "failed": self.failed,
                "node_events": self.node_events - node_events,
                "fleet_cpu_s": fleet_cpu(delta)}


async def restart(state: FleetState, root: Path, names: tuple[str, ...],
                  proc: subprocess.Popen[bytes], port: int
                  ) -> tuple[subprocess.Popen[bytes], float]:
    """Stop the controller (SIGTERM: it drains and gives up its leader lease) and start
    another: the new process, seconds to ready. After a SIGKILL the new one would first
    wait out the lease (``leaderElection``), whatever the fleet's size."""
    await asyncio.to_thread(stop, proc)
    began = time.perf_counter()
    fresh = start_controller(state, root, port, names, extra=CONTROLLER)
    await wait_ready(port, fresh, within=600)
    return fresh, time.perf_counter() - began


async def one_fleet(count: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    names = tuple(f"member-{i + 1}" for i in range(count))
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet", fleet=fleet_spec(
            0 if args.kubelets else args.nodes, names))
        kubelets: dict[str, Any] = {}
        if args.kubelets:  # kwok's nodes, made Ready by it
            await start_kubelets(root / "fleet", state, names)
            kubelets["nodes_ready_s"] = round(await kubelet_nodes(state, names, args.nodes), 1)
        fleet_s = time.perf_counter() - began
        populate_s = await populate(state, names, pods=args.pods, nodes=args.nodes)
        if args.kubelets:
            kubelets["pods_running_s"] = round(await until_running(state, names), 1)
        churn = Churn(state, names, pods=args.pods, nodes=args.nodes, rate=args.churn)
        port = free_port()
        began = time.perf_counter()
        proc = start_controller(state, root, port, names, extra=CONTROLLER)
        try:
            await wait_ready(port, proc, within=600)
            procs = Processes.of_fleet(state, controller=proc.pid)
            sizes = {"nodes": count * args.nodes, "pods": count * args.pods,
                     "kubelets": args.kubelets}
            started = line(count, "start", rss_mb=procs.rss()["controller"],
                           ready_s=round(time.perf_counter() - began, 1),
                           fleet_up_s=round(fleet_s, 1), populate_s=round(populate_s, 1),
                           **sizes, **kubelets)
            print(json.dumps(started), flush=True)
            if args.kubelets:
                await churn.open()  # node events counted from here, no churn yet
            await asyncio.sleep(args.settle)
            before, node_events = procs.cpu(), churn.node_events
            await asyncio.sleep(args.idle)
            delta = procs.cpu_delta(before, procs.cpu())
            idle = line(count, "idle", rss_mb=procs.rss()["controller"],
                        cpu_s=delta["controller"], seconds=args.idle,
                        cpu_percent=round(delta["controller"] * 100 / args.idle, 1),
                        fleet_cpu_s=fleet_cpu(delta), nodes_per_member=args.nodes,
                        **({"node_events_per_s": round(
                            (churn.node_events - node_events) / args.idle, 1)}
                           if args.kubelets else {}))
            print(json.dumps(idle), flush=True)
            lines = [started, idle]
            if args.kubelets and args.churn > 0:
                lines.append(churned(count, await churn.window(args.churn_window, procs),
                                     idle=idle, procs=procs))
                print(json.dumps(lines[-1]), flush=True)
            loaded = await burst(state, names, workloads=args.workloads, procs=procs)
            print(json.dumps(loaded), flush=True)
            proc, ready_s = await restart(state, root, names, proc, port)
            again = line(count, "restart", rss_mb=Processes({"c": proc.pid}).rss()["c"],
                         ready_s=round(ready_s, 1), workloads=args.workloads, **sizes,
                         **({"churn_per_s": args.churn} if churn.running.is_set() else {}))
            print(json.dumps(again), flush=True)
            return [*lines, loaded, again]
        except BaseException:
            kept = Path(tempfile.gettempdir()) / f"scale-controller-{count}.log"
            shutil.copyfile(root / "controller.log", kept)
            print(f"the controller's log: {kept}", file=sys.stderr)
            raise
        finally:
            await churn.close()
            await asyncio.to_thread(stop, proc)
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


def churned(count: int, window: dict[str, Any], *, idle: dict[str, Any],
            procs: Processes) -> dict[str, Any]:
    """The churn line: the window's figures, watch events a second (four pod events per
    replacement) and the CPU per pod event above the idle window's rate."""
    seconds = window["seconds"]
    pod_events = 4 * window["replacements"]
    extra = window["cpu_s"] - idle["cpu_s"] * seconds / idle["seconds"]
    return line(count, "churn", rss_mb=procs.rss()["controller"], cpu_s=window["cpu_s"],
                seconds=seconds, cpu_percent=round(window["cpu_s"] * 100 / seconds, 1),
                replacements=window["replacements"], churn_failed=window["failed"],
                pod_events_per_s=round(pod_events / seconds, 1),
                node_events_per_s=round(window["node_events"] / seconds, 1),
                cpu_us_per_pod_event=round(extra * 1e6 / pod_events, 1) if pod_events else None,
                fleet_cpu_s=window["fleet_cpu_s"])


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


def positive(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


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
    parser.add_argument("--kubelets", action="store_true",
                        help="simulated kubelets: one kwok per member running its nodes and "
                             "pods, and a churn window (module docstring)")
    parser.add_argument("--churn", type=float, default=20.0,
                        help="tenant pods replaced a second across the fleet with "
                             "--kubelets (0: no churn; default: %(default)s)")
    parser.add_argument("--churn-window", type=positive, default=60.0,
                        help="seconds of the churn window (default: %(default)s)")
    parser.add_argument("--sim-members", type=int, default=100,
                        help="simulated members for the capacity model line (0: none)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
