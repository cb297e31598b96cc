"""Cross-tenant latency under an untrusted definition's load: one tenant's slow objects,
another tenant's plain Jobs.

Real code paths end to end: a dev fleet (one etcd, a hub and one member kube-apiserver on
loopback, 20 GPU nodes), ``dispatcher run`` as its own process (the shipped defaults: two
bounded jq workers, 2 s of CPU per object), and this process acting as two tenants:

* tenant A (namespace ``tenant-a``) writes objects of a kind served by a hub Karta whose
  replica path costs time quadratic in the length of an annotation (``COST``): the
  annotation is sized so one evaluation takes about ``--cpu`` seconds of CPU (default 1 s,
  just under the 2 s bound; ``--load-chars`` fixes it, so two runs carry the same load);
* tenant B (namespace ``tenant-b``) writes plain ``batch/v1`` Jobs (the built-in, trusted
  definition) and its copies' statuses change on the member.

Each round: A creates ten slow objects at once; 0.1 s and 2 s later B creates a Job
(dispatch latency = copy seen on the member - hub create sent); 0.5 s and 2.5 s later the
status of one of B's already dispatched copies is patched on the member (mirror latency =
hub status seen - member patch sent). The round ends when A's ten are resolved (their
copies landed or their Dispatch says why not). The ``idle`` case runs the same B schedule
without A's objects.

Prints one JSON object per case: bench, case, rounds, dispatch_p50_s, dispatch_max_s,
mirror_p50_s, mirror_max_s, a_landed_max_s (A's own objects: create -> copy), a_unresolved
(A's objects whose Dispatch says Resolved=False, with the reason), a_missing (A's objects
with no copy after the round's 120 s), definition (the Karta's Accepted condition after
the case), load_chars,
cpu_per_object_s (calibrated here, in-process), controller_cpu_s (the controller and its
jq workers over the case), load_avg, machine. About two minutes on 2 cores; the dev fleet
lives in a temporary directory and is removed afterwards (binaries are cached).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from dispatch import start_controller, until, watch_until  # benchmarks/dispatch.py
from procstats import Processes  # benchmarks/procstats.py
from running import client_for, stop, wait_ready  # benchmarks/running.py

from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import free_port
from dispatcher.devfleet.workload_crds import CRD_PATH, crd_manifest
from dispatcher.fleet.fleetfile import FleetSpec, MemberSpec, NodePool
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError
from dispatcher.kube.resources import DISPATCHES, KARTAS, NAMESPACES, ResourceRef
from dispatcher.workloads.jqrun import Batch

ROOT = Path(__file__).resolve().parents[1]
MEMBERS = ("member-1",)
HUB_ID = "bench-hub"  # what dispatch.start_controller configures
GROUP = "costly.bench.test"
COSTLY = ResourceRef(group=GROUP, version="v1", kind="CostlyJob", plural="costlyjobs",
                     namespaced=True)
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
COST = ('reduce ((.metadata.annotations.load // "" | explode[]) as $a | '
        '(.metadata.annotations.load // "" | explode[]) as $b | 1) as $x (0; . + 1)')
ORIGIN = f"dispatcher.io/origin={HUB_ID}"


def calibrate(target_cpu_s: float) -> tuple[int, float]:
    """Annotation length whose ``COST`` takes about ``target_cpu_s`` of CPU here, and the
    CPU it took (libjq in this process, as in a worker)."""
    batch = Batch([COST])
    chars = 1000
    for _ in range(3):
        started = time.process_time()
        batch.run(json.dumps({"metadata": {"annotations": {"load": "x" * chars}}}))
        took = max(time.process_time() - started, 1e-3)
        chars = max(10, round(chars * math.sqrt(target_cpu_s / took)))
    started = time.process_time()
    batch.run(json.dumps({"metadata": {"annotations": {"load": "x" * chars}}}))
    return chars, time.process_time() - started


def karta() -> dict[str, Any]:
    """The catalog's TFJob definition, adapted to CostlyJob, with ``COST`` in its replica
    path (evaluated by every resolve)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "definitions" / "tfjob.yaml").read_text())
    doc["metadata"] = {"name": "costly"}
    structure = doc["spec"]["structureDefinition"]
    structure["rootComponent"]["kind"] = {"group": GROUP, "version": "v1", "kind": "CostlyJob"}
    child = structure["childComponents"][0]
    child["instanceIdPath"] = ".spec.replicaSpecs | keys[] | ascii_downcase"
    child["specDefinition"]["podTemplateSpecPath"] = ".spec.replicaSpecs | .[] | .template"
    child["scaleDefinition"]["replicasPath"] = (f"({COST}) as $cost | .spec.replicaSpecs | "
                                                f".[] | (.replicas // 1)")
    return doc


