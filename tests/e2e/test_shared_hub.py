"""End to end on a SHARED hub: the hub is a full cluster (kube-controller-manager with every
controller, kube-scheduler, kwok GPU nodes, the same operators and webhooks as the
members), and ``dispatcher run --hub-mode shared`` serves its webhook from its own process.

A user creates workloads with kubectl on the hub. Each dispatched kind is held there as its
definition declares (Job, JobSet, MPIJob by managedBy; Deployment and PyTorchJob by a
pause), so the hub's controllers make nothing for it: no pod, no child Job, no ReplicaSet
in the namespace on the hub, while the copy runs on a member and its status comes back
(where the hub's controller does not own the status). LeaderWorkerSet is refused at
admission with the reason. Then a burst during which the controller is killed with SIGKILL:
each workload gets exactly one copy, completes, and the hub still runs none of it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, PODS, ResourceRef
from dispatcher.shell.webhook import WEBHOOK_CONFIGURATIONS
from dispatcher.workloads.holds import MANAGED_BY
from tests.integration.harness import kubectl as any_kubectl

from .conftest import ControllerProcess, _controller
from .conftest import eventually as shared_eventually
from .test_real_fleet import (
    all_completed,
    copies,
    job,
    jobset,
    kubectl,
    nothing_left,
    open_clients,
    start,
)

pytestmark = pytest.mark.e2e

eventually = functools.partial(shared_eventually, within=90.0, interval=0.3)
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
REPLICASETS = ResourceRef(group="apps", version="v1", kind="ReplicaSet", plural="replicasets",
                          namespaced=True)
PRODUCT = "NVIDIA-H100-80GB-HBM3"


def shared_settings(port: int) -> Callable[[str], dict[str, Any]]:
    """hub.mode shared, the webhook on loopback with its own configuration and Secret."""
    def extra(hub_id: str) -> dict[str, Any]:
        return {"hub": {"mode": "shared"},
                "webhook": {"address": "127.0.0.1", "port": port,
                            "url": f"https://127.0.0.1:{port}",
                            "configurationName": f"dispatcher-{hub_id}",
                            "secretName": f"webhook-{hub_id}"}}
    return extra


@pytest.fixture
async def shared_clients(shared_hub_fleet: FleetState) -> AsyncIterator[dict[str, KubeClient]]:
    async for opened in open_clients(shared_hub_fleet):
        yield opened


@pytest.fixture
def shared_controller(shared_hub_fleet: FleetState, tmp_path: Path,
                      request: pytest.FixtureRequest) -> Iterator[ControllerProcess]:
    """A controller process (not started) in shared mode; its webhook configuration is
    removed afterwards (failurePolicy Fail: left behind, it would refuse creates in the
    test's namespace)."""
    proc: ControllerProcess | None = None
    try:
        for proc in _controller(shared_hub_fleet, tmp_path, request,
                                extra=shared_settings(free_port())):
            yield proc
    finally:
        if proc is not None:
            kubectl(shared_hub_fleet, "delete", "mutatingwebhookconfiguration",
                    f"dispatcher-{proc.hub_id}", "--ignore-not-found")


async def hub_made_nothing(hub: KubeClient, namespace: str, own_jobs: set[str]) -> None:
    """No pod, no ReplicaSet and no Job but the user's own in ``namespace`` on the hub."""
    pods = (await watch.list_objects(hub, PODS, namespace=namespace)).objects
    assert pods == [], [p["metadata"]["name"] for p in pods]
    sets = (await watch.list_objects(hub, REPLICASETS, namespace=namespace)).objects
    assert sets == [], [r["metadata"]["name"] for r in sets]
    jobs = {o["metadata"]["name"] for o in
            (await watch.list_objects(hub, JOBS, namespace=namespace)).objects}
    assert jobs <= own_jobs, jobs - own_jobs


async def dispatch_status(hub: KubeClient, namespace: str, name: str) -> str:
    try:
        record = await hub.request("GET", DISPATCHES.item(name, namespace))
    except NotFound:
        return ""
    return str((record.get("status") or {}).get("genericStatus") or "")


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "serve", "image": "registry.invalid/s:1",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                         "nodeSelector": {"nvidia.com/gpu.product": PRODUCT}}}}}


