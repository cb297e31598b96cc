"""The shared hub's admission decision (``control.core.hubhold.review``) on plain AdmissionReview
requests, and the controller's own check (``unheld_reason``).

Covered: hold on create per form, refusal with the definition's reason, scope (namespaces,
kube-*, the controller's own, label selector), re-hold on an update that drops it, a foreign
managedBy left alone with a warning, non-catalog kinds and deletes untouched, objects a
controller owns (the hub's own pods, Deployments of an operator) passed as they are, a bare Pod
refused, an annotation pause (LLMInferenceService), the webhook configuration's shape.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from dispatcher.control.core.hubhold import (
    NOT_OWNED,
    HoldScope,
    configuration,
    controller_owner,
    review,
    unheld_reason,
)
from dispatcher.placement.selector import parse_selector
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.holds import HOLD_ANNOTATION, MANAGED_BY
from tests.unit.workloads.test_holds import apply

ROOT = Path(__file__).resolve().parents[4]
CATALOG = Catalog.builtin()
SCOPE = HoldScope(skip=frozenset({"dispatcher-system"}))


def job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "eval", "namespace": "team-a", "labels": {"team": "a"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                     **spec}}


def request(obj: dict[str, Any], *, operation: str = "CREATE",
            old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"uid": "r1", "operation": operation, "object": obj, "oldObject": old,
            "namespace": obj["metadata"].get("namespace")}


def patched(response: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    return apply(obj, json.loads(base64.b64decode(response["patch"])))


def test_a_job_is_held_by_managed_by() -> None:
    obj = job()
    response = review(request(obj), catalog=CATALOG, scope=SCOPE)
    assert response["uid"] == "r1"
    assert patched(response, obj)["spec"]["managedBy"] == MANAGED_BY


def test_a_deployment_is_paused_and_marked() -> None:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "d", "namespace": "team-a"}, "spec": {"replicas": 2}}
    held = patched(review(request(obj), catalog=CATALOG, scope=SCOPE), obj)
    assert held["spec"]["paused"] is True
    assert held["metadata"]["annotations"][HOLD_ANNOTATION] == ".spec.paused"


def test_a_kind_nothing_can_hold_is_refused_with_the_reason() -> None:
    obj = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "lws", "namespace": "team-a"}, "spec": {}}
    response = review(request(obj), catalog=CATALOG, scope=SCOPE)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "LeaderWorkerSet team-a/lws" in message and "dedicated hub" in message


def test_an_update_of_a_refused_kind_is_allowed() -> None:
    """Finalizer removal must never be blocked (objects from before the webhook)."""
    obj = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "s", "namespace": "team-a"}, "spec": {}}
    response = review(request(obj, operation="UPDATE", old=obj), catalog=CATALOG,
                      scope=SCOPE)
    assert response == {"uid": "r1", "allowed": True}


def test_out_of_scope_objects_pass_untouched() -> None:
    scope = HoldScope(namespaces=("team-a",), skip=frozenset({"dispatcher-system"}),
                      selector=parse_selector("team=a"))
    for namespace, labels in (("team-b", {"team": "a"}), ("kube-flannel", {"team": "a"}),
                              ("dispatcher-system", {"team": "a"}), ("team-a", {"team": "b"})):
        obj = job()
        obj["metadata"].update(namespace=namespace, labels=labels)
        assert review(request(obj), catalog=CATALOG, scope=scope) == {
            "uid": "r1", "allowed": True}, namespace
    assert review(request(job()), catalog=CATALOG, scope=scope).get("patch")


def test_other_kinds_and_operations_pass_untouched() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}}
    assert review(request(cm), catalog=CATALOG, scope=SCOPE) == {"uid": "r1", "allowed": True}
    assert review({**request(job()), "operation": "DELETE"}, catalog=CATALOG,
                  scope=SCOPE) == {"uid": "r1", "allowed": True}


def test_an_update_that_drops_the_hold_gets_it_back() -> None:
    old = job(managedBy=MANAGED_BY)
    new = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "team-a"}, "spec": {"runPolicy": {}}}
    old = {**new, "spec": {"runPolicy": {"managedBy": MANAGED_BY}}}
    response = review(request(new, operation="UPDATE", old=old), catalog=CATALOG, scope=SCOPE)
    assert patched(response, new)["spec"]["runPolicy"]["managedBy"] == MANAGED_BY
    assert response["warnings"]
    unchanged = review(request(old, operation="UPDATE", old=old), catalog=CATALOG, scope=SCOPE)
    assert "patch" not in unchanged


def test_a_foreign_managed_by_is_left_with_a_warning_and_not_dispatched() -> None:
    obj = job(managedBy="kueue.x-k8s.io/multikueue")
    response = review(request(obj), catalog=CATALOG, scope=SCOPE)
    assert response["allowed"] and "patch" not in response
    assert "another system manages it" in response["warnings"][0]
    definition = CATALOG.find("batch/v1", "Job")
    assert definition is not None
    assert "another system" in (unheld_reason(obj, definition) or "")


def test_the_controller_never_dispatches_an_unheld_object_from_a_shared_hub() -> None:
    definition = CATALOG.find("batch/v1", "Job")
    assert definition is not None
    assert unheld_reason(job(managedBy=MANAGED_BY), definition) is None
    assert "created without the hub hold" in (unheld_reason(job(), definition) or "")


def test_the_configuration_fails_closed_and_skips_system_namespaces() -> None:
    body = configuration(name="dispatcher", resources={("batch", "v1"): ["jobs"],
                                                       ("apps", "v1"): ["deployments"]},
                         client_config={"url": "https://127.0.0.1:9443/mutate"},
                         skip=("dispatcher-system", "kube-system"))
    (hook,) = body["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert [r["apiGroups"] for r in hook["rules"]] == [["apps"], ["batch"]]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "dispatcher-system", "kube-system"]
    # the shipped manifest says the same as the controller writes
    shipped = [d for d in yaml.safe_load_all((ROOT / "deploy" / "shared-hub" / "webhook.yaml")
                                             .read_text()) if d and d["kind"].startswith("Mut")]
    (condition,) = shipped[0]["webhooks"][0]["matchConditions"]
    assert hook["matchConditions"] == [condition] == [NOT_OWNED]


def test_the_configuration_sends_only_watched_namespaces_and_labels() -> None:
    scope = HoldScope(namespaces=("team-a", "dispatcher-system"),
                      selector=parse_selector("dispatcher.io/dispatch=true,tier in (x,y),!skip"))
    (hook,) = configuration(name="d", resources={}, client_config={}, skip=(
        "dispatcher-system",), scope=scope)["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "dispatcher.io/dispatch", "operator": "In", "values": ["true"]},
        {"key": "tier", "operator": "In", "values": ["x", "y"]},
        {"key": "skip", "operator": "DoesNotExist"}]
    (numeric,) = configuration(name="d", resources={}, client_config={}, skip=(),
                               scope=HoldScope(selector=parse_selector("gen>2")))["webhooks"]
    assert "objectSelector" not in numeric  # review() filters it alone


def _owned(obj: dict[str, Any], *, kind: str = "ReplicaSet", controller: Any = True
           ) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Other", "name": "x", "uid": "u0"},
        {"apiVersion": "apps/v1", "kind": kind, "name": "web-7d9f", "uid": "u1",
         "controller": controller, "blockOwnerDeletion": True}]
    return obj


def _pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_a_bare_pod_is_refused_but_a_controllers_pod_passes() -> None:
    """Pod is a catalog kind: a bare one cannot be held (refused with the reason), while the
    pods the shared hub's own controllers create (a DaemonSet's, a ReplicaSet's) are their
    owners' and pass untouched, or no pod could start in a dispatched namespace."""
    refused = review(request(_pod()), catalog=CATALOG, scope=SCOPE)
    assert refused["allowed"] is False and "scheduling gate" in refused["status"]["message"]
    owned = _owned(_pod())
    assert controller_owner(owned) == "ReplicaSet/web-7d9f"
    assert review(request(owned), catalog=CATALOG, scope=SCOPE) == {"uid": "r1", "allowed": True}
    # an ownerReference that is not the controller does not make a pod someone else's
    assert review(request(_owned(_pod(), controller=False)), catalog=CATALOG,
                  scope=SCOPE)["allowed"] is False
    assert controller_owner(_owned(_pod(), controller="true")) is None