def costly(name: str, load: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "CostlyJob",
            "metadata": {"name": name, "namespace": TENANT_A,
                         "annotations": {"load": "x" * load}},
            "spec": {"replicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "w", "image": "busybox", "resources": {
                    "limits": {"nvidia.com/gpu": 1}}}]}}}}}}


def job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": TENANT_B},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox",
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


class Tenants:
    """The hub and member clients, and what the watches saw when."""

    def __init__(self, hub: KubeClient, member: KubeClient) -> None:
        self.hub = hub
        self.member = member
        self.b_landed: dict[str, float] = {}
        self.a_landed: dict[str, float] = {}
        self.b_mirrored: dict[str, float] = {}
        self._done = asyncio.Event()
        self._tasks = [
            asyncio.create_task(watch_until(member, JOBS, namespace=TENANT_B, selector=ORIGIN,
                                            seen=self.b_landed, key=lambda o: True,
                                            done=self._done)),
            asyncio.create_task(watch_until(member, COSTLY, namespace=TENANT_A,
                                            selector=ORIGIN, seen=self.a_landed,
                                            key=lambda o: True, done=self._done)),
            asyncio.create_task(watch_until(
                hub, JOBS, namespace=TENANT_B, selector="", seen=self.b_mirrored,
                key=lambda o: (o.get("status") or {}).get("active") == 1, done=self._done))]

    async def close(self) -> None:
        self._done.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def create_job(self, name: str) -> float:
        sent = time.perf_counter()
        await self.hub.request("POST", JOBS.collection(TENANT_B), body=job(name))
        return sent

    async def patch_status(self, name: str) -> float:
        sent = time.perf_counter()
        await self.member.request("PATCH", JOBS.item(name, TENANT_B, "status"),
                                  content_type=JSON_MERGE_PATCH, body={"status": {
                                      "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()),
                                      "active": 1, "ready": 1}})
        return sent


async def setup_kind(hub: KubeClient, member: KubeClient) -> None:
    """Namespaces and the CostlyJob CRD on hub and member, until both serve the kind
    (before the controller starts: a member's kinds are discovered at connect)."""
    for namespace in (TENANT_A, TENANT_B):
        with contextlib.suppress(Conflict):
            await hub.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    crd = crd_manifest(group=GROUP, version="v1", kind="CostlyJob", plural="costlyjobs")
    for client in (hub, member):
        with contextlib.suppress(Conflict):
            await client.request("POST", CRD_PATH, body=crd)

        async def served(client: KubeClient = client) -> bool:
            try:
                await client.request("GET", COSTLY.collection(TENANT_A))
            except KubeError:
                return False
            return True
        await poll(served, seconds=60)


async def setup_definition(hub: KubeClient) -> None:
    """The Karta, until the controller says Accepted."""
    with contextlib.suppress(Conflict):
        await hub.request("POST", KARTAS.collection(), body=karta())

    async def accepted() -> bool:
        obj = await hub.request("GET", KARTAS.item("costly"))
        return any(c.get("type") == "Accepted" and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or ())
    await poll(accepted, seconds=120)


