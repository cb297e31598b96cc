"""Gangs follow how the operator creates pods, on real members (kube-scheduler with the
Workload API's GangScheduling plugin, the JobSet and MPI operators, kwok).

The scheduler holds a gang's pods until ``minCount`` of them exist (PreEnqueue counts the
pods it knows, and finished pods leave its informer). A gang spanning pods an operator
creates in stages never reaches that count: before creation stages were declared
(``scaleDefinition.creationStagePath``), a JobSet with ``startupPolicy: InOrder`` sat at
``initializing`` with no pod bound, for ever (issue 34). Each workload here is created on
the hub, pinned to member-1 (whose mechanism is the Workload API) and must run to
completion there; the member's Workload must hold exactly the pod groups its operator can
fill. The last test keeps the old JobSet definition and shows the deadlock, and the
``GangStalled`` condition that makes such a deadlock visible.
"""

from __future__ import annotations

import contextlib
from importlib.resources import files
from typing import Any

import pytest

from dispatcher.control.core.decide import Rules
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_gangs_real import WORKLOADS
from tests.integration.test_real_members import JOBS, MEMBER, pods
from tests.integration.test_real_operators import JOBSETS, MPIJOBS, gpu_pod_spec

pytestmark = pytest.mark.integration

H100 = "NVIDIA-H100-80GB-HBM3"  # member-1: 2 nodes x 8 (tests/integration/fleet.yaml)
PIN = {"dispatcher.io/cluster": MEMBER}
DONE_S = 180.0


def _rjob(name: str, pods_: int, *, completions: int | None = None, gpus: int = 1,
          **extra: Any) -> dict[str, Any]:
    spec = gpu_pod_spec(H100, gpus) if gpus else {
        "restartPolicy": "Never", "containers": [{
            "name": "driver", "image": "registry.invalid/driver:1",
            "readinessProbe": {"exec": {"command": ["true"]}}}]}
    return {"name": name, "replicas": 1, **extra, "template": {"spec": {
        "parallelism": pods_, "completions": completions or pods_, "backoffLimit": 0,
        "template": {"spec": spec}}}}


def jobset(name: str, rjobs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "annotations": PIN},
            "spec": {**spec, "replicatedJobs": rjobs}}


def in_order(name: str) -> dict[str, Any]:
    """The issue's JobSet: a CPU driver (readiness probe) that must be ready before the
    4 one-GPU workers are created."""
    return jobset(name, [_rjob("driver", 1, gpus=0), _rjob("workers", 4)],
                  startupPolicy={"startupPolicyOrder": "InOrder"})


def depends_on(name: str) -> dict[str, Any]:
    """An initializer (2 pods) that must complete before the 3 trainers are created."""
    return jobset(name, [_rjob("init", 2), _rjob("trainer", 3, dependsOn=[
        {"name": "init", "status": "Complete"}])])


def waves(name: str) -> dict[str, Any]:
    """A leader pair and a replicated job of 5 completions, 2 at a time (waves 2, 2, 1)."""
    return jobset(name, [_rjob("leader", 2), _rjob("shards", 2, completions=5)])


def mpijob(name: str) -> dict[str, Any]:
    """The launcher is created only once both workers are ready."""
    worker = gpu_pod_spec(H100)
    worker["containers"] = [{**worker["containers"][0], "name": "worker"}]
    worker.pop("restartPolicy")
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "annotations": PIN},
            "spec": {"slotsPerWorker": 1, "launcherCreationPolicy": "WaitForWorkersReady",
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                             {"name": "launcher", "image": "registry.invalid/mpi:1",
                              "command": ["mpirun", "-n", "2", "train"]}]}}},
                         "Worker": {"replicas": 2, "template": {"spec": worker}}}}}