def test_an_owned_deployment_is_not_paused() -> None:
    obj = _owned({"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d", "namespace": "team-a"}, "spec": {}},
                 kind="MyOperatorApp")
    assert review(request(obj), catalog=CATALOG, scope=SCOPE) == {"uid": "r1", "allowed": True}


def _deployment(*, paused: bool | None = None, marked: bool = False,
                **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "d", "namespace": "team-a", **meta},
                           "spec": {"replicas": 2}}
    if paused is not None:
        obj["spec"]["paused"] = paused
    if marked:
        obj["metadata"]["annotations"] = {HOLD_ANNOTATION: ".spec.paused"}
    return obj


def _update(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    return review(request(new, operation="UPDATE", old=old), catalog=CATALOG, scope=SCOPE)


def _denied(response: dict[str, Any], *words: str) -> None:
    assert response["allowed"] is False, response
    assert response["status"]["code"] == 403
    for word in words:
        assert word in response["status"]["message"], response["status"]["message"]


def test_a_held_object_cannot_gain_a_controller_owner() -> None:
    """Issue 35: an owner added to a held Deployment made its next update skip the webhook
    (owned -> owned), so a later ``paused: false`` ran it on the hub and the member."""
    old = _deployment(paused=True, marked=True)
    new = _owned({**old, "metadata": dict(old["metadata"])})
    _denied(_update(new, old), "cannot be given a controller owner", "Deployment team-a/d")


def test_a_hold_cannot_be_put_on_by_an_update() -> None:
    """Issue 35: a Deployment running on the hub (created owned, so never held), then
    patched paused with a hand-written marker, was dispatched while its hub pods ran."""
    free = _deployment()
    _denied(_update(_deployment(paused=True), free), "a hold is set at creation",
            "recreate it")
    _denied(_update(_deployment(paused=True, marked=True), free), "hub-hold")
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "team-a"},
           "spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}}
    ours = {**mpi, "spec": {"runPolicy": {"managedBy": MANAGED_BY}}}
    _denied(_update(ours, mpi), "a hold is set at creation")


