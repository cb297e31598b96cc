"""Be MultiKueue's placement (issue 37), for real: ``dispatcher dev up --with-kueue
--kueue-dispatcher ours`` and the controller with ``mode: multikueue-dispatcher``.

Kueue v0.17.0 runs as the hub's MultiKueue manager with ``multiKueue.dispatcherName`` set to
ours, and as a worker on each member. A Job and a JobSet labelled with the hub's LocalQueue
are created on the hub only: Kueue's webhook suspends them, the hub's ClusterQueue reserves
their quota, and only then does the controller nominate the one worker whose nodes hold
every pod; MultiKueue creates the copy there and nowhere else (each member's jobs are
watched from before the create: exactly one copy is ever made), the worker's Kueue admits
it, its pods run on nodes of the product. A Job over the hub's quota waits in Kueue: no
quota reserved, nothing nominated, no copy anywhere. The controller is bound by the shipped
RBAC (``deploy/multikueue-dispatcher/`` applied, its ServiceAccount's token).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from dispatcher.devfleet import multikueue
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL
from tests.integration.harness import Harness, eventually, running
from tests.integration.test_kueue_multikueue import (
    JOBS,
    JOBSETS,
    NAMESPACE,
    WORKLOADS,
    _only_member_with,
    _template,
)
from tests.security.tenancy.test_pod_security import ROOT, _kubectl, _token_kubeconfig

pytestmark = pytest.mark.integration

WITHIN_S = 120.0
MODE = {"mode": "multikueue-dispatcher"}


class Copies:
    """Every member's ADDED events of ``ref`` objects named ``name``, watched from now."""

    def __init__(self, h: Harness, ref: ResourceRef, name: str) -> None:
        self.h, self.ref, self.name = h, ref, name
        self.made: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Copies:
        for member, client in self.h.members.items():
            listed = await watch.list_objects(client, self.ref, namespace=NAMESPACE)
            self.made += [member for o in listed.objects if o["metadata"]["name"] == self.name]
            self._tasks.append(asyncio.create_task(
                self._watch(member, client, listed.resource_version)))
        return self

    async def _watch(self, member: str, client: KubeClient, version: str) -> None:
        async for item in watch.watch_from(client, self.ref, resource_version=version,
                                           namespace=NAMESPACE):
            if item.type == "ADDED" and item.object["metadata"]["name"] == self.name:
                self.made.append(member)

    async def __aexit__(self, *_: object) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@pytest.fixture(scope="module")
def installed(mk_dispatcher_fleet: FleetState) -> dict[str, Any]:
    """``kubectl apply -k deploy/multikueue-dispatcher/`` on the hub, as the operator guide
    says; the hub's admin kubeconfig."""
    hub = mk_dispatcher_fleet.cluster("hub")
    done = _kubectl("apply", "-k", str(ROOT / "deploy" / "multikueue-dispatcher"),
                    kubeconfig=hub.kubeconfig)
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(Path(hub.kubeconfig).read_text())
    return loaded


@contextlib.asynccontextmanager
async def dispatcher(fleet: FleetState, admin: dict[str, Any]) -> AsyncIterator[Harness]:
    """The controller in-process, bound by the shipped RBAC (the ServiceAccount's token)."""
    kubeconfig = await _token_kubeconfig(admin, "dispatcher")
    async with running(fleet, namespace=NAMESPACE, changes=MODE,
                       hub_kubeconfig=kubeconfig) as h:
        yield h


async def _workload_of(hub: KubeClient, name: str) -> dict[str, Any] | None:
    for item in (await hub.request("GET", WORKLOADS.collection(NAMESPACE)))["items"]:
        if any(o.get("name") == name for o in item["metadata"].get("ownerReferences", ())):
            return item  # type: ignore[no-any-return]
    return None


async def _running_on(client: KubeClient, name: str, count: int, product: str) -> bool:
    pods = (await client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                 query=[("labelSelector", f"test={name}")]))["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    if len(running) < count:
        return False
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in
             (await client.request("GET", "/api/v1/nodes"))["items"]}
    return all(nodes[p["spec"]["nodeName"]][GPU_PRODUCT_LABEL] == product for p in running)


