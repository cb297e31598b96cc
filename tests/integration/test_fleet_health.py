"""Member health, credentials and registration through the fleet runtime, on real apiservers.

Covers: a member whose apiserver stops turns Reachable=False with a reason within the
configured timeout, keeps its first-loss time across failed reconnects, and recovers by
itself when the apiserver is back (same connection object); Secrets with a broken kubeconfig,
a rejected token, or no Secret at all give Ready=False with the right reason on the
MemberCluster status, nothing crashes, and the test token appears in no log line; fixing the
Secret reconnects without a restart; ``dispatcher clusters add`` then ``dispatcher clusters``
shows the member with its capacity, and ``remove`` deletes what ``add`` created.
Not covered here: capacity arithmetic (test_fleet_capacity.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube import errors, resources
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import GroupVersionKind

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {
    "probe_interval_s": 0.5, "unreachable_after_s": 3.0, "request_timeout_s": 2.0,
    "reconnect_initial_s": 0.2, "reconnect_max_s": 1.0, "status_min_interval_s": 0.2,
    "status_heartbeat_s": 2.0}
TOKEN = "sekret-test-token-5f0c2e"


async def until(fleet: Fleet, check: Callable[[], bool], *, within: float = 30.0) -> None:
    """Wait (event-driven, on the fleet's change pulse) until ``check()`` holds."""
    async with asyncio.timeout(within):
        seen = fleet.version
        while not check():
            seen = await fleet.wait_changed(seen)


async def eventually(check: Callable[[], Any], *, within: float = 30.0) -> Any:
    """Poll an async ``check()`` (for state on the hub) until it returns a truthy value."""
    async with asyncio.timeout(within):
        while not (result := await check()):  # noqa: ASYNC110 - polls the hub over HTTP
            await asyncio.sleep(0.2)
        return result


def _start_planes(root: Path) -> tuple[ControlPlanes, FleetState]:
    """A private control plane; retried because devfleet's start check can race a process
    that has not finished exec (empty /proc/PID/cmdline reads as "exited")."""
    planes = ControlPlanes(root=root, binaries=ensure_binaries())
    for attempt in range(5):
        try:
            return planes, planes.up(names=["solo"])
        except RuntimeError:
            planes.down()
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


async def test_outage_turns_unreachable_then_recovers_without_restart(tmp_path: Path) -> None:
    planes, state = await asyncio.to_thread(_start_planes, tmp_path / "cp")
    settings = FleetSettings(static_members=(
        StaticMember(name="solo", kubeconfig=state.cluster("solo").kubeconfig),),
        watch_member_clusters=False, **FAST)
    try:
        with capture_logs() as logs:
            async with Fleet(hub=None, settings=settings) as fleet:
                await until(fleet, lambda: fleet.health("solo").ready)
                conn = fleet.connection("solo")
                await asyncio.to_thread(planes.stop_cluster, "solo")
                await until(fleet, lambda: not fleet.health("solo").ready, within=10)
                lost = fleet.health("solo")
                assert lost.first_loss is not None
                assert fleet.client_or_none("solo") is None
                await until(fleet, lambda: fleet.health("solo").reachable is False,
                            within=settings.unreachable_after_s + 10)
                down = fleet.health("solo")
                assert down.reason == "ConnectionRefused"
                assert down.first_loss == lost.first_loss  # kept across reconnect attempts
                snapshot = fleet.snapshots()[0]
                assert not snapshot.ready
                assert snapshot.not_ready_reason.startswith("ConnectionRefused: ")
                await asyncio.to_thread(planes.start_cluster, "solo")
                await until(fleet, lambda: fleet.health("solo").ready, within=60)
                assert fleet.connection("solo") is conn
                assert fleet.health("solo").first_loss is None
                assert fleet.health("solo").reachable is True
    finally:
        await asyncio.to_thread(planes.down)
    events = [e["event"] for e in logs if e.get("member") == "solo"]
    assert events.index("member.connected") < events.index("member.failing") \
        < events.index("member.unreachable") < events.index("member.recovered")
    assert "member.lost" not in events  # that line is per workload, from the control loop


def _kubeconfig(*, server: str, ca_pem: str, token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {
                "server": server,
                "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def _secret(name: str, text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "dispatcher-system"},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


def _member_cluster(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "dispatcher-system", "name": secret}}}


@pytest.fixture
async def hub(dev_fleet: FleetState) -> AsyncIterator[KubeClient]:
    config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    async with await KubeClient.from_kubeconfig(config, name="hub") as client:
        yield client


async def _ready_condition(hub: KubeClient, name: str) -> dict[str, Any]:
    obj = await hub.request("GET", resources.MEMBER_CLUSTERS.item(name))
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition["type"] == "Ready":
            return dict(condition)
    return {}


async def test_bad_credentials_give_reasons_and_never_log_the_token(
        hub: KubeClient, dev_fleet: FleetState, caplog: pytest.LogCaptureFixture) -> None:
    tag = uuid.uuid4().hex[:6]
    member = dev_fleet.cluster("member-1")
    ca_pem = Path(member.ca_file).read_text()
    wrong = yaml.safe_dump(_kubeconfig(server=member.server, ca_pem=ca_pem, token=TOKEN))
    cases = {  # member name -> (secret text or None for no Secret, expected reason)
        f"bad-yaml-{tag}": (f"token: {TOKEN}\n  broken: [", "KubeconfigInvalid"),
        f"no-context-{tag}": (yaml.safe_dump({**_kubeconfig(server=member.server,
                                                            ca_pem=ca_pem, token=TOKEN),
                                              "current-context": "missing"}),
                              "KubeconfigInvalid"),
        f"wrong-token-{tag}": (wrong, "AuthenticationFailed"),
        f"no-secret-{tag}": (None, "SecretMissing"),
    }
    created: list[str] = []
    try:
        for name, (text, _) in cases.items():
            if text is not None:
                await hub.request("POST", resources.SECRETS.collection("dispatcher-system"),
                                  body=_secret(name, text))
            await hub.request("POST", resources.MEMBER_CLUSTERS.collection(),
                              body=_member_cluster(name, name))
            created.append(name)
        caplog.set_level(logging.DEBUG)
        with capture_logs() as logs:
            async with Fleet(hub=hub, settings=FleetSettings(**FAST)) as fleet:
                await until(fleet, lambda: all(
                    name in fleet.names() and fleet.health(name).reason == reason
                    for name, (_, reason) in cases.items()))
                for name, (_, reason) in cases.items():
                    async def written(name: str = name, reason: str = reason) -> bool:
                        ready = await _ready_condition(hub, name)
                        return ready.get("status") == "False" and ready.get("reason") == reason
                    await eventually(written)
                assert fleet.health(f"wrong-token-{tag}").reachable is True
                assert fleet.health(f"no-secret-{tag}").reachable is None
                # Fix one Secret: the member reconnects by itself, no restart.
                good = Path(member.kubeconfig).read_text()
                await hub.request(
                    "PATCH", resources.SECRETS.item(f"wrong-token-{tag}", "dispatcher-system"),
                    body={"data": {"kubeconfig": base64.b64encode(good.encode()).decode()}},
                    content_type=JSON_MERGE_PATCH)
                await until(fleet, lambda: fleet.health(f"wrong-token-{tag}").ready)

                async def fixed() -> bool:
                    ready = await _ready_condition(hub, f"wrong-token-{tag}")
                    return ready.get("status") == "True"
                await eventually(fixed)
                obj = await hub.request("GET",
                                        resources.MEMBER_CLUSTERS.item(f"wrong-token-{tag}"))
                assert obj["status"]["capacity"]["gpus"]["allocatable"] >= 20
                assert obj["status"]["kubernetesVersion"].startswith("v1.")
    finally:
        for name in created:
            await hub.request("DELETE", resources.MEMBER_CLUSTERS.item(name))
            if cases[name][0] is not None:
                await hub.request("DELETE", resources.SECRETS.item(name, "dispatcher-system"))
    assert any(e["event"] == "member.kubeconfig_invalid" for e in logs)
    assert any(e["event"] == "member.secret_missing" for e in logs)
    assert not [e for e in logs if e["event"] == "task.crashed"]
    for entry in logs:
        assert TOKEN not in repr(entry)
    for record in caplog.records:
        assert TOKEN not in record.getMessage()
        assert TOKEN not in repr(record.args)
    assert TOKEN not in caplog.text


def test_clusters_add_then_list_then_remove(dev_fleet: FleetState,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from dispatcher.cli import main

    name = f"added-{uuid.uuid4().hex[:6]}"
    hub_flags = ["--hub-kubeconfig", dev_fleet.cluster("hub").kubeconfig]
    member = dev_fleet.cluster("member-2")
    assert main(["clusters", "add", name, "--kubeconfig", member.kubeconfig,
                 "--label", "region=test", *hub_flags]) == 0
    assert f"membercluster/{name} registered" in capsys.readouterr().out
    assert main(["clusters", "-o", "json", *hub_flags]) == 0
    items = {i["metadata"]["name"]: i for i in json.loads(capsys.readouterr().out)["items"]}
    assert items[name]["metadata"]["labels"] == {"region": "test"}
    assert items[name]["spec"]["kubeconfigSecretRef"]["name"] == f"{name}-kubeconfig"

    async def connect_and_report() -> None:
        config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
        async with await KubeClient.from_kubeconfig(config, name="hub") as hub, \
                Fleet(hub=hub, settings=FleetSettings(**FAST)) as fleet:
            await until(fleet, lambda: name in fleet.names() and fleet.health(name).ready)

            async def written() -> bool:
                return (await _ready_condition(hub, name)).get("status") == "True"
            await eventually(written)

    asyncio.run(connect_and_report())
    capsys.readouterr()  # the fleet's own log lines
    assert main(["clusters", "-o", "wide", *hub_flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert header == ["NAME", "READY", "NODES", "GPUS", "FREE", "LARGEST-BLOCK", "PRODUCTS",
                      "KINDS", "GANG", "LAST-SEEN", "VERSION", "QUEUEING", "REASON"]
    row = next(line.split() for line in lines if line.startswith(name + " "))
    assert row[:3] == [name, "True", "5"]
    assert int(row[3]) == 4 * 4 + 8  # member-2: four 4-GPU nodes and one 8-GPU tainted node
    assert row[-2:] == ["none", "Connected"]  # no Kueue served there, none declared
    assert main(["clusters", "remove", name, *hub_flags]) == 0
    assert main(["clusters", "remove", name, *hub_flags]) == 1

    async def gone() -> None:
        config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
        async with await KubeClient.from_kubeconfig(config, name="hub") as hub:
            with pytest.raises(errors.NotFound):
                await hub.request("GET", resources.SECRETS.item(f"{name}-kubeconfig",
                                                                "dispatcher-system"))

    asyncio.run(gone())


async def test_stop_of_a_connected_fleet_is_bounded_and_leaves_no_tasks(
        dev_fleet: FleetState) -> None:
    """Eight connections to the two real members (each registered four times), all Ready,
    with their informers, probes and discovery loops running: stop() returns within a bound
    and no task of the fleet is left pending (no task is cancelled by name)."""
    current = asyncio.current_task()
    before = {t for t in asyncio.all_tasks() if t is not current}
    members = tuple(StaticMember(name=f"{cluster}-{i}",
                                 kubeconfig=dev_fleet.cluster(cluster).kubeconfig)
                    for cluster in ("member-1", "member-2") for i in range(4))
    fleet = Fleet(hub=None, settings=FleetSettings(static_members=members, **FAST),
                  kinds=[GroupVersionKind.of("batch/v1", "Job")])
    await fleet.start()
    try:
        # fleet.health() says DuplicateCluster for the second name of a cluster; each
        # connection's own health is Ready once its informers listed.
        await until(fleet, lambda: all(fleet.connection(m.name).health.ready
                                       for m in members))
    finally:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(5.0):
            await fleet.stop()
    assert loop.time() - started < 5.0
    left = {t for t in asyncio.all_tasks() if t is not current and not t.done()} - before
    assert left == set(), [t.get_name() for t in left]
