"""The shared hub's webhook, called by a real kube-apiserver over TLS.

The controller's ``HubWebhook`` serves on loopback with its self-managed certificates (a CA
and serving pair it keeps in a Secret on the hub) and registers its
MutatingWebhookConfiguration from the catalog; workloads are then created with ``kubectl``
as a user would. Covered: a Job held by ``spec.managedBy``, a Deployment paused and marked,
an MPIJob's dropped hold put back on update, a LeaderWorkerSet refused with the reason, a
namespace out of scope untouched, a restarted webhook reusing the stored certificate.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from dispatcher.control.core.hubhold import HoldScope
from dispatcher.control.settings import WebhookSettings
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import NAMESPACES, SECRETS
from dispatcher.shell.webhook import WEBHOOK_CONFIGURATIONS, HubWebhook
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.holds import HOLD_ANNOTATION, MANAGED_BY
from tests.integration.harness import kubectl

pytestmark = pytest.mark.integration


class Hub:
    def __init__(self, client: KubeClient, namespace: str, system: str, other: str,
                 settings: WebhookSettings) -> None:
        self.client, self.namespace, self.system = client, namespace, system
        self.other, self.settings = other, settings

    def webhook(self) -> HubWebhook:
        return HubWebhook(hub=self.client, settings=self.settings, namespace=self.system,
                          catalog=Catalog.builtin,
                          scope=HoldScope(namespaces=(self.namespace,),
                                          skip=frozenset({self.system})))


@pytest.fixture
async def hub(dev_fleet: FleetState) -> AsyncIterator[Hub]:
    kubeconfig = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    client = await KubeClient.from_kubeconfig(kubeconfig, name="hub")
    suffix = uuid.uuid4().hex[:6]
    names = (f"team-{suffix}", f"dispatcher-{suffix}", f"other-{suffix}")
    for name in names:
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    port = free_port()
    settings = WebhookSettings(address="127.0.0.1", port=port,
                               url=f"https://127.0.0.1:{port}",
                               configuration=f"dispatcher-{suffix}")
    try:
        yield Hub(client, names[0], names[1], names[2], settings)
    finally:
        with contextlib.suppress(NotFound):
            await client.request("DELETE", WEBHOOK_CONFIGURATIONS.item(settings.configuration))
        await client.close()


async def create(fleet: FleetState, namespace: str, obj: dict[str, object], *,
                 check: bool = True) -> tuple[int, str]:
    """kubectl create, off the event loop (the webhook answers on this loop)."""
    done = await asyncio.to_thread(kubectl, fleet, "create", "-n", namespace, "-o", "json",
                                   "-f", "-", stdin=yaml.safe_dump(obj), check=check)
    return done.returncode, done.stdout if done.returncode == 0 else done.stderr


def job(name: str) -> dict[str, object]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["true"]}]}}}}


async def test_the_hub_calls_the_webhook_and_each_kind_is_held_or_refused(
        dev_fleet: FleetState, hub: Hub) -> None:
    stop = await hub.webhook().start()
    try:
        registered = await hub.client.request(
            "GET", WEBHOOK_CONFIGURATIONS.item(hub.settings.configuration))
        (hook,) = registered["webhooks"]
        assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["caBundle"]
        assert any("jobs" in r["resources"] for r in hook["rules"])

        _, out = await create(dev_fleet, hub.namespace, job("eval"))
        assert json.loads(out)["spec"]["managedBy"] == MANAGED_BY

        _, out = await create(dev_fleet, hub.other, job("elsewhere"))
        assert "managedBy" not in json.loads(out)["spec"]  # not a dispatched namespace

        _, out = await create(dev_fleet, hub.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "containers": [{"name": "c", "image": "nginx"}]}}}})
        deployment = json.loads(out)
        assert deployment["spec"]["paused"] is True
        assert deployment["metadata"]["annotations"][HOLD_ANNOTATION] == ".spec.paused"

        code, err = await create(dev_fleet, hub.namespace, {
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"}, "spec": {"leaderWorkerTemplate": {
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}},
            check=False)
        assert code != 0 and "denied the request" in err and "dedicated hub" in err

        _, out = await create(dev_fleet, hub.namespace, {
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "mpi"},
            "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i"}]}}}}}})
        assert json.loads(out)["spec"]["runPolicy"]["managedBy"] == MANAGED_BY
        dropped = await asyncio.to_thread(
            kubectl, dev_fleet, "patch", "-n", hub.namespace, "mpijob", "mpi", "--type=json",
            "-o", "json", "-p", '[{"op":"remove","path":"/spec/runPolicy/managedBy"}]')
        assert json.loads(dropped.stdout)["spec"]["runPolicy"]["managedBy"] == MANAGED_BY
    finally:
        await stop()


async def test_a_restarted_webhook_keeps_its_certificate(dev_fleet: FleetState,
                                                         hub: Hub) -> None:
    stop = await hub.webhook().start()
    await stop()
    secret = await hub.client.request("GET", SECRETS.item(hub.settings.secret_name,
                                                          hub.system))
    again = hub.webhook()
    stop = await again.start()
    try:
        reread = await hub.client.request("GET", SECRETS.item(hub.settings.secret_name,
                                                              hub.system))
        assert reread["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]
        assert again.ca_pem == base64.b64decode(secret["data"]["ca.crt"])
        _, out = await create(dev_fleet, hub.namespace, job("again"))
        assert json.loads(out)["spec"]["managedBy"] == MANAGED_BY
    finally:
        await stop()
