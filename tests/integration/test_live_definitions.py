"""Definitions on the hub, live: ``kubectl apply -f`` a ResourceInterface or Karta while the
controller runs (real apiservers, the controller in-process).

Covers, the issue's "done when": a definition for a kind the catalog lacks (XGBoostJob,
with its stand-in CRD) makes a new object of that kind dispatch within seconds, without
restart; ``kubectl get kartas,resourceinterfaces`` shows ACCEPTED; a broken definition
shows Accepted=False with the reason and changes nothing else (a broken update keeps the
last accepted version in use). Also: ``kubectl apply -f definitions/jobset.yaml`` works as
is and overrides the built-in definition (and deleting it falls back); two objects for one
kind are a conflict reported on both; a hostile definition is cut off by the evaluation
bounds on three objects from two namespaces (each object quarantined first), reported
Accepted=False (Quarantined), while other kinds keep dispatching; a
workload whose pod template cannot be a Pod gets Resolved=False (InvalidTemplate) and is
never submitted. Definition objects are cluster-scoped: each test deletes its own.
"""

from __future__ import annotations

import contextlib
import resource
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.devfleet.provision import CRD_PATH
from dispatcher.devfleet.workload_crds import crd_manifest
from dispatcher.kube.errors import Conflict, KubeError
from dispatcher.kube.resources import DISPATCHES, KARTAS, RESOURCE_INTERFACES, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
XGB = ResourceRef(group="kubeflow.org", version="v1", kind="XGBoostJob",
                  plural="xgboostjobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
HOSTILE_PATH = ("reduce (" + ", ".join([".spec"] * 26) + ") as $x ([1]; . + .) | length")


def kubectl(fleet: FleetState, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """The fleet's kubectl against the hub."""
    cmd = [str(ensure_binaries().kubectl), "--kubeconfig",
           fleet.cluster("hub").kubeconfig, *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)
    if check and done.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done


def definition(name: str, *, kind: str = "XGBoostJob", group: str = "kubeflow.org",
               version: str = "v1", fmt: str = "Karta",
               replicas_path: str = ".spec.xgbReplicaSpecs | .[] | (.replicas // 1)"
               ) -> dict[str, Any]:
    """A minimal definition for a kubeflow-style job (the catalog's TFJob one, adapted)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "definitions" / "tfjob.yaml").read_text())
    doc["metadata"] = {"name": name}
    if fmt == "ResourceInterface":
        doc["apiVersion"], doc["kind"] = "optimization.nvidia.com/v1alpha1", fmt
    structure = doc["spec"]["structureDefinition"]
    structure["rootComponent"]["kind"] = {"group": group, "version": version, "kind": kind}
    child = structure["childComponents"][0]
    child["instanceIdPath"] = ".spec.xgbReplicaSpecs | keys[] | ascii_downcase"
    child["specDefinition"]["podTemplateSpecPath"] = ".spec.xgbReplicaSpecs | .[] | .template"
    child["scaleDefinition"]["replicasPath"] = replicas_path
    return doc


def xgboostjob(name: str, namespace: str, *, kind: str = "XGBoostJob",
               api_version: str = "kubeflow.org/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"xgbReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "xgboost", "image": "busybox", "resources": {
                    "limits": {"nvidia.com/gpu": 1}}}]}}}}}}


def jobset(name: str, namespace: str, *, command: list[Any] | None = None
           ) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "w", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}
    if command is not None:
        container["command"] = command
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "worker", "replicas": 1, "template": {
                "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                    "containers": [container]}}}}}]}}


def apply(fleet: FleetState, doc: dict[str, Any]) -> None:
    kubectl(fleet, "apply", "-f", "-", stdin=yaml.safe_dump(doc))


async def standin_crd(h: Harness, *, group: str, kind: str, plural: str) -> None:
    """A stand-in CRD on the hub and both members (kept: other suites never use it)."""
    crd = crd_manifest(group=group, version="v1", kind=kind, plural=plural)
    for client in (h.hub, *h.members.values()):
        with contextlib.suppress(Conflict):
            await client.request("POST", CRD_PATH, body=crd)


async def accepted(h: Harness, ref: ResourceRef, name: str, *, generation: int = 0
                   ) -> dict[str, Any] | None:
    """The object's Accepted condition once the controller wrote it (for ``generation``)."""
    obj = await get_or_none(h.hub, ref.item(name))
    status = (obj or {}).get("status") or {}
    if generation and status.get("observedGeneration") != generation:
        return None
    found = [c for c in status.get("conditions") or () if c.get("type") == "Accepted"]
    return {**found[0], "status_": status} if found else None


async def copy_on_members(h: Harness, ref: ResourceRef, name: str,
                          namespace: str | None = None) -> list[str]:
    found = []
    for member, client in h.members.items():
        try:
            if await get_or_none(client, ref.item(name, namespace or h.namespace)) \
                    is not None:
                found.append(member)
        except KubeError:
            pass
    return found


async def create_when_served(h: Harness, ref: ResourceRef, body: dict[str, Any]) -> Any:
    async def create() -> Any:
        try:
            return await h.hub.request("POST", ref.collection(h.namespace), body=body)
        except KubeError:
            return None
    return await eventually(create, what=f"{body['metadata']['name']} created")


async def submitted_dispatch_of(h: Harness, name: str) -> dict[str, Any] | None:
    """The workload's Dispatch once its status has been written (Submitted or later)."""
    found = await dispatch_of(h, name)
    return found if found is not None and (found.get("status") or {}).get("remote") else None


async def dispatch_of(h: Harness, name: str, namespace: str | None = None
                      ) -> dict[str, Any] | None:
    listed = await h.hub.request("GET", DISPATCHES.collection(namespace or h.namespace))
    for item in listed.get("items") or ():
        if item["spec"]["workload"]["name"] == name:
            return item  # type: ignore[no-any-return]
    return None


@pytest.fixture
def cleanup(dev_fleet: FleetState) -> Iterator[list[str]]:
    """Names of definition objects (``kartas/x``) deleted after the test."""
    names: list[str] = []
    yield names
    for name in names:
        kubectl(dev_fleet, "delete", name, "--ignore-not-found", "--wait=false", check=False)


async def test_a_definition_applied_with_kubectl_makes_a_new_kind_dispatch(
        dev_fleet: FleetState, cleanup: list[str]) -> None:
    async with running(dev_fleet) as h:
        await standin_crd(h, group="kubeflow.org", kind="XGBoostJob", plural="xgboostjobs")
        before = [id(d) for d in h.controller.live.current.definitions]
        assert h.controller.live.current.find("kubeflow.org/v1", "XGBoostJob") is None

        cleanup.append("kartas/xgboost")
        apply(dev_fleet, definition("xgboost"))
        started = time.monotonic()
        await create_when_served(h, XGB, xgboostjob("first", h.namespace))
        landed = await eventually(lambda: copy_on_members(h, XGB, "first"),
                                  what="the XGBoostJob copied to a member")
        assert len(landed) == 1
        assert time.monotonic() - started < 20  # within seconds, no restart
        condition = await eventually(lambda: accepted(h, KARTAS, "xgboost"),
                                     what="Accepted written")
        assert condition["status"] == "True", condition
        assert condition["status_"]["servesKind"] == "XGBoostJob"
        assert condition["status_"].get("overrides") is None
        table = kubectl(dev_fleet, "get", "resourceinterfaces,kartas").stdout
        row = next(line for line in table.splitlines() if "xgboost" in line)
        assert row.split()[1:3] == ["XGBoostJob", "True"], table
        # Submitted (which settles the definition into status) waits for the member's copy
        # watch of the new kind, whose storage may still answer 429 for a moment.
        record = await eventually(lambda: submitted_dispatch_of(h, "first"),
                                  what="its Dispatch, Submitted")
        assert record["status"].get("definition") == "karta/xgboost"

        # A broken new definition: Accepted=False with the reason, nothing else changes.
        with_new = [id(d) for d in h.controller.live.current.definitions]
        assert len(with_new) == len(before) + 1
        broken = definition("broken", kind="OtherJob", group="other.dispatcher.test",
                            fmt="ResourceInterface", replicas_path=".spec | env")
        cleanup.append("resourceinterfaces/broken")
        apply(dev_fleet, broken)
        condition = await eventually(lambda: accepted(h, RESOURCE_INTERFACES, "broken"),
                                     what="Accepted=False written")
        assert condition["status"] == "False" and condition["reason"] == "Invalid"
        assert "env" in condition["message"], condition
        assert [id(d) for d in h.controller.live.current.definitions] == with_new

        # A broken update of the working one keeps its last accepted version in use.
        apply(dev_fleet, definition("xgboost", replicas_path=".spec | $ENV"))
        generation = int((await h.hub.request("GET", KARTAS.item("xgboost")))
                         ["metadata"]["generation"])
        condition = await eventually(
            lambda: accepted(h, KARTAS, "xgboost", generation=generation),
            what="the broken update rejected")
        assert condition["status"] == "False"
        assert "last accepted version stays in use" in condition["message"]
        assert [id(d) for d in h.controller.live.current.definitions] == with_new
        await create_when_served(h, XGB, xgboostjob("second", h.namespace))
        await eventually(lambda: copy_on_members(h, XGB, "second"),
                         what="the second XGBoostJob dispatched meanwhile")

        # Deleted: the kind stops being dispatchable; dispatched ones are left alone.
        kubectl(dev_fleet, "delete", "kartas/xgboost")

        async def gone() -> bool:
            return h.controller.live.current.find("kubeflow.org/v1", "XGBoostJob") is None
        await eventually(gone, what="the kind removed from the catalog")
        await h.hub.request("POST", XGB.collection(h.namespace),
                            body=xgboostjob("third", h.namespace))

        async def says_why() -> str:
            record = await dispatch_of(h, "third")
            conditions = {c["type"]: c for c in ((record or {}).get("status") or {})
                          .get("conditions") or ()}
            resolved = conditions.get("Resolved") or {}
            return str(resolved.get("message") or "") if resolved.get("status") == "False" \
                else ""
        assert "no definition" in await eventually(says_why, what="third: Resolved=False")
        assert await copy_on_members(h, XGB, "third") == []
        assert len(await copy_on_members(h, XGB, "first")) == 1

        async def left_alone() -> dict[str, Any] | None:
            record = await dispatch_of(h, "first")
            for c in ((record or {}).get("status") or {}).get("conditions") or ():
                if c["type"] == "Definition" and c["status"] == "False":
                    return c  # type: ignore[no-any-return]
            return None
        condition = await eventually(left_alone, what="first: says its definition is gone")
        assert condition["reason"] == "DefinitionRemoved"
        assert len(await copy_on_members(h, XGB, "first")) == 1


async def test_catalog_files_apply_as_is_and_override_the_built_in(
        dev_fleet: FleetState, cleanup: list[str]) -> None:
    async with running(dev_fleet) as h:
        cleanup.append("kartas/jobset")
        kubectl(dev_fleet, "apply", "-f", str(ROOT / "definitions" / "jobset.yaml"))
        condition = await eventually(lambda: accepted(h, KARTAS, "jobset"),
                                     what="jobset Accepted")
        assert condition["status"] == "True"
        assert condition["status_"]["overrides"] == "built-in"
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("over", h.namespace))
        record = await eventually(lambda: dispatch_of(h, "over"), what="Dispatch")

        async def by_hub_definition() -> bool:
            record = await dispatch_of(h, "over")
            return ((record or {}).get("status") or {}).get("definition") == "karta/jobset"
        await eventually(by_hub_definition, what="resolved by the hub definition")
        await eventually(lambda: copy_on_members(h, JOBSETS, "over"), what="dispatched")

        # A second object for the same kind: a conflict, reported on both.
        other = yaml.safe_load((ROOT / "definitions" / "jobset.yaml").read_text())
        other["apiVersion"], other["kind"] = "optimization.nvidia.com/v1alpha1", \
            "ResourceInterface"
        cleanup.append("resourceinterfaces/jobset-too")
        other["metadata"] = {"name": "jobset-too"}
        apply(dev_fleet, other)

        async def both_conflict() -> bool:
            a = await accepted(h, KARTAS, "jobset")
            b = await accepted(h, RESOURCE_INTERFACES, "jobset-too")
            return bool(a and b and a["reason"] == b["reason"] == "Conflict")
        await eventually(both_conflict, what="the conflict reported on both")
        builtin = h.controller.live.builtin.find("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert h.controller.live.current.find("jobset.x-k8s.io/v1alpha2", "JobSet") \
            is builtin
        kubectl(dev_fleet, "delete", "resourceinterfaces/jobset-too", "kartas/jobset")

        async def built_in_again() -> bool:
            return h.controller.live.current.find(
                "jobset.x-k8s.io/v1alpha2", "JobSet") is builtin and not any(
                k[0] in ("Karta", "ResourceInterface") for k in
                (h.controller.definitions.effective.verdicts
                 if h.controller.definitions.effective else {}))
        await eventually(built_in_again, what="the built-in JobSet definition back")
        assert record is not None


async def test_a_hostile_definition_is_quarantined_and_others_keep_dispatching(
        dev_fleet: FleetState, cleanup: list[str]) -> None:
    """A definition that breaks its bounds on everyone's objects: each object is
    quarantined first; once three objects from two namespaces did, the definition is
    (``workloads.quarantine``). Other kinds dispatch all the while."""
    group = f"hostile{uuid.uuid4().hex[:6]}.dispatcher.test"
    async with running(dev_fleet, tenants=1) as h:
        await standin_crd(h, group=group, kind="HostileJob", plural="hostilejobs")
        hostile_ref = ResourceRef(group=group, version="v1", kind="HostileJob",
                                  plural="hostilejobs", namespaced=True)
        cleanup.append("kartas/hostile")
        apply(dev_fleet, definition("hostile", kind="HostileJob", group=group,
                                    replicas_path=HOSTILE_PATH))
        condition = await eventually(lambda: accepted(h, KARTAS, "hostile"),
                                     what="hostile Accepted (it lints)")
        assert condition["status"] == "True"
        started = time.monotonic()
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        await create_when_served(h, hostile_ref, xgboostjob(
            "bomb", h.namespace, kind="HostileJob", api_version=f"{group}/v1"))
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("meanwhile", h.namespace))
        reason = await eventually(lambda: resolved_false(h, "bomb"),
                                  what="the first bomb quarantined", within=60)
        assert reason["reason"] == "Quarantined", reason
        found = await accepted(h, KARTAS, "hostile")
        assert found is not None and found["status"] == "True", found  # not yet
        await h.hub.request("POST", hostile_ref.collection(h.namespace), body=xgboostjob(
            "bomb-2", h.namespace, kind="HostileJob", api_version=f"{group}/v1"))
        await eventually(lambda: resolved_false(h, "bomb-2"), what="bomb-2 quarantined", within=60)
        found = await accepted(h, KARTAS, "hostile")
        assert found is not None and found["status"] == "True", found  # one namespace only
        other = h.others[0]
        await h.hub.request("POST", hostile_ref.collection(other), body=xgboostjob(
            "bomb-3", other, kind="HostileJob", api_version=f"{group}/v1"))

        async def quarantined() -> dict[str, Any] | None:
            found = await accepted(h, KARTAS, "hostile")
            return found if found and found["reason"] == "Quarantined" else None
        condition = await eventually(quarantined, what="the hostile definition quarantined",
                                     within=60)
        assert time.monotonic() - started < 90  # cut off by the bounds, not left running
        # the doubling ran in worker processes: this one (the controller's) never grew
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
        assert grown_mb < 200, grown_mb
        assert condition["status"] == "False"
        assert "bound" in condition["message"], condition
        await eventually(lambda: copy_on_members(h, JOBSETS, "meanwhile"),
                         what="a JobSet dispatched meanwhile")
        assert await copy_on_members(h, hostile_ref, "bomb") == []
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("after", h.namespace))
        await eventually(lambda: copy_on_members(h, JOBSETS, "after"),
                         what="a JobSet dispatched after")


