"""The dashboards against a live scrape: ``dispatcher run`` as a process on the dev fleet.

Covers: after one JobSet is dispatched and one waits (Unplaceable: more GPUs on one node
than any member has) until a Node with room is added, the controller's own ``/metrics``
has a sample for every metric name any dashboard query uses (tests/unit/test_dashboards.py
parses them), the labelled series the dispatch made included (placement attempts, queue
wait by reason, member and hub API requests, per-product GPUs, readiness, leader). The
one family the run cannot produce is a member's permanent refusal of a copy
(``dispatcher_copies_rejected_total``): it must be declared by the scrape, not sampled.
Not covered: Grafana itself rendering the JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import NAMESPACES, NODES, ResourceRef
from tests.builders import jobset
from tests.unit.test_dashboards import sample_names, used_metrics

from .conftest import ControllerProcess, eventually

pytestmark = pytest.mark.e2e

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
NOT_SAMPLED = {"dispatcher_copies_rejected_total"}
"""Only a member's permanent refusal counts it; declared by the scrape all the same."""


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


async def client(state: FleetState, name: str) -> KubeClient:
    kubeconfig = yaml.safe_load(Path(state.cluster(name).kubeconfig).read_text())
    return await KubeClient.from_kubeconfig(kubeconfig, name=name)


async def test_every_dashboard_metric_is_in_a_live_scrape(dev_fleet: FleetState,
                                                          controller: ControllerProcess
                                                          ) -> None:
    hub, member = await client(dev_fleet, "hub"), await client(dev_fleet, "member-2")
    ns = controller.namespace
    base = f"http://127.0.0.1:{controller.port}"
    node = f"dash-{uuid.uuid4().hex[:6]}"
    try:
        await hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        controller.start()

        async def ready() -> bool:
            return (await asyncio.to_thread(http_get, f"{base}/readyz"))[0] == 200
        await eventually(ready, what="the controller to lead and sync")
        await hub.request("POST", JOBSETS.collection(ns), body=jobset("small", gpus=1))
        await hub.request("POST", JOBSETS.collection(ns), body=jobset("huge", gpus=48))

        async def scrape() -> str:
            return (await asyncio.to_thread(http_get, f"{base}/metrics"))[1]

        async def parked() -> bool:
            return 'dispatcher_queue_depth{reason="Unplaceable"} 1.0' in await scrape()
        await eventually(parked, what="the huge JobSet parked as Unplaceable")
        gpus = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "48"}
        await member.request("POST", NODES.collection(), body={
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
            "status": {"capacity": gpus, "allocatable": gpus, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "dashboards e2e"}]}})

        async def both_dispatched() -> str | None:
            text = await scrape()
            placed = 'dispatcher_queue_wait_seconds_count{reason="Unplaceable"} 1.0' in text
            submitted = [line for line in text.splitlines()
                         if line.startswith("dispatcher_dispatches_total{")
                         and 'result="submitted"' in line]
            return text if placed and submitted else None
        text = await eventually(both_dispatched, what="both JobSets dispatched", within=60)
    finally:
        with contextlib.suppress(NotFound):
            await member.request("DELETE", NODES.item(node))
        await hub.close()
        await member.close()

    sampled = sample_names(text)
    declared = sample_names(text, declared=True)
    used = used_metrics()
    missing = {name: sorted(where) for name, where in used.items()
               if name not in (declared if name in NOT_SAMPLED else sampled)}
    assert not missing, f"dashboards use metrics the live controller does not export: {missing}"
    assert used.keys() & NOT_SAMPLED == NOT_SAMPLED  # the exception is still needed
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text)
               for s in f.samples]

    def has(name: str, **labels: str) -> bool:
        return any(n == name and labels.items() <= got.items() and value > 0
                   for n, got, value in samples)
    assert has("dispatcher_placement_attempts_total", result="placed")
    assert has("dispatcher_placement_attempts_total", result="Unplaceable")
    assert has("dispatcher_member_ready", member="member-1")
    assert has("dispatcher_leader")
    assert has("dispatcher_hub_api_requests_total", verb="PATCH", code="200")
    assert has("dispatcher_member_api_requests_total", member="member-2", verb="POST",
               code="201")  # the copy, created on the member with room
    assert has("dispatcher_member_api_requests_total", member="member-1", verb="WATCH")
    assert has("dispatcher_reconcile_total", result="success")
    assert all("product" in labels for n, labels, _ in samples
               if n == "dispatcher_member_allocatable_gpus")