async def test_each_kind_runs_only_on_the_member_and_the_hub_holds_it(
        shared_hub_fleet: FleetState, shared_controller: ControllerProcess,
        shared_clients: dict[str, KubeClient]) -> None:
    from tests.integration.test_dispatch_real_operators import mpijob, pytorchjob

    fleet, hub = shared_hub_fleet, shared_clients["hub"]
    ns, hub_id = shared_controller.namespace, shared_controller.hub_id
    kubectl(fleet, "create", "namespace", ns)
    await start(shared_controller)
    registered = await hub.request("GET", WEBHOOK_CONFIGURATIONS.item(f"dispatcher-{hub_id}"))
    assert registered["webhooks"][0]["clientConfig"]["caBundle"]

    def create(*args: str, stdin: str | None = None) -> Any:
        return asyncio.to_thread(kubectl, fleet, *args, stdin=stdin)

    await create("create", "job", "eval", "-n", ns, "--image=busybox", "--", "true")
    held = await hub.request("GET", JOBS.item("eval", ns))
    assert held["spec"]["managedBy"] == MANAGED_BY
    for body in (jobset("gang", workers=2, gpus=1, run_s=5), mpijob(PRODUCT),
                 deployment("web")):
        await create("create", "-n", ns, "-f", "-", stdin=yaml.safe_dump(body))
    trainer = pytorchjob(PRODUCT)
    trainer["metadata"]["name"] = "torch"
    await create("create", "-n", ns, "-f", "-", stdin=yaml.safe_dump(trainer))
    refused = await asyncio.to_thread(
        any_kubectl, fleet, "create", "-n", ns, "-f", "-", check=False, stdin=yaml.safe_dump({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"}, "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": 2, "workerTemplate": {"spec": {"containers": [
                    {"name": "w", "image": "registry.invalid/w:1"}]}}}}}))
    assert refused.returncode != 0 and "dedicated hub" in refused.stderr, refused.stderr
    ray = await asyncio.to_thread(
        any_kubectl, fleet, "create", "-n", ns, "-f", "-", check=False, stdin=yaml.safe_dump({
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray"},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "head", "image": "registry.invalid/ray:1"}]}}}}}))
    assert ray.returncode != 0 and "kueue.x-k8s.io/multikueue" in ray.stderr, ray.stderr

    # the Job: held on the hub, run on a member, Complete on the hub as the member wrote it
    await asyncio.to_thread(kubectl, fleet, "wait", "-n", ns, "--for=condition=Complete",
                            "job/eval", "--timeout=150s", timeout=160)
    await asyncio.to_thread(kubectl, fleet, "wait", "-n", ns,
                            "--for=jsonpath={.status.terminalState}=Completed",
                            "jobset/gang", "--timeout=150s", timeout=160)
    for name in ("mpijob-train", "pytorchjob-torch"):
        async def finished(name: str = name) -> bool:
            return await dispatch_status(hub, ns, name) == "completed"
        await eventually(finished, what=f"{name} completed on its member", within=180)

    async def serving() -> bool:
        return await dispatch_status(hub, ns, "deployment-web") == "running"
    await eventually(serving, what="the Deployment running on its member")
    await hub_made_nothing(hub, ns, own_jobs={"eval"})

    mpi = await hub.request("GET", ResourceRef(
        group="kubeflow.org", version="v2beta1", kind="MPIJob", plural="mpijobs",
        namespaced=True).item("train", ns))
    assert any(c["type"] == "Succeeded" and c["status"] == "True"
               for c in mpi["status"]["conditions"]), mpi["status"]
    web = await hub.request("GET", ResourceRef(
        group="apps", version="v1", kind="Deployment", plural="deployments",
        namespaced=True).item("web", ns))
    assert web["spec"]["paused"] is True and not web["status"].get("readyReplicas")
    found = {(kind, name): member
             for kind, name, member in await copies(shared_clients, ns, hub_id)}
    assert {("Job", "eval"), ("JobSet", "gang")} <= set(found)
    # managedBy kinds: the hub status is the member's, as the member's controller wrote it
    # (read until equal: the member may write it again after the hub saw Completed)
    async def same_status() -> bool:
        hub_set = await hub.request("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}"
                                           f"/jobsets/gang")
        member_set = await shared_clients[found[("JobSet", "gang")]].request(
            "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/gang")
        return bool(hub_set["status"] == member_set["status"])
    await eventually(same_status, what="the hub JobSet's status the member's")

    await asyncio.to_thread(kubectl, fleet, "delete", "-n", ns,
                            "jobs,jobsets,mpijobs,pytorchjobs,deployments", "--all",
                            "--wait=true", timeout=120)
    await eventually(lambda: nothing_left(shared_clients, ns, hub_id),
                     what="copies and pods gone from the members", within=120)


async def test_kill9_mid_burst_on_a_shared_hub_runs_each_once_and_never_on_the_hub(
        shared_hub_fleet: FleetState, shared_controller: ControllerProcess,
        shared_clients: dict[str, KubeClient]) -> None:
    """16 one-GPU Jobs and 4 JobSets created at once, the controller killed -9 once the
    first copies exist, then started again: exactly one copy each, every one completes, no
    pod on the hub, and the mirrored Job statuses pass the hub's validation throughout (no
    StatusMirrored=False)."""
    fleet, hub = shared_hub_fleet, shared_clients["hub"]
    ns, hub_id = shared_controller.namespace, shared_controller.hub_id
    kubectl(fleet, "create", "namespace", ns)
    await start(shared_controller)
    bodies = [job(f"job-{i:02d}", pods=1, gpus=1, run_s=5) for i in range(16)]
    bodies += [jobset(f"set-{i}", workers=2, gpus=1, run_s=5) for i in range(4)]
    manifest = yaml.safe_dump_all(bodies)
    creating = asyncio.to_thread(kubectl, fleet, "create", "-n", ns, "-f", "-",
                                 stdin=manifest)
    await creating  # all created (held) while the webhook answers

    async def some() -> bool:
        return len(await copies(shared_clients, ns, hub_id)) >= 4

    await eventually(some, what="the first copies")
    shared_controller.kill9()
    await start(shared_controller)

    await eventually(lambda: all_completed(hub, ns, len(bodies)),
                     what="every workload completed", within=240)
    found = await copies(shared_clients, ns, hub_id)
    assert sorted((k, n) for k, n, _ in found) == sorted(
        (b["kind"], b["metadata"]["name"]) for b in bodies)
    await hub_made_nothing(hub, ns, own_jobs={b["metadata"]["name"] for b in bodies
                                              if b["kind"] == "Job"})
    for record in (await watch.list_objects(hub, DISPATCHES, namespace=ns)).objects:
        refused = [c for c in record["status"].get("conditions") or ()
                   if c["type"] == "StatusMirrored" and c["status"] == "False"]
        assert refused == [], record["status"]
    await asyncio.to_thread(kubectl, fleet, "delete", "-n", ns, "jobs,jobsets", "--all",
                            "--wait=true", timeout=120)
    await eventually(lambda: nothing_left(shared_clients, ns, hub_id),
                     what="copies and pods gone from the members", within=120)


async def test_run_check_warns_when_a_shared_hub_is_configured_as_dedicated(
        shared_hub_fleet: FleetState, real_fleet: FleetState) -> None:
    """``dispatcher run --check``: the shared hub's kube-system has the workload
    controllers' ServiceAccounts, so ``hub.mode: dedicated`` is warned about; the dedicated
    hub (only namespace, GC and service-account controllers) draws no warning."""
    import subprocess
    import sys

    def check(state: FleetState, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dispatcher", "run", "--check",
                               "--hub-kubeconfig", state.cluster("hub").kubeconfig, *extra],
                              capture_output=True, text=True, timeout=60, check=False)

    wrong = await asyncio.to_thread(check, shared_hub_fleet)
    assert wrong.returncode == 0, wrong.stderr
    assert "hub.mode is dedicated, but the hub looks shared" in wrong.stderr
    assert "job-controller" in wrong.stderr
    right = await asyncio.to_thread(check, shared_hub_fleet, "--hub-mode", "shared")
    assert "warning" not in right.stderr, right.stderr
    dedicated = await asyncio.to_thread(check, real_fleet)
    assert "warning" not in dedicated.stderr, dedicated.stderr