async def resolved_false(h: Harness, name: str, namespace: str | None = None
                         ) -> dict[str, Any] | None:
    """The Resolved=False condition of ``name``'s Dispatch, once written."""
    record = await dispatch_of(h, name, namespace)
    for c in ((record or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == "Resolved" and c["status"] == "False":
            return c  # type: ignore[no-any-return]
    return None


async def test_an_invalid_pod_template_is_resolved_false_and_never_submitted(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("bad-template", h.namespace, command=["sh", 7]))

        async def resolved_false() -> dict[str, Any] | None:
            record = await dispatch_of(h, "bad-template")
            for c in ((record or {}).get("status") or {}).get("conditions") or ():
                if c["type"] == "Resolved" and c["status"] == "False":
                    return c  # type: ignore[no-any-return]
            return None
        condition = await eventually(resolved_false, what="Resolved=False")
        assert condition["reason"] == "InvalidTemplate"
        assert "command[1]" in condition["message"], condition
        assert await copy_on_members(h, JOBSETS, "bad-template") == []


def test_every_catalog_file_is_a_manifest_the_hub_accepts(dev_fleet: FleetState) -> None:
    """``kubectl apply -f definitions/`` as is (server-side dry run: nothing is created)."""
    out = kubectl(dev_fleet, "apply", "--dry-run=server", "-f",
                  str(ROOT / "definitions")).stdout
    files = list((ROOT / "definitions").glob("*.yaml"))
    assert out.count("(server dry run)") == len(files) >= 17, out
