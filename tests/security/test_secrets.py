"""No credential in any log line or Event of a real dispatch.

The controller runs as a process (debug logging) against the session fleet: a JobSet is
dispatched, its copy marked running on the member, the status mirrored, the JobSet
deleted. Then its whole log and every Event of the namespace are scanned for the fleet's
admin tokens and for lines of its serving and service-account private keys. The chaos
rounds run the same scan after every round (tests/chaos/rounds.py: ``secret_problems``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, ResourceRef

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
RUNNING = {"restarts": 0, "replicatedJobsStatus": [
    {"name": "w", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]}


def fleet_secrets(fleet: FleetState) -> dict[str, str]:
    """Each cluster's admin token and one body line of each of its private keys."""
    out = {f"{c.name} token": c.token for c in fleet.clusters}
    for cluster in fleet.clusters:
        for name in ("serving.key", "sa.key"):
            lines = (Path(cluster.kubeconfig).parent / name).read_text().splitlines()
            if len(lines) > 2:
                out[f"{cluster.name} {name}"] = lines[1]
    return out


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return [what for what, value in secrets.items() if value and value in text]


def test_the_scan_finds_a_planted_token() -> None:
    assert leaks("x Bearer abc123 y", {"t": "abc123"}) == ["t"]
    assert leaks("nothing here", {"t": "abc123"}) == []


async def _eventually(check: Any, what: str, seconds: float = 30.0) -> Any:
    async with asyncio.timeout(seconds):
        while True:
            try:
                value = await check()
            except NotFound:
                value = None
            if value:
                return value
            await asyncio.sleep(0.1)
    raise AssertionError(what)


async def _client(fleet: FleetState, name: str) -> KubeClient:
    data = yaml.safe_load(Path(fleet.cluster(name).kubeconfig).read_text())
    return await KubeClient.from_kubeconfig(data, name=name)


async def test_no_credentials_in_a_dispatch_runs_log_or_events(dev_fleet: FleetState,
                                                              tmp_path: Path) -> None:
    namespace, hub_id = f"sec-{uuid.uuid4().hex[:6]}", f"sec-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "hubId": hub_id, "hub": {"kubeconfig": dev_fleet.cluster("hub").kubeconfig},
        "watch": {"namespaces": [namespace]}, "leaderElection": {"enabled": False},
        "submit": {"createNamespaces": True},
        "server": {"port": 0}, "log": {"level": "debug"},
        "fleet": {"watchMemberClusters": False, "probeInterval": 1, "staticMembers": [
            {"name": m, "kubeconfig": dev_fleet.cluster(m).kubeconfig}
            for m in ("member-1", "member-2")]}}))
    hub = await _client(dev_fleet, "hub")
    members = {m: await _client(dev_fleet, m) for m in ("member-1", "member-2")}
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    log_path = tmp_path / "controller.log"
    with log_path.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "run", "--config",  # noqa: ASYNC220
                                 str(config)], stdout=sink, stderr=subprocess.STDOUT,
                                cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        await hub.request("POST", JOBSETS.collection(namespace), body={
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {"containers": [
                    {"name": "w", "image": "x",
                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}})

        async def placed() -> str | None:
            record = await hub.request("GET", DISPATCHES.item("jobset-train", namespace))
            status = record.get("status") or {}
            return (status.get("decision") or {}).get("cluster") \
                if status.get("phase") not in (None, "Pending", "Placed") else None
        member = await _eventually(placed, "dispatched")
        await members[member].request(
            "PATCH", JOBSETS.item("train", namespace, "status"), body={"status": RUNNING},
            content_type=JSON_MERGE_PATCH)

        async def mirrored() -> bool:
            obj = await hub.request("GET", JOBSETS.item("train", namespace))
            return (obj.get("status") or {}).get("replicatedJobsStatus") == \
                RUNNING["replicatedJobsStatus"]
        await _eventually(mirrored, "status mirrored")
        await hub.request("DELETE", JOBSETS.item("train", namespace))

        async def gone() -> bool:
            try:
                await hub.request("GET", JOBSETS.item("train", namespace))
            except NotFound:
                return True
            return False
        await _eventually(gone, "deleted")
        events = await hub.request("GET", f"/api/v1/namespaces/{namespace}/events")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        for client in (hub, *members.values()):
            await client.close()
    log = log_path.read_text(errors="replace")
    assert '"workload.submitted"' in log and '"status.mirrored"' in log, log[-2000:]
    items = events.get("items") or []
    assert items, "the run recorded no Events: the scan would be vacuous"
    secrets = fleet_secrets(dev_fleet)
    assert leaks(log, secrets) == []
    assert leaks(yaml.safe_dump(items), secrets) == []