def test_an_owned_objects_forged_hold_does_not_survive_its_freeing() -> None:
    """An owned object's updates are not sent (owned -> owned), so a tenant can pause and
    mark it unseen; freeing it from its owner then must not make it a held workload (its
    hub pods, made before the pause, still run)."""
    forged = _owned(_deployment(paused=True, marked=True))
    freed = {**forged, "metadata": {k: v for k, v in forged["metadata"].items()
                                    if k != "ownerReferences"}}
    _denied(_update(freed, forged), "a hold is set at creation")
    # an owned object that was never held is freed as it is
    owned = _owned(_deployment())
    plain = {**owned, "metadata": {k: v for k, v in owned["metadata"].items()
                                   if k != "ownerReferences"}}
    assert _update(plain, owned) == {"uid": "r1", "allowed": True}


def test_the_marker_is_the_webhooks_alone() -> None:
    held = _deployment(paused=True, marked=True)
    unmarked_ = _deployment(paused=True)
    _denied(_update(unmarked_, held), "cannot be added, changed or removed")
    relabelled = {**held, "metadata": {**held["metadata"], "annotations": {
        HOLD_ANNOTATION: ".spec.replicas"}}}
    _denied(_update(relabelled, held), "hub-hold")
    # a CREATE's own marker goes; the webhook writes its own when it pauses
    forged = _deployment(paused=True, marked=True)
    created = patched(review(request(forged), catalog=CATALOG, scope=SCOPE), forged)
    assert HOLD_ANNOTATION not in created["metadata"]["annotations"]
    assert created["spec"]["paused"] is True  # the user's own pause stays theirs
    forged = _deployment(marked=True)
    created = patched(review(request(forged), catalog=CATALOG, scope=SCOPE), forged)
    assert created["metadata"]["annotations"][HOLD_ANNOTATION] == ".spec.paused"
    job_marked = job()
    job_marked["metadata"]["annotations"] = {HOLD_ANNOTATION: ".spec.paused"}
    created = patched(review(request(job_marked), catalog=CATALOG, scope=SCOPE), job_marked)
    assert created["metadata"]["annotations"] == {}
    assert created["spec"]["managedBy"] == MANAGED_BY