async def poll(check: Any, *, seconds: float) -> None:
    """Until ``await check()`` is true, every 0.2 s (TimeoutError after ``seconds``)."""
    async with asyncio.timeout(seconds):
        while True:
            if await check():
                return
            await asyncio.sleep(0.2)


async def verdict(hub: KubeClient) -> str:
    """The Karta's Accepted condition: ``True`` or ``False: reason: message``."""
    obj = await hub.request("GET", KARTAS.item("costly"))
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Accepted":
            return "True" if c.get("status") == "True" else \
                f"False: {c.get('reason')}: {str(c.get('message'))[:200]}"
    return "unknown"


async def unresolved(hub: KubeClient, names: list[str]) -> dict[str, str]:
    """A's objects whose Dispatch says Resolved=False: name -> reason."""
    out: dict[str, str] = {}
    listed = await hub.request("GET", DISPATCHES.collection(TENANT_A))
    for item in listed.get("items") or ():
        name = item["spec"]["workload"]["name"]
        for c in (item.get("status") or {}).get("conditions") or ():
            if name in names and c.get("type") == "Resolved" and c.get("status") == "False":
                out[name] = str(c.get("reason"))
    return out


async def at(t0: float, delay: float, what: Any) -> Any:
    """``await what()`` at ``t0 + delay`` (perf_counter)."""
    await asyncio.sleep(max(0.0, t0 + delay - time.perf_counter()))
    return await what()


async def run_round(tenants: Tenants, *, names: list[str], jobs: list[str],
                    patched: list[str], load: int, a_sent: dict[str, float]
                    ) -> tuple[list[float], list[float]]:
    """One round (see the module docstring): B's dispatch and mirror latencies."""
    async def create_a(name: str) -> None:
        a_sent[name] = time.perf_counter()
        await tenants.hub.request("POST", COSTLY.collection(TENANT_A),
                                  body=costly(name, load))

    t0 = time.perf_counter()
    _, sent1, sent2, p1, p2 = await asyncio.gather(
        asyncio.gather(*(create_a(n) for n in names)),
        at(t0, 0.1, lambda: tenants.create_job(jobs[0])),
        at(t0, 2.0, lambda: tenants.create_job(jobs[1])),
        at(t0, 0.5, lambda: tenants.patch_status(patched[0])),
        at(t0, 2.5, lambda: tenants.patch_status(patched[1])))
    await until(lambda: all(n in tenants.b_landed for n in jobs)
                and all(n in tenants.b_mirrored for n in patched), seconds=120)
    dispatch = [tenants.b_landed[jobs[0]] - sent1, tenants.b_landed[jobs[1]] - sent2]
    mirror = [tenants.b_mirrored[patched[0]] - p1, tenants.b_mirrored[patched[1]] - p2]
    deadline = time.perf_counter() + 120  # A's resolved: landed, or said why not (or given up)
    while time.perf_counter() < deadline:
        missing = [n for n in names if n not in tenants.a_landed]
        if not missing or set(missing) <= set(await unresolved(tenants.hub, missing)):
            break
        await asyncio.sleep(0.25)
    return dispatch, mirror


