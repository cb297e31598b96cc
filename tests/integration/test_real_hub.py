"""The dev fleet's hub is a real hub, in both modes (issue 23).

Dedicated hub (``dev_fleet``, ``real_fleet``): kube-apiserver plus a kube-controller-manager
with only ``DEDICATED_CONTROLLERS``, each controller as its own ``kube-system``
ServiceAccount; deleting a namespace empties it and the namespace goes; the garbage
collector deletes a Dispatch whose Job is deleted with background propagation (and orphans
it on a plain ``DELETE`` of a batch/v1 Job: that API version's default is to orphan), and
an object whose owner never existed; a Job gets no pod and no status; a Pod is admitted
as on a real cluster (ServiceAccount admission) but never scheduled.

Shared hub (``shared_hub_fleet``): every member controller, kube-scheduler, kwok with the
fleet file's ``hub:`` Nodes and the operators; a Job created on the hub with no dispatcher
running gets its pod bound to a hub Node and succeeds there; the JobSet webhook defaults a
JobSet on the hub (the same JobSet on a dedicated hub, with the same real CRD, is not).

Not covered here: the dispatcher on either hub (the controller's suites).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest

from dispatcher.control.core.names import FINALIZER
from dispatcher.control.core.record import dispatch_body, dispatch_name
from dispatcher.devfleet.controlplane import DEDICATED_CONTROLLERS, FleetState
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.fleet.fleetfile import FleetSpec, node_manifests

pytestmark = pytest.mark.integration

T = TypeVar("T")
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
DISPATCHES = "/apis/dispatcher.io/v1alpha1/namespaces/{ns}/dispatches"
WORKLOAD_CONTROLLER_ACCOUNTS = ("job-controller", "deployment-controller",
                                "replicaset-controller", "statefulset-controller")
"""ServiceAccounts kube-controller-manager creates in kube-system for the workload
controllers when it runs them with --use-service-account-credentials."""
HUB_CONTROLLER_ACCOUNTS = {"namespace-controller", "generic-garbage-collector",
                           "service-account-controller", "clusterrole-aggregation-controller",
                           "ttl-after-finished-controller"}
"""The accounts of the dedicated hub's controllers (the token controller uses kcm's own)."""


def eventually(probe: Callable[[], T | None], *, what: str, timeout: float = 60.0) -> T:
    """``probe()`` once it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.25)


def get_or_none(rest: Rest, path: str) -> Any:
    try:
        return rest.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def make_namespace(rest: Rest) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    rest.request("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def delete_namespace(rest: Rest, name: str) -> None:
    try:
        rest.request("DELETE", f"/api/v1/namespaces/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def hub(dev_fleet: FleetState) -> Rest:
    return dev_fleet.cluster("hub").rest()


@pytest.fixture
def namespace(hub: Rest) -> Iterator[str]:
    """A fresh namespace on the light fleet's dedicated hub, deleted afterwards."""
    name = make_namespace(hub)
    yield name
    delete_namespace(hub, name)


def job(name: str, *, gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["true"]}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        pod["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": pod}}}


def service_accounts(rest: Rest) -> set[str]:
    listed = rest.get("/api/v1/namespaces/kube-system/serviceaccounts")
    return {sa["metadata"]["name"] for sa in listed["items"]}


def pods_of(rest: Rest, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return items


# --- dedicated hub --------------------------------------------------------------------------

def test_dedicated_hub_runs_only_the_hub_controllers(dev_fleet: FleetState, hub: Rest) -> None:
    """The hub's one component is kube-controller-manager with the hub's controllers, each
    running as its own ServiceAccount; no workload controller's account exists, no Node."""
    assert dev_fleet.hub_mode == "dedicated"
    cluster = dev_fleet.cluster("hub")
    assert cluster.profile == "dedicated" and not cluster.real
    assert [p.role for p in cluster.components] == ["kube-controller-manager"]
    argv = cluster.components[0].argv
    assert f"--controllers={','.join(DEDICATED_CONTROLLERS)}" in argv
    assert "--use-service-account-credentials=true" in argv
    eventually(lambda: service_accounts(hub) >= HUB_CONTROLLER_ACCOUNTS,
               what="the hub controllers' ServiceAccounts")
    assert service_accounts(hub).isdisjoint(WORKLOAD_CONTROLLER_ACCOUNTS)
    assert hub.get("/api/v1/nodes")["items"] == []


def release(rest: Rest, path: str) -> None:
    """Take the finalizers off the object at ``path`` (what the controller does once the
    copy is gone)."""
    rest.request("PATCH", path, {"metadata": {"finalizers": None}},
                 content_type="application/merge-patch+json")


def terminating(rest: Rest, path: str) -> dict[str, Any] | None:
    current = get_or_none(rest, path)
    return current if current and current["metadata"].get("deletionTimestamp") else None


def test_deleting_a_namespace_on_the_hub_empties_and_removes_it(hub: Rest) -> None:
    """The namespace controller deletes what the namespace holds (a Job, a Dispatch, a
    ConfigMap); the Dispatch's finalizer holds it (and the namespace) until released;
    then the namespace's own finalizer is removed: the namespace goes."""
    ns = make_namespace(hub)
    eventually(lambda: get_or_none(hub, f"/api/v1/namespaces/{ns}/serviceaccounts/default"),
               what="the ServiceAccount controller's default account in the new namespace")
    created = hub.request("POST", JOBS.format(ns=ns), job("intent"))
    hub.request("POST", DISPATCHES.format(ns=ns),
                dispatch_body(workload=created, name=dispatch_name(created)))
    hub.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}})
    hub.request("DELETE", f"/api/v1/namespaces/{ns}")
    record = f"{DISPATCHES.format(ns=ns)}/{dispatch_name(created)}"
    eventually(partial(terminating, hub, record), what="the Dispatch marked for deletion")
    eventually(partial(gone, hub, f"{JOBS.format(ns=ns)}/intent"), what="the Job deleted")
    assert hub.get(f"/api/v1/namespaces/{ns}")["status"]["phase"] == "Terminating"
    release(hub, record)
    eventually(lambda: get_or_none(hub, f"/api/v1/namespaces/{ns}") is None,
               what=f"namespace {ns} finalized and gone")
    for path in (f"{JOBS.format(ns=ns)}/intent",
                 f"{DISPATCHES.format(ns=ns)}/{dispatch_name(created)}",
                 f"/api/v1/namespaces/{ns}/configmaps/settings"):
        assert get_or_none(hub, path) is None, path