def test_a_managed_by_never_changes_after_creation() -> None:
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "team-a"},
           "spec": {"runPolicy": {"managedBy": MANAGED_BY}}}
    kueue = {**mpi, "spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}}
    _denied(_update(kueue, mpi), "cannot change after creation")
    _denied(_update(mpi | {"spec": {"runPolicy": {}}}, kueue), "cannot change")
    # dropping ours only has it put back (as before)
    dropped = _update(mpi | {"spec": {"runPolicy": {}}}, mpi)
    assert patched(dropped, mpi | {"spec": {"runPolicy": {}}})["spec"]["runPolicy"] == {
        "managedBy": MANAGED_BY}
    # an update that changes nothing of the hold passes
    assert _update({**mpi, "metadata": {**mpi["metadata"], "labels": {"x": "y"}}},
                   mpi) == {"uid": "r1", "allowed": True}


def test_the_kinds_own_controller_value_is_replaced_not_foreign() -> None:
    """Issue 35: ``managedBy: kubernetes.io/job-controller`` (or the JobSet/MPI
    controller's own value) opted a workload out of the hold."""
    for obj, field in ((job(managedBy="kubernetes.io/job-controller"), ("spec",)),
                       ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                         "metadata": {"name": "j", "namespace": "team-a"},
                         "spec": {"managedBy": "jobset.sigs.k8s.io/jobset-controller"}},
                        ("spec",)),
                       ({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                         "metadata": {"name": "m", "namespace": "team-a"},
                         "spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}},
                        ("spec", "runPolicy"))):
        held = patched(review(request(obj), catalog=CATALOG, scope=SCOPE), obj)
        node: Any = held
        for part in field:
            node = node[part]
        assert node["managedBy"] == MANAGED_BY, obj["kind"]


def test_an_llminferenceservice_is_stopped_by_its_annotation() -> None:
    obj = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
           "metadata": {"name": "m", "namespace": "team-a"}, "spec": {}}
    held = patched(review(request(obj), catalog=CATALOG, scope=SCOPE), obj)
    assert held["metadata"]["annotations"] == {
        "serving.kserve.io/stop": "true",
        HOLD_ANNOTATION: '.metadata.annotations."serving.kserve.io/stop"'}
    assert unheld_reason(held, CATALOG.require(held)) is None
    # with annotations already there, both are added next to them
    obj["metadata"]["annotations"] = {"team": "a"}
    held = patched(review(request(obj), catalog=CATALOG, scope=SCOPE), obj)
    assert held["metadata"]["annotations"]["team"] == "a"
    assert held["metadata"]["annotations"]["serving.kserve.io/stop"] == "true"


def test_a_cronjob_is_suspended_and_a_sandbox_suspended() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "team-a"}, "spec": {"schedule": "@daily"}}
    assert patched(review(request(cron), catalog=CATALOG, scope=SCOPE), cron)[
        "spec"]["suspend"] is True
    box = {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
           "metadata": {"name": "s", "namespace": "team-a"}, "spec": {"podTemplate": {}}}
    assert patched(review(request(box), catalog=CATALOG, scope=SCOPE), box)[
        "spec"]["operatingMode"] == "Suspended"


def test_a_dispatched_workload_cannot_leave_the_selector() -> None:
    """Issue 35: with ``watch.labelSelector``, removing the label took a held Deployment
    out of the webhook's sight; its next ``paused: false`` ran it on the hub too."""
    scope = HoldScope(skip=frozenset({"dispatcher-system"}), selector=parse_selector("team=a"))
    held = _deployment(paused=True, marked=True, labels={"team": "a"})
    gone = {**held, "metadata": {**held["metadata"], "labels": {}}}
    response = review(request(gone, operation="UPDATE", old=held), catalog=CATALOG,
                      scope=scope)
    _denied(response, "cannot leave what the dispatcher watches")
    free = _deployment(labels={"team": "a"})  # never held (created before the webhook)
    assert review(request({**free, "metadata": {**free["metadata"], "labels": {}}},
                          operation="UPDATE", old=free), catalog=CATALOG,
                  scope=scope) == {"uid": "r1", "allowed": True}
    outside = _deployment(labels={"team": "b"})
    assert review(request(outside, operation="UPDATE", old=outside), catalog=CATALOG,
                  scope=scope) == {"uid": "r1", "allowed": True}