async def run_case(tenants: Tenants, *, case: str, rounds: int, load: int,
                   procs: Processes) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:4]
    # copies whose status the rounds change (dispatched before the case starts)
    mirrors = [f"m-{tag}-{i}" for i in range(2 * rounds)]
    for name in mirrors:
        await tenants.create_job(name)
    await until(lambda: all(n in tenants.b_landed for n in mirrors), seconds=120)
    dispatch: list[float] = []
    mirror: list[float] = []
    a_sent: dict[str, float] = {}
    a_names: list[str] = []
    cpu_before = procs.cpu()
    for r in range(rounds):
        names = [f"a-{tag}-{r}-{i}" for i in range(10)] if case == "ten-slow" else []
        a_names += names
        got = await run_round(tenants, names=names, jobs=[f"b-{tag}-{r}-{i}" for i in (0, 1)],
                              patched=mirrors[2 * r:2 * r + 2], load=load, a_sent=a_sent)
        dispatch += got[0]
        mirror += got[1]
        await asyncio.sleep(1.0)
    cpu = procs.cpu_delta(cpu_before, procs.cpu())
    a_times = [tenants.a_landed[n] - a_sent[n] for n in a_names if n in tenants.a_landed]
    return {"bench": "tenants", "case": case, "rounds": rounds,
            "dispatch_p50_s": round(statistics.median(dispatch), 3),
            "dispatch_max_s": round(max(dispatch), 3),
            "mirror_p50_s": round(statistics.median(mirror), 3),
            "mirror_max_s": round(max(mirror), 3),
            "samples": len(dispatch),
            "a_objects": len(a_names),
            "a_landed_max_s": round(max(a_times), 2) if a_times else None,
            "a_unresolved": await unresolved(tenants.hub, a_names) if a_names else {},
            "a_missing": len([n for n in a_names if n not in tenants.a_landed]),
            "definition": await verdict(tenants.hub),
            "load_chars": load,
            "controller_cpu_s": round(cpu.get("controller", 0.0), 2),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, "
                       f"{platform.python_implementation()} {platform.python_version()}"}


async def main_async(args: argparse.Namespace) -> None:
    if args.load_chars:
        load, took = args.load_chars, calibrate_at(args.load_chars)
    else:
        load, took = calibrate(args.cpu)
    print(json.dumps({"bench": "tenants", "case": "calibration", "load_chars": load,
                      "cpu_per_object_s": round(took, 3)}), flush=True)
    with tempfile.TemporaryDirectory(prefix="tenants-bench-") as tmp:
        root = Path(tmp)
        spec = FleetSpec(members=(MemberSpec(name="member-1", node_pools=(NodePool(
            name="h100", count=20, gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3"),)),))
        state = await asyncio.to_thread(devfleet.up, root=root / "fleet", fleet=spec)
        hub = await client_for(state, "hub")
        member = await client_for(state, "member-1")
        await setup_kind(hub, member)
        port = free_port()
        proc = start_controller(state, root, port, members=MEMBERS)
        tenants = Tenants(hub, member)
        try:
            await wait_ready(port, proc)
            await setup_definition(hub)
            procs = Processes.of_fleet(state, controller=proc.pid)
            # warm up both paths (first resolve of the kind starts the jq workers)
            await tenants.hub.request("POST", COSTLY.collection(TENANT_A),
                                      body=costly("warm", 0))
            await tenants.create_job("warm")
            await until(lambda: "warm" in tenants.a_landed and "warm" in tenants.b_landed,
                        seconds=120)
            for case in args.cases:
                result = await run_case(tenants, case=case, rounds=args.rounds, load=load,
                                        procs=procs)
                print(json.dumps({**result, "cpu_per_object_s": round(took, 3)}),
                      flush=True)
        finally:
            await tenants.close()
            for client in (hub, member):
                with contextlib.suppress(KubeError):
                    await client.close()
            await asyncio.to_thread(stop, proc)
            await asyncio.to_thread(devfleet.down, root=root / "fleet")


def calibrate_at(chars: int) -> float:
    """The CPU one ``COST`` evaluation at ``chars`` takes here."""
    batch = Batch([COST])
    started = time.process_time()
    batch.run(json.dumps({"metadata": {"annotations": {"load": "x" * chars}}}))
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["idle", "ten-slow"],
                        choices=["idle", "ten-slow"])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per case")
    parser.add_argument("--cpu", type=float, default=1.0,
                        help="CPU seconds one of A's objects costs (calibrated here)")
    parser.add_argument("--load-chars", type=int, default=0,
                        help="annotation length instead of calibrating (same load twice)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
