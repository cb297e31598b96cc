"""Copies a real member accepts, and copies it refuses, through the hub as a user sends them.

Workloads are created on the hub with the ``kubectl`` built with the control planes
(``kubectl create job ...``, ``kubectl create -f``), so the hub's apiserver defaults them
exactly as a cluster would (a Job gets its generated selector and template labels). Covered:
a plain Job (with and without a GPU), a Deployment and a StatefulSet are copied to a member
whose apiserver accepts them, and a member-side status change reaches the hub object and
the Dispatch; every kind of the catalog (its sample, GPUs taken out so the small test fleet
can hold it) reaches a member; a copy both members refuse with 422 (their CRD is stricter
than the hub's) ends as Failed with the apiserver's message, a ``Rejected`` Warning Event
and a released reservation after one try per member, with no retry loop.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.names import HUB_UID_ANNOTATION, ORIGIN_LABEL
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

CATALOG_SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "workloads" / "catalog"
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
DEPLOYMENTS = ResourceRef(group="apps", version="v1", kind="Deployment", plural="deployments",
                          namespaced=True)
STATEFULSETS = ResourceRef(group="apps", version="v1", kind="StatefulSet",
                           plural="statefulsets", namespaced=True)
EVENTS = ResourceRef(group="", version="v1", kind="Event", plural="events", namespaced=True)
GENERATED_JOB_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                        "batch.kubernetes.io/job-name")


@pytest.fixture(scope="module")
async def harness(dev_fleet: FleetState) -> AsyncIterator[Harness]:
    async with running(dev_fleet) as h:
        yield h


def kubectl(fleet: FleetState, *args: str, stdin: str | None = None) -> str:
    """Run the fleet's kubectl against the hub; fails the test with its stderr."""
    cmd = [str(ensure_binaries().kubectl), "--kubeconfig", fleet.cluster("hub").kubeconfig,
           *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


async def copy_of(h: Harness, ref: ResourceRef, name: str) -> tuple[str, Any] | None:
    """(member, object) of the copy, wherever it landed."""
    for member, client in h.members.items():
        obj = await get_or_none(client, ref.item(name, h.namespace))
        if obj is not None:
            return member, obj
    return None


async def dispatch(h: Harness, kind: str, name: str) -> Any:
    return await h.hub.request("GET", DISPATCHES.item(f"{kind.lower()}-{name}", h.namespace))


async def mirrors(h: Harness, ref: ResourceRef, name: str, *, member: str,
                  status: dict[str, Any], generic: str) -> None:
    """Write ``status`` on the member copy; wait for it on the hub and on the Dispatch."""
    await h.members[member].request("PATCH", ref.item(name, h.namespace, "status"),
                                    body={"status": status}, content_type=JSON_MERGE_PATCH)

    async def seen() -> bool:
        hub_obj = await h.hub.request("GET", ref.item(name, h.namespace))
        record = await dispatch(h, ref.kind, name)
        hub_status = hub_obj.get("status") or {}
        return (all(hub_status.get(k) == v for k, v in status.items())
                and record["status"].get("genericStatus") == generic)

    await eventually(seen, what=f"{ref.kind} {name} status mirrored as {generic}")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_kubectl_create_job_is_copied_and_its_status_mirrored(
        harness: Harness, dev_fleet: FleetState) -> None:
    h = harness
    kubectl(dev_fleet, "-n", h.namespace, "create", "job", "eval", "--image=busybox",
            "--", "true")
    hub_job = await h.hub.request("GET", JOBS.item("eval", h.namespace))
    assert hub_job["spec"]["selector"], "the hub apiserver generates the selector"
    found = await eventually(lambda: copy_of(h, JOBS, "eval"), what="the Job's copy")
    member, copy = found
    assert copy["metadata"]["labels"][ORIGIN_LABEL] == h.controller.settings.hub_id
    assert copy["metadata"]["annotations"][HUB_UID_ANNOTATION] == hub_job["metadata"]["uid"]
    # the member generated its own selector, on its own uid
    assert copy["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == \
        copy["metadata"]["uid"]
    labels = copy["spec"]["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/controller-uid"] == copy["metadata"]["uid"]
    await mirrors(h, JOBS, "eval", member=member, generic="running",
                  status={"startTime": _now(), "active": 1, "ready": 1})


async def test_gpu_job_is_copied(harness: Harness, dev_fleet: FleetState) -> None:
    h = harness
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu-eval"},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "eval", "image": "busybox", "command": ["true"],
                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    kubectl(dev_fleet, "-n", h.namespace, "create", "-f", "-", stdin=json.dumps(manifest))
    member, _ = await eventually(lambda: copy_of(h, JOBS, "gpu-eval"), what="the copy")
    record = await eventually(lambda: _submitted(h, "Job", "gpu-eval"), what="Submitted")
    assert record["status"]["demand"]["gpus"] == 1
    assert record["status"]["decision"]["cluster"] == member


async def _submitted(h: Harness, kind: str, name: str) -> Any:
    record = await dispatch(h, kind, name)
    conditions = {c["type"]: c for c in record.get("status", {}).get("conditions") or ()}
    submitted = conditions.get("Submitted", {})
    return record if submitted.get("status") == "True" else None


async def test_deployment_and_statefulset_are_copied_and_mirrored(
        harness: Harness, dev_fleet: FleetState) -> None:
    h = harness
    kubectl(dev_fleet, "-n", h.namespace, "create", "deployment", "web", "--image=nginx")
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "replicas": 1,
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "postgres"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}]}}
    kubectl(dev_fleet, "-n", h.namespace, "create", "-f", "-", stdin=json.dumps(statefulset))
    deploy_member, _ = await eventually(lambda: copy_of(h, DEPLOYMENTS, "web"),
                                        what="the Deployment's copy")
    sts_member, _ = await eventually(lambda: copy_of(h, STATEFULSETS, "db"),
                                     what="the StatefulSet's copy")
    await mirrors(h, DEPLOYMENTS, "web", member=deploy_member, generic="running", status={
        "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
        "availableReplicas": 1, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "ok", "lastUpdateTime": _now(), "lastTransitionTime": _now()}]})
    await mirrors(h, STATEFULSETS, "db", member=sts_member, generic="running", status={
        "observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "currentReplicas": 1, "updatedReplicas": 1})


def _without_gpus(node: Any) -> Any:
    """The sample with every GPU request and GPU-product constraint taken out."""
    if isinstance(node, dict):
        return {k: _without_gpus(v) for k, v in node.items()
                if k not in ("nvidia.com/gpu", "nvidia.com/gpu.product")}
    if isinstance(node, list):
        return [_without_gpus(v) for v in node
                if not (isinstance(v, dict) and v.get("key") == "nvidia.com/gpu.product")]
    return node


SAMPLE_KINDS = sorted(p.parent.name for p in CATALOG_SAMPLES.glob("*/typical.yaml"))


@pytest.mark.parametrize("kind_dir", SAMPLE_KINDS)
async def test_every_catalog_kind_reaches_a_member(harness: Harness, dev_fleet: FleetState,
                                                   kind_dir: str) -> None:
    h = harness
    sample = yaml.safe_load((CATALOG_SAMPLES / kind_dir / "typical.yaml").read_text())
    sample = _without_gpus(sample)
    name = f"{kind_dir[:40]}-{uuid.uuid4().hex[:4]}"
    sample["metadata"] = {"name": name, "namespace": h.namespace}
    kubectl(dev_fleet, "create", "-f", "-", stdin=json.dumps(sample))
    definition = h.controller.reconciler.catalog.find(sample["apiVersion"], sample["kind"])
    assert definition is not None
    group, _, version = sample["apiVersion"].rpartition("/")
    plural = next(p for g, v, k, p in _served_kinds() if (g, k) == (group, sample["kind"]))
    ref = ResourceRef(group=group, version=version, kind=sample["kind"], plural=plural,
                      namespaced=True)
    await eventually(lambda: copy_of(h, ref, name), what=f"the {sample['kind']} copy")
    await eventually(lambda: _submitted(h, sample["kind"], name), what="Submitted")


def _served_kinds() -> list[tuple[str, str, str, str]]:
    from dispatcher.devfleet.workload_crds import WORKLOAD_KINDS

    return [*WORKLOAD_KINDS, ("batch", "v1", "Job", "jobs"),
            ("batch", "v1", "CronJob", "cronjobs"), ("", "v1", "Pod", "pods"),
            ("apps", "v1", "Deployment", "deployments"),
            ("apps", "v1", "StatefulSet", "statefulsets")]


# -- a copy the members refuse -------------------------------------------------------------

WIDGET_GROUP = f"w{uuid.uuid4().hex[:6]}.dispatcher.test"
WIDGETS = ResourceRef(group=WIDGET_GROUP, version="v1", kind="Widget", plural="widgets",
                      namespaced=True)
WIDGET_DEFINITION = f"""
apiVersion: optimization.nvidia.com/v1alpha1
kind: ResourceInterface
metadata: {{name: widget}}
spec:
  structureDefinition:
    rootComponent:
      name: widget
      kind: {{group: {WIDGET_GROUP}, version: v1, kind: Widget}}
      specDefinition: {{podTemplateSpecPath: .spec.template}}
      scaleDefinition: {{replicasPath: .spec.replicas // 1}}
      statusDefinition:
        phaseDefinition: {{path: .status.phase}}
        statusMappings:
          running: [{{byPhase: Running}}]
"""


def _widget_crd(*, strict: bool) -> dict[str, Any]:
    """Open on the hub; on the members ``spec.size`` must be at most 4 (a stricter release
    of the same CRD, as when hub and member run different operator versions)."""
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if strict:
        schema["properties"] = {"spec": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"size": {"type": "integer", "maximum": 4}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{WIDGET_GROUP}"},
            "spec": {"group": WIDGET_GROUP, "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                               "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": schema}}]}}


async def _install_widgets(h: Harness) -> None:
    from dispatcher.devfleet.provision import CRD_PATH

    clients: dict[str, KubeClient] = {"hub": h.hub, **h.members}
    for name, client in clients.items():
        await client.request("POST", CRD_PATH, body=_widget_crd(strict=name != "hub"))

    async def served() -> bool:
        for client in clients.values():
            try:
                await client.request("GET", WIDGETS.collection("default"))
            except KubeError:  # 404 until established, 429 while storage initialises
                return False
        return True

    await eventually(served, what="the Widget CRDs served")


async def test_a_copy_every_member_refuses_fails_at_once_with_the_message(
        dev_fleet: FleetState) -> None:
    catalog = Catalog.merged(Catalog.builtin(), Catalog(load_text(WIDGET_DEFINITION,
                                                                  source="widget.yaml")))
    async with running(dev_fleet, catalog=catalog) as h:
        await _install_widgets(h)
        widget = {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget",
                  "metadata": {"name": "big", "namespace": h.namespace},
                  "spec": {"size": 8, "replicas": 1, "template": {"spec": {"containers": [
                      {"name": "w", "image": "busybox",
                       "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}}
        created = await h.hub.request("POST", WIDGETS.collection(h.namespace), body=widget)
        uid = created["metadata"]["uid"]

        async def failed() -> Any:
            record = await get_or_none(h.hub, DISPATCHES.item("widget-big", h.namespace))
            return record if (record or {}).get("status", {}).get("phase") == "Failed" \
                else None

        record = await eventually(failed, what="the Dispatch to fail")
        status = record["status"]
        assert sorted(status["excluded"]) == ["member-1", "member-2"]
        assert [a["outcome"] for a in status["attempts"]] == ["rejected", "gave-up"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Submitted"]["reason"] == "Rejected"
        assert "HTTP 422" in conditions["Submitted"]["message"]
        assert "spec.size" in conditions["Submitted"]["message"]
        assert "no other member could take it" in status["failure"]
        for member, client in h.members.items():
            assert await get_or_none(client, WIDGETS.item("big", h.namespace)) is None, member
            reservations = h.controller.fleet.reservations(member)
            assert reservations is None or reservations.get(uid) is None
        # Counted and told after the Failed status is written (the Event in the
        # background): wait for both rather than read them once.
        counter = h.controller.metrics.rejections.labels(member="member-1", code="422")

        async def counted_and_told() -> list[dict[str, Any]] | None:
            if not counter._value.get():
                return None
            events = await h.hub.request("GET", EVENTS.collection(h.namespace))
            return [e for e in events["items"] if e["reason"] == "Rejected"] or None

        rejected = await eventually(counted_and_told,
                                    what="the rejection counted and its Event written")
        assert counter._value.get() == 1
        assert rejected and all(e["type"] == "Warning" for e in rejected)
        assert rejected[0]["involvedObject"]["uid"] == uid