def wave_job(name: str) -> dict[str, Any]:
    """A plain Job: 5 completions, 2 pods at a time."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": PIN},
            "spec": {"parallelism": 2, "completions": 5, "backoffLimit": 0,
                     "template": {"spec": gpu_pod_spec(H100)}}}


# case -> (resource, builder, the pod groups the member's Workload holds: (name, minCount);
# None: no Workload at all, the pod label selector, a pod per group to check its ref)
CASES: dict[str, tuple[ResourceRef, Any, list[tuple[str, int]] | None, str]] = {
    "jobset-in-order": (JOBSETS, in_order, [("inorder-workers", 4)],
                        "jobset.sigs.k8s.io/jobset-name=inorder"),
    "jobset-depends-on": (JOBSETS, depends_on, [("deps", 2), ("deps-trainer", 3)],
                          "jobset.sigs.k8s.io/jobset-name=deps"),
    "jobset-waves": (JOBSETS, waves, [("wavy", 2)], "jobset.sigs.k8s.io/jobset-name=wavy"),
    "mpijob-wait-for-workers": (MPIJOBS, mpijob, None,
                                "training.kubeflow.org/job-name=launcher-last"),
    "job-waves": (JOBS, wave_job, None, "batch.kubernetes.io/job-name=waves"),
}
NAMES = {"jobset-in-order": "inorder", "jobset-depends-on": "deps", "jobset-waves": "wavy",
         "mpijob-wait-for-workers": "launcher-last", "job-waves": "waves"}


async def _dispatch(h: Harness, kind: str, name: str) -> dict[str, Any]:
    return await get_or_none(h.hub, DISPATCHES.item(f"{kind.lower()}-{name}",
                                                    h.namespace)) or {}


async def _status(h: Harness, kind: str, name: str) -> dict[str, Any]:
    return dict((await _dispatch(h, kind, name)).get("status") or {})


@pytest.mark.parametrize("case", list(CASES))
async def test_a_staged_workload_runs_to_completion_under_the_workload_api(
        real_fleet: FleetState, case: str) -> None:
    ref, build, groups, selector = CASES[case]
    name = NAMES[case]
    async with running(real_fleet, gangs={MEMBER: "workload-api"}) as h:
        member = h.members[MEMBER]
        body = build(name)
        await h.hub.request("POST", ref.collection(h.namespace), body=body)

        async def completed() -> dict[str, Any] | None:
            status = await _status(h, body["kind"], name)
            return status if status.get("genericStatus") == "completed" else None

        status = await eventually(completed, what=f"{case} completed on {MEMBER}",
                                  within=DONE_S)
        assert status["decision"]["cluster"] == MEMBER
        workload = await get_or_none(member, WORKLOADS.item(
            f"{body['kind'].lower()}-{name}", h.namespace))
        if groups is None:
            assert workload is None, workload  # nothing this kind's operator could fill
        else:
            assert status["remote"]["gangMechanism"] == "workload-api"
            assert workload is not None
            assert [(g["name"], g["policy"]["gang"]["minCount"])
                    for g in workload["spec"]["podGroups"]] == groups
            joined = {(p["spec"].get("workloadRef") or {}).get("podGroup")
                      for p in await pods(member, h.namespace, selector)}
            assert {g for g, _ in groups} <= joined, joined
        if case == "mpijob-wait-for-workers":  # the member's CRD kept the policy
            copy = await member.request("GET", ref.item(name, h.namespace))
            assert copy["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
        assert conditions.get("GangStalled") != "True", status["conditions"]
        await h.hub.request("DELETE", ref.item(name, h.namespace))


def _unstaged_jobset() -> Catalog:
    """The built-in catalog with the JobSet definition as it was before issue 34: no
    creation stages, so an in-order JobSet is one gang."""
    text = (files("dispatcher.catalog") / "jobset.yaml").read_text()
    start = text.index("        # Creation stages:")
    end = text.index("        # Pods in waves:")
    kept = text[:start] + text[end:]
    assert "creationStagePath" not in kept
    return Catalog.merged(Catalog.builtin(), Catalog(load_text(kept, source="old.yaml")))


async def test_a_gang_the_operator_never_completes_is_said_on_the_dispatch(
        real_fleet: FleetState) -> None:
    """Without its stages declared, the in-order JobSet is one gang of 5: the member holds
    the driver's pod for workers its operator creates only once the driver is ready. No
    pod is ever bound; the Dispatch says GangStalled with the numbers."""
    async with running(real_fleet, gangs={MEMBER: "workload-api"}, catalog=_unstaged_jobset(),
                       rules=Rules(gang_stall_after=8.0)) as h:
        member = h.members[MEMBER]
        await h.hub.request("POST", JOBSETS.collection(h.namespace), body=in_order("stuck"))

        async def stalled() -> dict[str, Any] | None:
            status = await _status(h, "JobSet", "stuck")
            found = [c for c in status.get("conditions") or ()
                     if c["type"] == "GangStalled" and c["status"] == "True"]
            return found[0] if found else None

        condition = await eventually(stalled, what="GangStalled on the Dispatch", within=90.0)
        assert condition["reason"] == "NoPodBound"
        assert f"no pod of the copy bound on {MEMBER}" in condition["message"]
        assert "for its 4" in condition["message"]
        workload = await member.request("GET", WORKLOADS.item("jobset-stuck", h.namespace))
        assert workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 5
        driver = await pods(member, h.namespace, "jobset.sigs.k8s.io/jobset-name=stuck")
        assert len(driver) == 1 and not driver[0]["spec"].get("nodeName"), driver
        # The JobSet controller counts the driver's Job active (its pod pending): the JobSet
        # reads running (issue 41); its pods, none bound, say it has not got going.
        status = await _status(h, "JobSet", "stuck")
        assert status["genericStatus"] == "running", status
        assert "startedAt" not in (status.get("remote") or {}), status
        with contextlib.suppress(NotFound):
            await h.hub.request("DELETE", JOBSETS.item("stuck", h.namespace))
