"""Serving workloads end to end on real members with their own operators: KServe v0.15.2
(RawDeployment) and Knative Serving v0.50.0 (controller + webhook, no networking layer).

An InferenceService created on the hub (the real CRD, no operator there) is copied to the
pinned member; the member's KServe defaults and validates it (webhooks), resolves its
model format to the ``kserve-huggingfaceserver`` ClusterServingRuntime, and makes the
predictor Deployment, whose pod KServe's pod webhook gives its storage-initializer;
kube-scheduler binds it to a node of the requested GPU product and kwok runs it. KServe
then calls it Ready (RawDeployment: a Deployment available and an Ingress object written
are all it asks; nothing downloads a model or routes traffic here), the hub Dispatch says
``running`` and the hub object's status is the copy's.

A Knative Service goes the same way as far as Knative takes it without a networking layer
and without its autoscaler: Configuration -> Revision -> Deployment at its initial scale,
its pod (user container + queue-proxy) on the GPU product's nodes. The Revision then waits
for its PodAutoscaler, which nothing reconciles (no autoscaler: its scraper would call pod
IPs), so the Configuration and the Route wait for it (``RevisionMissing``), Ready stays
Unknown and the hub shows ``initializing`` with Knative's own conditions. (Past that, the
Route would wait for an Ingress that no networking layer reconciles.)

Deleting each on the hub removes the copy and, through the member's garbage collector,
its pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_dispatch_real_operators import PIN
from tests.integration.test_real_members import MEMBER, condition, pods
from tests.integration.test_real_operators import product_nodes

pytestmark = pytest.mark.integration

WITHIN_S = 120.0
ISVCS = ResourceRef(group="serving.kserve.io", version="v1beta1", kind="InferenceService",
                    plural="inferenceservices", namespaced=True)
KSVCS = ResourceRef(group="serving.knative.dev", version="v1", kind="Service",
                    plural="services", namespaced=True)
REVISIONS = ResourceRef(group="serving.knative.dev", version="v1", kind="Revision",
                        plural="revisions", namespaced=True)
PODAUTOSCALERS = ResourceRef(group="autoscaling.internal.knative.dev", version="v1alpha1",
                             kind="PodAutoscaler", plural="podautoscalers", namespaced=True)
DEPLOYMENTS = ResourceRef(group="apps", version="v1", kind="Deployment",
                          plural="deployments", namespaced=True)


async def _record(h: Harness, kind: str, name: str) -> dict[str, Any]:
    record = await get_or_none(h.hub, DISPATCHES.item(f"{kind.lower()}-{name}", h.namespace))
    return dict(record or {})


async def _delete_everywhere(h: Harness, member: KubeClient, ref: ResourceRef,
                             selector: str) -> None:
    """Delete the hub object ``serve``, then wait for its member copy and pods to go."""
    await h.hub.request("DELETE", ref.item("serve", h.namespace))

    async def gone() -> bool:
        try:
            await member.request("GET", ref.item("serve", h.namespace))
        except NotFound:
            return not await pods(member, h.namespace, selector)
        return False

    await eventually(gone, what="the copy and its pods gone", within=WITHIN_S)


def inferenceservice(product: str) -> dict[str, Any]:
    """A Hugging Face model on one GPU of ``product``, as a user writes it (no runtime
    named: KServe picks the ClusterServingRuntime that supports the format)."""
    resources = {"limits": {GPU_RESOURCE: "1", "cpu": "1", "memory": "4Gi"},
                 "requests": {"cpu": "1", "memory": "4Gi"}}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "serve", "annotations": PIN},
            "spec": {"predictor": {
                "nodeSelector": {GPU_PRODUCT_LABEL: product},
                "model": {"modelFormat": {"name": "huggingface"},
                          "storageUri": "hf://Qwen/Qwen2.5-0.5B-Instruct",
                          "resources": resources}}}}


async def test_a_hub_inferenceservice_is_served_by_kserve_on_a_real_member(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    product, nodes = product_nodes(fleet_spec)
    async with running(real_fleet) as h:
        await h.hub.request("POST", ISVCS.collection(h.namespace), body=inferenceservice(product))
        member = h.members[MEMBER]
        selector = "serving.kserve.io/inferenceservice=serve"
        try:

            async def mirrored_ready() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
                record = await _record(h, "InferenceService", "serve")
                if (record.get("status") or {}).get("genericStatus") != "running":
                    return None
                hub_obj = await h.hub.request("GET", ISVCS.item("serve", h.namespace))
                copy = await member.request("GET", ISVCS.item("serve", h.namespace))
                ready = condition(copy, "Ready")
                if ready is None or ready["status"] != "True" or hub_obj.get("status") != copy[
                        "status"]:
                    return None
                # Ready can come a status write before the model's transition says UpToDate.
                if ((copy["status"].get("modelStatus") or {}).get("transitionStatus")
                        != "UpToDate"):
                    return None
                # Ready follows the Deployment's counts, which can run ahead of the pod's own
                # phase: wait for both.
                # A rollout's old pod still Running while it terminates is not the served one.
                found = [p for p in await pods(member, h.namespace, selector)
                         if not p["metadata"].get("deletionTimestamp")]
                if not found or any(p["status"].get("phase") != "Running" for p in found):
                    return None
                return dict(copy), found

            copy, made = await eventually(mirrored_ready,
                                          what="the InferenceService Ready on the hub, its pod "
                                               "Running", within=WITHIN_S)
            status = copy["status"]
            assert status["deploymentMode"] == "RawDeployment"
            assert status["modelStatus"]["transitionStatus"] == "UpToDate"
            assert condition(copy, "PredictorReady")["status"] == "True"  # type: ignore[index]
            hub_uid = (await h.hub.request("GET", ISVCS.item("serve", h.namespace)))[
                "metadata"]["uid"]
            assert copy["metadata"]["labels"][HUB_UID_LABEL] == hub_uid
            record = await _record(h, "InferenceService", "serve")
            assert record["status"]["demand"]["pods"] == len(made) == 1  # the catalog's count
            (pod,) = made
            assert pod["status"]["phase"] == "Running"
            assert pod["spec"]["nodeName"] in nodes
            assert pod["metadata"]["labels"]["component"] == "predictor"
            main = next(c for c in pod["spec"]["containers"] if c["name"] == "kserve-container")
            assert main["image"] == "kserve/huggingfaceserver:latest-gpu"  # from the runtime
            assert main["resources"]["limits"][GPU_RESOURCE] == "1"
            # KServe's pod webhook ran: the model would be fetched by its storage-initializer
            assert [c["name"] for c in pod["spec"].get("initContainers", [])] == [
                "storage-initializer"]
        finally:  # never leave the pods to the next test (they hold the node's GPUs)
            await _delete_everywhere(h, member, ISVCS, selector)


def knative_service(product: str) -> dict[str, Any]:
    """One GPU of ``product``; the image is from a registry Knative skips resolving here."""
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "serve", "annotations": PIN},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {"nodeSelector": {GPU_PRODUCT_LABEL: product},
                         "containers": [{"image": "ghcr.io/example/serve:1",
                                         "ports": [{"containerPort": 8080}],
                                         "resources": {"limits": {GPU_RESOURCE: "1"}}}]}}}}


async def test_a_hub_knative_service_gets_its_revision_pods_on_a_real_member(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    product, nodes = product_nodes(fleet_spec)
    async with running(real_fleet) as h:
        await h.hub.request("POST", KSVCS.collection(h.namespace), body=knative_service(product))
        try:
            member = h.members[MEMBER]
            selector = "serving.knative.dev/service=serve"

            async def revision_pods() -> list[dict[str, Any]] | None:
                found = [p for p in await pods(member, h.namespace, selector)
                         if not p["metadata"].get("deletionTimestamp")]
                up = [p for p in found if p["status"].get("phase") == "Running"]
                return found if found and len(up) == len(found) else None

            made = await eventually(revision_pods, what="the Revision's pods running",
                                    within=WITHIN_S)
            (pod,) = made
            assert pod["spec"]["nodeName"] in nodes
            assert pod["metadata"]["labels"]["serving.knative.dev/revision"] == "serve-00001"
            assert sorted(c["name"] for c in pod["spec"]["containers"]) == [
                "queue-proxy", "user-container"]
            user = next(c for c in pod["spec"]["containers"] if c["name"] == "user-container")
            assert user["resources"]["limits"][GPU_RESOURCE] == "1"
            deployment = await member.request("GET", DEPLOYMENTS.item("serve-00001-deployment",
                                                                      h.namespace))
            assert deployment["spec"]["replicas"] == 1
            # Where Knative stops without its autoscaler: the Revision waits for its
            # PodAutoscaler, which nothing here reconciles (no status at all). Its status can
            # still say ResolvingDigests (the first pass) after the pods run, and Deploying
            # before ContainerHealthy turns True: wait for both.
            async def deploying_revision() -> dict[str, Any] | None:
                found: dict[str, Any] = await member.request(
                    "GET", REVISIONS.item("serve-00001", h.namespace))
                ready, healthy = condition(found, "Ready"), condition(found, "ContainerHealthy")
                return found if ready is not None and ready.get("reason") == "Deploying" \
                    and healthy is not None and healthy["status"] == "True" else None

            revision = await eventually(deploying_revision,
                                        what="the Revision Deploying, its container healthy",
                                        within=WITHIN_S)
            deploying = condition(revision, "Ready")
            assert deploying is not None and deploying["status"] == "Unknown"
            assert condition(revision, "ContainerHealthy")["status"] == "True"  # type: ignore[index]
            autoscaler = await member.request(
                "GET", PODAUTOSCALERS.item("serve-00001", h.namespace))
            assert not (autoscaler.get("status") or {}).get("conditions")

            async def mirrored() -> dict[str, Any] | None:
                record = await _record(h, "Service", "serve")
                hub_obj = await h.hub.request("GET", KSVCS.item("serve", h.namespace))
                copy = await member.request("GET", KSVCS.item("serve", h.namespace))
                routes = condition(copy, "RoutesReady")
                if ((record.get("status") or {}).get("genericStatus") != "initializing"
                        or routes is None or hub_obj.get("status") != copy.get("status")):
                    return None
                return dict(copy)

            copy = await eventually(mirrored, what="the hub Service initializing, mirrored",
                                    within=WITHIN_S)
            # Knative's own words for "no networking layer here"
            ready = condition(copy, "Ready")
            assert ready is not None and ready["status"] == "Unknown"
            assert ready.get("reason") == "RevisionMissing"  # Configuration waits for the Revision
            assert condition(copy, "RoutesReady")["status"] == "Unknown"  # type: ignore[index]
            assert copy["status"]["latestCreatedRevisionName"] == "serve-00001"
            record = await _record(h, "Service", "serve")
            assert record["status"]["demand"]["pods"] == 1
        finally:  # never leave the pods to the next test (they hold the node's GPUs)
            await _delete_everywhere(h, member, KSVCS, selector)