async def _why(fleet: FleetState, tmp: Path, ref: str) -> dict[str, Any]:
    """``dispatcher why -n NAMESPACE REF -o json`` as a user runs it (its own process,
    the hub's admin kubeconfig, the workers as static members)."""
    config = tmp / "why.yaml"
    config.write_text(yaml.safe_dump({
        "hub": {"kubeconfig": fleet.cluster("hub").kubeconfig},
        "fleet": {"watchMemberClusters": False, "staticMembers": [
            {"name": c.name, "kubeconfig": c.kubeconfig}
            for c in fleet.clusters if c.name != "hub"]}}))
    done = await asyncio.to_thread(
        subprocess.run, [str(Path(sys.executable).parent / "dispatcher"), "why", "-n",
                         NAMESPACE, ref, "--config", str(config), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def _runs_once_where_we_chose(h: Harness, ref: ResourceRef, body: dict[str, Any],
                                    *, target: str, pods: int, product: str) -> None:
    name = body["metadata"]["name"]
    with capture_logs() as logs:
        await _runs_once(h, ref, body, name=name, target=target, pods=pods, product=product)
    # the nomination was ours (Kueue's own dispatcher is off: nothing else nominates)
    ours = [e for e in logs if e["event"] == "nomination.decided"
            and e.get("name", "").startswith(f"{ref.kind.lower()}-{name}-")]
    assert [e["nominated"] for e in ours] == [[target]], ours
    assert ours[0]["chosen"] == target
    workload = ours[0]["name"]

    async def said() -> list[dict[str, Any]]:
        listed = await h.hub.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events", query=[
            ("fieldSelector", f"involvedObject.name={workload}")])
        return [e for e in listed["items"] if e["reason"] == "Nominated"]

    (event,) = await eventually(said, what="the Nominated Event on the hub Workload")
    assert event["involvedObject"]["kind"] == "Workload" and target in event["message"]


async def _runs_once(h: Harness, ref: ResourceRef, body: dict[str, Any], *, name: str,
                     target: str, pods: int, product: str) -> None:
    async with Copies(h, ref, name) as copies:
        created = await h.hub.request("POST", ref.collection(NAMESPACE), body=body)
        assert created["spec"]["suspend"] is True  # Kueue's webhook on the hub
        assert created["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"

        async def chosen() -> str | None:
            wl = await _workload_of(h.hub, name)
            status = (wl or {}).get("status") or {}
            return status.get("clusterName")  # type: ignore[no-any-return]

        assert await eventually(chosen, what=f"MultiKueue choosing for {name}",
                                within=WITHIN_S) == target
        await eventually(lambda: _running_on(h.members[target], name, pods, product),
                         what=f"{pods} pods of {name} running on {target}", within=WITHIN_S)
        await asyncio.sleep(2)  # a late copy elsewhere would be seen by now
    assert copies.made == [target], copies.made


async def test_a_job_and_a_jobset_run_once_on_the_worker_whose_nodes_fit(
        mk_dispatcher_fleet: FleetState, installed: dict[str, Any],
        fleet_spec: FleetSpec, tmp_path: Path) -> None:
    async with dispatcher(mk_dispatcher_fleet, installed) as h:
        product = "NVIDIA-A100-SXM4-80GB"
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "mkd-job", "namespace": NAMESPACE,
                            "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
               "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                        "template": _template(product, "mkd-job")}}
        target = _only_member_with(fleet_spec, product)
        await _runs_once_where_we_chose(h, JOBS, job, target=target, pods=2, product=product)
        kueue = (await _why(mk_dispatcher_fleet, tmp_path, "job/mkd-job"))["kueue"]
        assert (kueue["stage"], kueue["cluster"]) == ("Running", target), kueue
        product = "NVIDIA-L40S"
        jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                  "metadata": {"name": "mkd-jobset", "namespace": NAMESPACE,
                               "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
                  "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {
                      "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                               "template": _template(product, "mkd-jobset")}}}]}}
        await _runs_once_where_we_chose(h, JOBSETS, jobset, target=_only_member_with(
            fleet_spec, product), pods=2, product=product)


async def test_a_job_over_the_hubs_quota_waits_in_kueue_and_is_never_nominated(
        mk_dispatcher_fleet: FleetState, installed: dict[str, Any], tmp_path: Path) -> None:
    async with dispatcher(mk_dispatcher_fleet, installed) as h:
        name = "mkd-over-quota"
        product = "NVIDIA-H100-80GB-HBM3"  # 32 untainted in the fleet: 40 asked
        template = _template(product, name)
        template["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
        body = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": NAMESPACE,
                             "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
                "spec": {"parallelism": 5, "completions": 5, "backoffLimit": 0,
                         "template": template}}
        async with Copies(h, JOBS, name) as copies:
            await h.hub.request("POST", JOBS.collection(NAMESPACE), body=body)
            try:
                wl = await eventually(lambda: _workload_of(h.hub, name),
                                      what="its Workload", within=WITHIN_S)
                for _ in range(20):  # ~10 s of decisions: still only Kueue's
                    wl = await _workload_of(h.hub, name) or wl
                    status = wl.get("status") or {}
                    quota = [c for c in status.get("conditions") or ()
                             if c["type"] == "QuotaReserved"]
                    assert not quota or quota[0]["status"] == "False", status
                    assert not status.get("nominatedClusterNames"), status
                    await asyncio.sleep(0.5)
                # `why` says so in Kueue's words, and asks no member
                answer = await _why(mk_dispatcher_fleet, tmp_path, f"job/{name}")
                kueue = answer["kueue"]
                assert (kueue["stage"], kueue["name"]) == ("WaitingForQuota",
                                                           wl["metadata"]["name"]), kueue
                assert "quota" in kueue["message"], kueue
                assert answer["dispatch"] is None and answer["members"] is None
            finally:
                with contextlib.suppress(Exception):
                    await h.hub.request("DELETE", JOBS.item(name, NAMESPACE),
                                        query=[("propagationPolicy", "Background")])
        assert copies.made == []