def test_garbage_collector_deletes_a_dispatch_whose_job_is_deleted(
        hub: Rest, namespace: str) -> None:
    """A Dispatch owned by a hub Job is deleted when the Job is deleted with background
    propagation (what kubectl does), and goes once its finalizer is released; a plain
    DELETE of a batch/v1 Job orphans it instead (that API version's default policy): the
    Dispatch stays without its ownerReference."""
    jobs, dispatches = JOBS.format(ns=namespace), DISPATCHES.format(ns=namespace)
    for name, propagation in (("background", "Background"), ("plain", None)):
        created = hub.request("POST", jobs, job(name))
        record = f"{dispatches}/{dispatch_name(created)}"
        hub.request("POST", dispatches, dispatch_body(workload=created,
                                                      name=dispatch_name(created)))
        options = ({"apiVersion": "v1", "kind": "DeleteOptions",
                    "propagationPolicy": propagation} if propagation else None)
        hub.request("DELETE", f"{jobs}/{name}", options)
        eventually(partial(gone, hub, f"{jobs}/{name}"), what=f"job {name} gone")
        if propagation:
            held = eventually(partial(terminating, hub, record),
                              what="the Dispatch of the deleted Job marked for deletion")
            assert held["metadata"]["finalizers"] == [FINALIZER]
            release(hub, record)
            eventually(partial(gone, hub, record),
                       what="the Dispatch of the deleted Job garbage-collected")
        else:
            orphan = eventually(partial(unowned, hub, record),
                                what="the Dispatch orphaned (ownerReferences removed)")
            assert orphan["spec"]["workload"]["uid"] == created["metadata"]["uid"]
            release(hub, record)


def gone(rest: Rest, path: str) -> bool:
    return get_or_none(rest, path) is None


def unowned(rest: Rest, path: str) -> dict[str, Any] | None:
    """The object at ``path`` once it exists without ownerReferences."""
    current = get_or_none(rest, path)
    return current if current and not current["metadata"].get("ownerReferences") else None


def test_garbage_collector_deletes_an_object_whose_owner_never_existed(
        hub: Rest, namespace: str) -> None:
    """An ownerReference to a uid no object has: the owner is absent, the dependent goes."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    hub.request("POST", path, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dangling", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "never",
            "uid": str(uuid.uuid4())}]}})
    hub.request("POST", path, {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "unowned"}})
    eventually(lambda: get_or_none(hub, f"{path}/dangling") is None,
               what="the ConfigMap with an absent owner garbage-collected")
    assert get_or_none(hub, f"{path}/unowned") is not None


def test_a_job_on_the_dedicated_hub_gets_no_pods_and_no_status(
        hub: Rest, namespace: str) -> None:
    """No Job controller: the Job stays as created. (The shared hub's test below shows the
    same Job getting a pod within seconds.)"""
    created = hub.request("POST", JOBS.format(ns=namespace), job("intent"))
    time.sleep(6)
    current = hub.get(f"{JOBS.format(ns=namespace)}/intent")
    assert current.get("status", {}) == {}
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert pods_of(hub, namespace) == []


def test_a_pod_on_the_dedicated_hub_is_admitted_like_on_a_real_cluster_but_never_runs(
        hub: Rest, namespace: str) -> None:
    """ServiceAccount admission is on (the ServiceAccount controller makes ``default``):
    the Pod gets the default account and its token volume; with no scheduler and no Node,
    it stays unbound."""
    eventually(lambda: get_or_none(
        hub, f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        what="default ServiceAccount")
    pod = hub.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    assert pod["spec"]["serviceAccountName"] == "default"
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
    time.sleep(3)
    assert "nodeName" not in hub.get(f"/api/v1/namespaces/{namespace}/pods/stray")["spec"]


def test_real_fleet_hub_is_dedicated_with_real_crds_and_no_webhook(
        real_fleet: FleetState) -> None:
    """``real_fleet``'s hub is dedicated too: the members' real JobSet CRD, but no JobSet
    webhook, so a JobSet is stored as written (the control for the shared hub's test)."""
    assert real_fleet.hub_mode == "dedicated"
    assert real_fleet.cluster("hub").profile == "dedicated"
    rest = real_fleet.cluster("hub").rest()
    ns = make_namespace(rest)
    try:
        stored = rest.request("POST", JOBSETS.format(ns=ns), jobset("plain"))
        assert "network" not in stored["spec"] and "successPolicy" not in stored["spec"]
        assert service_accounts(rest).isdisjoint(WORKLOAD_CONTROLLER_ACCOUNTS)
    finally:
        delete_namespace(rest, ns)


# --- shared hub ------------------------------------------------------------------------------

def jobset(name: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"template": {"spec": {"containers": [
                    {"name": "main", "image": "busybox", "command": ["true"]}]}}}}}]}}


