"""An invalid MemberCluster spec is visible on its status, on real apiservers (issue 24,
finding 6a: it used to be a log line only).

A MemberCluster whose Secret reference points outside ``fleet.secretNamespace`` gets
``Ready=False`` with reason SpecInvalid and the message naming the field; it is never
connected. A connected member whose spec is edited to an invalid one keeps its connection
(its copies are still mirrored; still reachable, so nothing fails over for an edit) but
is not Ready, so nothing new is placed there; fixing the spec makes it Ready again.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings
from dispatcher.kube import resources
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from tests.integration.test_fleet_health import FAST, eventually, until

pytestmark = pytest.mark.integration

SYSTEM = "dispatcher-system"


@pytest.fixture
async def hub(dev_fleet: FleetState) -> AsyncIterator[KubeClient]:
    config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    async with await KubeClient.from_kubeconfig(config, name="hub") as client:
        yield client


def _member_cluster(name: str, *, secret: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": namespace, "name": secret}}}


async def _ready(hub: KubeClient, name: str) -> dict[str, Any]:
    obj = await hub.request("GET", resources.MEMBER_CLUSTERS.item(name))
    return next((dict(c) for c in (obj.get("status") or {}).get("conditions") or ()
                 if c["type"] == "Ready"), {})


async def test_an_invalid_spec_says_so_on_its_status(hub: KubeClient,
                                                     dev_fleet: FleetState) -> None:
    tag = uuid.uuid4().hex[:6]
    good, bad = f"spec-good-{tag}", f"spec-bad-{tag}"
    text = Path(dev_fleet.cluster("member-1").kubeconfig).read_text()
    await hub.request("POST", resources.SECRETS.collection(SYSTEM), body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": good, "namespace": SYSTEM},
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}})
    created = []
    try:
        for name, namespace in ((good, SYSTEM), (bad, "team-a")):
            await hub.request("POST", resources.MEMBER_CLUSTERS.collection(),
                              body=_member_cluster(name, secret=good, namespace=namespace))
            created.append(name)
        async with Fleet(hub=hub, settings=FleetSettings(**FAST)) as fleet:
            await until(fleet, lambda: good in fleet.names() and fleet.health(good).ready)

            async def refused() -> dict[str, Any] | None:
                ready = await _ready(hub, bad)
                return ready if ready.get("reason") == "SpecInvalid" else None
            condition = await eventually(refused)
            assert condition["status"] == "False"
            assert "kubeconfigSecretRef.namespace 'team-a'" in condition["message"]
            assert "fleet.secretNamespace" in condition["message"]
            assert bad not in fleet.names()  # never connected

            # A connected member's spec turns invalid: kept, reachable, not Ready.
            await hub.request("PATCH", resources.MEMBER_CLUSTERS.item(good), body={
                "spec": {"kubeconfigSecretRef": {"namespace": "team-a"}}},
                content_type=JSON_MERGE_PATCH)
            await until(fleet, lambda: fleet.health(good).reason == "SpecInvalid")
            health = fleet.health(good)
            assert not health.ready and health.reachable is True
            assert "last valid spec" in health.message
            assert not next(s for s in fleet.snapshots() if s.name == good).ready

            async def written() -> bool:
                ready = await _ready(hub, good)
                return ready.get("reason") == "SpecInvalid" and ready["status"] == "False"
            await eventually(written)

            # Fixed: Ready again, the status says so.
            await hub.request("PATCH", resources.MEMBER_CLUSTERS.item(good), body={
                "spec": {"kubeconfigSecretRef": {"namespace": SYSTEM}}},
                content_type=JSON_MERGE_PATCH)
            await until(fleet, lambda: fleet.health(good).ready)

            async def fixed() -> bool:
                return (await _ready(hub, good)).get("status") == "True"
            await eventually(fixed)
    finally:
        for name in created:
            await hub.request("DELETE", resources.MEMBER_CLUSTERS.item(name))
        await hub.request("DELETE", resources.SECRETS.item(good, SYSTEM))
