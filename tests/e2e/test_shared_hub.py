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
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
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


class Balancer:
    """A loopback TCP balancer standing in for the webhook's Service (the dev fleet has no
    kube-proxy). TLS passes through untouched; a connection stays on the replica it was
    sent to, as behind a Service.

    ``probe`` off: each connection goes to the next replica that accepts it, so a replica
    killed -9 is skipped at once (behind a real Service, EndpointSlices drop it once the
    kubelet sees it gone, seconds, and a create in that window can be refused too).
    ``probe`` on: as kube-proxy does, new connections go only to replicas whose /readyz
    passed at the last probe (every 0.5 s), and one that refuses the connection is not
    skipped: the call fails."""

    def __init__(self, backends: list[int], *, probe: list[int] | None = None) -> None:
        self.backends = backends
        self.probe = probe
        self.ready = [probe is None] * len(backends)
        self.turn = 0
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self._prober: asyncio.Task[None] | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        if self.probe is not None:
            self._prober = asyncio.ensure_future(self._probe(self.probe))
        return self.port

    async def _probe(self, ports: list[int]) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
            while True:
                for i, port in enumerate(ports):
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/readyz") as answer:
                            self.ready[i] = answer.status == 200
                    except (TimeoutError, aiohttp.ClientError):
                        self.ready[i] = False
                await asyncio.sleep(0.5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.turn += 1
        ready = [p for p, up in zip(self.backends, self.ready, strict=True) if up]
        for i in range(len(ready)):
            port = ready[(self.turn + i) % len(ready)]
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if self.probe is not None:
                    break  # kube-proxy does not try another endpoint
                continue
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                                 return_exceptions=True)
            return
        writer.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:
            dst.close()

    async def stop(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@dataclass
class Replicas:
    """Two replicas of one controller identity behind a ``Balancer``, the leader known."""

    leader: ControllerProcess
    standby: ControllerProcess
    namespace: str
    hub_id: str


@contextlib.asynccontextmanager
async def two_replicas(fleet: FleetState, hub: KubeClient, tmp_path: Path,
                       request: pytest.FixtureRequest, *, probe: bool
                       ) -> AsyncIterator[Replicas]:
    """Two replicas (the same hub id, lease, webhook configuration and Secret, each its own
    ports), both started and Ready, behind one balancer whose URL the webhook registers."""
    webhook_ports = [free_port(), free_port()]
    procs: list[ControllerProcess] = []
    for index in range(2):
        replica_dir = tmp_path / f"replica-{index}"
        replica_dir.mkdir()
        for proc in _controller(fleet, replica_dir, request,
                                extra=shared_settings(webhook_ports[index])):
            procs.append(proc)
            break
    balancer = Balancer(webhook_ports, probe=[p.port for p in procs] if probe else None)
    url_port = await balancer.start()
    first, second = procs
    first_config = yaml.safe_load(first.config.read_text())
    first_config["webhook"]["url"] = f"https://127.0.0.1:{url_port}"
    first.config.write_text(yaml.safe_dump(first_config))
    second_config = yaml.safe_load(second.config.read_text())
    for key in ("hubId", "watch", "leaderElection"):
        second_config[key] = first_config[key]
    second_config["webhook"] = {**first_config["webhook"], "port": webhook_ports[1]}
    second.config.write_text(yaml.safe_dump(second_config))
    second.hub_id, second.namespace = first.hub_id, first.namespace
    ns, hub_id = first.namespace, first.hub_id
    try:
        kubectl(fleet, "create", "namespace", ns)
        await start(first)
        await start(second)  # Ready while standing by: its webhook serves

        async def lease_holder() -> str:
            lease = await hub.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/dispatcher-system/leases/"
                       f"lease-{hub_id}")
            return str((lease.get("spec") or {}).get("holderIdentity") or "")

        holder = await eventually(lease_holder, what="a replica leading")  # Ready is not leading
        leader, standby = (first, second) if holder.split("-")[-2] == str(
            first.procs[-1].pid) else (second, first)
        assert holder.split("-")[-2] == str(leader.procs[-1].pid), holder
        yield Replicas(leader=leader, standby=standby, namespace=ns, hub_id=hub_id)
    finally:
        for proc in procs:
            proc.stop()
        await balancer.stop()
        kubectl(fleet, "delete", "mutatingwebhookconfiguration", f"dispatcher-{hub_id}",
                "--ignore-not-found")
        kubectl(fleet, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")


async def burst_while(replicas: Replicas, clients: dict[str, KubeClient],
                      action: Callable[[], None]) -> list[str]:
    """100 one-pod Jobs created ten at a time; ``action`` (on the leader) once the first
    copies exist. The refused creates, each with its error."""
    hub, ns = clients["hub"], replicas.namespace
    refused: list[str] = []

    async def create(i: int) -> None:
        try:
            await hub.request("POST", JOBS.collection(ns),
                              body=job(f"burst-{i:03d}", pods=1, gpus=0, run_s=3))
        except Exception as exc:  # every refusal counts, whatever it is
            refused.append(f"burst-{i:03d}: {exc}")

    async def act() -> None:
        await eventually(lambda: _some_copies(clients, ns, replicas.hub_id),
                         what="the first copies")
        action()

    async def burst() -> None:
        for start_at in range(0, 100, 10):
            await asyncio.gather(*(create(i) for i in range(start_at, start_at + 10)))
            await asyncio.sleep(0.2)

    await asyncio.gather(burst(), act())
    return refused


async def each_ran_once(replicas: Replicas, clients: dict[str, KubeClient]) -> None:
    """All 100 completed through the standby, one copy each, nothing run on the hub."""
    hub, ns = clients["hub"], replicas.namespace
    await eventually(lambda: all_completed(hub, ns, 100),
                     what="all 100 completed through the new leader", within=300)
    found = await copies(clients, ns, replicas.hub_id)
    assert sorted(n for _, n, _ in found) == [f"burst-{i:03d}" for i in range(100)]
    await hub_made_nothing(hub, ns, own_jobs={f"burst-{i:03d}" for i in range(100)})
    for name in ("burst-000", "burst-099"):
        held = await hub.request("GET", JOBS.item(name, ns))
        assert held["spec"]["managedBy"] == MANAGED_BY


async def test_with_two_replicas_killing_the_leader_mid_burst_refuses_only_its_calls(
        shared_hub_fleet: FleetState, shared_clients: dict[str, KubeClient],
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Issue 35: with one replica, kill -9 during a 100-workload create refused 57 creates
    (failurePolicy Fail). Two replicas, both serving the webhook and both Ready: the
    leader is killed -9 once the first copies exist. Only the admission calls it held
    then fail: kube-apiserver does not retry a webhook call whose connection breaks
    (v1.35.4: ``apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go:297`` sends
    it once, and ``client-go/rest/request.go:1064`` retries GETs only), so
    no webhook that can be killed mid-call avoids those. None is admitted unheld, a retry
    of each passes at once, the standby takes the lease, and each is dispatched once."""
    async with two_replicas(shared_hub_fleet, shared_clients["hub"], tmp_path, request,
                            probe=False) as replicas:
        refused = await burst_while(replicas, shared_clients, replicas.leader.kill9)
        # the calls in flight on the killed replica (a batch is 10, half of them its):
        # refused, never admitted unheld (5-6 measured; 57 of 100 with one replica)
        assert len(refused) <= 20, refused
        assert all("failed calling webhook" in r for r in refused), refused
        assert replicas.standby.procs[-1].poll() is None, replicas.standby.output()
        print(f"refused while the leader was killed: {len(refused)} of 100")
        for name in [r.split(":")[0] for r in refused]:
            await shared_clients["hub"].request(
                "POST", JOBS.collection(replicas.namespace),
                body=job(name, pods=1, gpus=0, run_s=3))
        await each_ran_once(replicas, shared_clients)


async def test_with_two_replicas_stopping_the_leader_mid_burst_refuses_no_create(
        shared_hub_fleet: FleetState, shared_clients: dict[str, KubeClient],
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Issue 35, the path a rolling update, a drain or an eviction takes: the leader gets
    SIGTERM mid-burst behind a balancer that, like kube-proxy, sends new connections to
    Ready replicas only (probed every 0.5 s) and never retries one that refuses. The
    stopping replica turns unready at once, keeps serving ``webhook.drainSeconds`` with
    answers that close their connections, then closes: no create is refused (before the
    drain, its webhook closed with its control loop and the calls sent to it in the
    probe's window were refused)."""
    async with two_replicas(shared_hub_fleet, shared_clients["hub"], tmp_path, request,
                            probe=True) as replicas:
        leader = replicas.leader.procs[-1]
        refused = await burst_while(replicas, shared_clients, leader.terminate)
        assert refused == [], refused
        assert leader.wait(timeout=30) == 0, replicas.leader.output()
        assert "webhook.draining" in replicas.leader.output()
        await each_ran_once(replicas, shared_clients)


async def _some_copies(clients: dict[str, KubeClient], namespace: str, hub_id: str) -> bool:
    return len(await copies(clients, namespace, hub_id)) >= 5