@pytest.fixture
def shared_hub(shared_hub_fleet: FleetState) -> Rest:
    return shared_hub_fleet.cluster("hub").rest()


def test_shared_hub_runs_what_a_member_runs(shared_hub_fleet: FleetState, shared_hub: Rest,
                                            fleet_spec: FleetSpec) -> None:
    """Same components as a real member, the workload controllers' ServiceAccounts, and the
    fleet file's hub Nodes Ready with their GPUs."""
    assert shared_hub_fleet.hub_mode == "shared"
    hub, member = shared_hub_fleet.cluster("hub"), shared_hub_fleet.cluster("member-1")
    assert hub.profile == "real" and hub.real
    assert [p.role for p in hub.components] == [p.role for p in member.components]
    assert {"kube-scheduler", "kwok", "jobset"} <= {p.role for p in hub.components}
    eventually(lambda: set(WORKLOAD_CONTROLLER_ACCOUNTS) <= service_accounts(shared_hub),
               what="the workload controllers' ServiceAccounts on the shared hub")
    nodes = {n["metadata"]["name"]: n for n in shared_hub.get("/api/v1/nodes")["items"]}
    expected = {n["metadata"]["name"] for n in node_manifests(fleet_spec.hub)}
    assert set(nodes) == expected and expected
    for node in nodes.values():
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True"


def test_a_job_on_the_shared_hub_runs_on_the_hubs_own_nodes(shared_hub: Rest) -> None:
    """No dispatcher runs: the hub's Job controller makes the pod, its scheduler binds it
    to a hub Node with an H100, kwok runs it, and the Job succeeds, all on the hub."""
    ns = make_namespace(shared_hub)
    try:
        eventually(lambda: get_or_none(
            shared_hub, f"/api/v1/namespaces/{ns}/serviceaccounts/default"),
            what="default ServiceAccount")
        shared_hub.request("POST", JOBS.format(ns=ns), job("eval", gpus=1))
        bound = eventually(lambda: [p for p in pods_of(shared_hub, ns)
                                    if p["spec"].get("nodeName")] or None,
                           what="a pod of the hub Job bound to a node")
        assert bound[0]["spec"]["nodeName"].startswith("hub-h100-")
        def complete() -> dict[str, Any] | None:
            # The succeeded count can be written before Complete (since Kubernetes 1.31
            # SuccessCriteriaMet comes first): wait for the condition, then check the count.
            current: dict[str, Any] = shared_hub.get(f"{JOBS.format(ns=ns)}/eval")
            conditions = {c["type"]: c["status"]
                          for c in current.get("status", {}).get("conditions") or ()}
            return current if conditions.get("Complete") == "True" else None

        done = eventually(complete, what="the hub Job Complete")
        assert {c["type"] for c in done["status"]["conditions"]} >= {"Complete"}
        assert done["status"]["succeeded"] == 1
    finally:
        delete_namespace(shared_hub, ns)


def test_the_jobset_webhook_answers_on_the_shared_hub(shared_hub: Rest) -> None:
    """The JobSet operator's mutating webhook is registered with the hub's apiserver and
    defaults a JobSet created there (success policy, DNS hostnames, indexed completion)."""
    ns = make_namespace(shared_hub)
    try:
        stored = shared_hub.request("POST", JOBSETS.format(ns=ns), jobset("train"))
        spec = stored["spec"]
        assert spec["successPolicy"]["operator"] == "All"
        assert spec["network"]["enableDNSHostnames"] is True
        template = spec["replicatedJobs"][0]["template"]["spec"]
        assert template["completionMode"] == "Indexed"
        assert template["template"]["spec"]["restartPolicy"] == "OnFailure"
    finally:
        delete_namespace(shared_hub, ns)
