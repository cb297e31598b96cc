"""The member copy as a plan (``control.core.copyplan.plan``), on plain data: the built-in
catalog's JobSet and Job, resolved as placing resolves them. What is checked: the copy
is stamped and joined to the member's gang mechanism with its gang objects, kept to the
chosen topology domains, refused (never built) when a pod template sets a refused field
or the workload cannot be resolved, and the pods to dry-run follow ``dry_run``."""

from __future__ import annotations

from typing import Any

from dispatcher.control.core.copies import PodMutations, Rejection
from dispatcher.control.core.copyplan import CopyPlan, PlanInput, namespace_of, plan
from dispatcher.control.core.gangsched import MECHANISM_ANNOTATION
from dispatcher.control.core.names import ORIGIN_LABEL, PendingReason
from dispatcher.control.core.podpolicy import PodFieldPolicy
from dispatcher.fleet.queueing import KUEUE, QUEUE_LABEL, Queueing
from dispatcher.fleet.queueing import NONE as NO_QUEUEING
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.gangapis import NONE, WORKLOAD_API
from dispatcher.placement.model import GangDomain
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import WorkloadError
from tests.unit.control import placing_builders as pb
from tests.unit.control.core.test_gangsched import jobset

CATALOG = Catalog.builtin()


def given(obj: dict[str, Any], **kw: Any) -> PlanInput:
    if "resolution" not in kw:
        kw["resolution"] = CATALOG.resolve(obj)
    definition = CATALOG.find(obj["apiVersion"], obj["kind"])
    return PlanInput(**{"uid": "uid-1", "member": "m1", "workload": obj,
                        "definition": definition, "hub_id": "hub-a", **kw})


def planned(obj: dict[str, Any], **kw: Any) -> CopyPlan:
    out = plan(given(obj, **kw))
    assert isinstance(out, CopyPlan), out
    return out


def test_a_gang_on_a_workload_api_member_carries_its_workload_and_joins_every_pod() -> None:
    out = planned(jobset(), mechanism=WORKLOAD_API)
    assert (out.member, out.namespace, out.kind, out.name) == ("m1", "team-a", "JobSet",
                                                               "train")
    labels = out.body["metadata"]["labels"]
    assert labels[ORIGIN_LABEL] == "hub-a" and labels[HUB_UID_LABEL] == "uid-1"
    assert out.body["metadata"]["annotations"][MECHANISM_ANNOTATION] == WORKLOAD_API
    (workload,) = out.gangs.objects
    assert workload["kind"] == "Workload" and workload["metadata"]["namespace"] == "team-a"
    refs = {r["name"]: r["template"]["spec"]["template"]["spec"]["workloadRef"]
            for r in out.body["spec"]["replicatedJobs"]}
    assert set(refs) == {"leader", "workers"}
    assert {r["name"] for r in refs.values()} == {workload["metadata"]["name"]}
    assert "status" not in out.body and "uid" not in out.body["metadata"]


def test_without_a_mechanism_nothing_is_joined_and_no_object_is_planned() -> None:
    out = planned(jobset(), mechanism=NONE)
    assert out.gangs.objects == () and out.gangs.joins == ()
    assert MECHANISM_ANNOTATION not in out.body["metadata"]["annotations"]


def test_the_pods_to_dry_run_follow_the_setting_and_the_mutations_apply() -> None:
    mutations = PodMutations(labels={"team": "a"}, scheduler_name="kai")
    out = planned(pb.job(gpus=4, parallelism=2), mutations=mutations)
    (pod,) = out.pods
    assert pod["kind"] == "Pod" and pod["metadata"]["labels"]["team"] == "a"
    assert pod["spec"]["schedulerName"] == "kai"
    assert planned(pb.job(), dry_run=False).pods == ()


def test_an_inference_service_s_built_model_container_is_dry_run_in_its_pod() -> None:
    """Issue 35: KServe's predictor (a containers list the definition builds) is dry-run
    as the pod it is: the predictor's own pod fields, the model container, the sidecars."""
    obj = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
           "metadata": {"name": "llm", "namespace": "serving"},
           "spec": {"predictor": {"hostPID": True, "nodeSelector": {"pool": "a"},
                                  "model": {"modelFormat": {"name": "huggingface"},
                                            "securityContext": {"privileged": True},
                                            "resources": {"limits": {
                                                "nvidia.com/gpu": "1"}}}}}}
    (pod,) = planned(obj).pods
    assert pod["spec"]["hostPID"] is True and pod["spec"]["nodeSelector"] == {"pool": "a"}
    (model,) = pod["spec"]["containers"]
    assert model["name"] == "kserve-container"
    assert model["securityContext"] == {"privileged": True}


def test_the_copy_keeps_to_the_chosen_domains() -> None:
    obj = jobset()
    resolution = CATALOG.resolve(obj)
    gang = resolution.demand.gangs[0].name
    domain = GangDomain(gangs=(gang,), level="rack", node_label="example.com/rack",
                        value="r1")
    out = planned(obj, domains=(domain,))
    spec = out.body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "example.com/rack", "operator": "In", "values": ["r1"]} in \
        terms[0]["matchExpressions"]


def test_a_refused_scheduling_field_is_a_rejection_not_a_copy() -> None:
    obj = pb.job()
    obj["spec"]["template"]["spec"]["nodeName"] = "member-node-0"
    out = plan(given(obj, pod_fields=PodFieldPolicy()))
    assert isinstance(out, Rejection)
    assert (out.member, out.status, out.reason) == ("m1", 0, PendingReason.POD_TEMPLATE_REFUSED)
    assert "nodeName" in out.message


def test_a_workload_that_cannot_be_resolved_is_refused_with_why() -> None:
    out = plan(given(pb.job(), resolution=WorkloadError("spec.parallelism: not a number")))
    assert isinstance(out, Rejection) and out.reason == PendingReason.POD_TEMPLATE_REFUSED
    assert out.message == "pod templates cannot be checked: spec.parallelism: not a number"


def test_a_mutation_the_definition_cannot_write_is_a_copy_invalid() -> None:
    obj = pb.job()
    obj["spec"]["template"] = "not a pod template"
    out = plan(given(obj, resolution=CATALOG.resolve(pb.job()),
                     mutations=PodMutations(labels={"team": "a"})))
    assert isinstance(out, Rejection) and out.reason == "CopyInvalid", out


def test_the_namespace_is_the_hub_objects_or_default() -> None:
    assert namespace_of({"metadata": {"namespace": "team-b"}}) == "team-b"
    assert namespace_of({"metadata": {}}) == "default"


def test_the_plan_as_explain_prints_it() -> None:
    out = planned(jobset(), mechanism=WORKLOAD_API).to_dict()
    assert out["member"] == "m1" and out["gangMechanism"] == WORKLOAD_API
    assert out["object"]["kind"] == "JobSet"
    assert [o["kind"] for o in out["gangObjects"]] == ["Workload"]
    assert out["dryRunPods"] >= 1


def test_a_copy_lands_in_the_queue_its_member_expects() -> None:
    """Kueue member: the declared LocalQueue replaces the hub's label value; undeclared,
    the hub's value passes; a member without Kueue never gets the hub's value."""
    obj = jobset()
    obj["metadata"]["labels"] = {QUEUE_LABEL: "hub-queue", "team": "a"}
    declared = Queueing(system=KUEUE, local_queues={"team-a": "team-a-gpu"})
    assert planned(obj, queueing=declared).body["metadata"]["labels"][QUEUE_LABEL] == \
        "team-a-gpu"
    assert planned(obj, queueing=Queueing(system=KUEUE)).body["metadata"]["labels"][
        QUEUE_LABEL] == "hub-queue"
    labels = planned(obj, queueing=Queueing(system=NO_QUEUEING)).body["metadata"]["labels"]
    assert QUEUE_LABEL not in labels and labels["team"] == "a"
    assert obj["metadata"]["labels"][QUEUE_LABEL] == "hub-queue"  # the input is kept


def test_a_field_the_members_minor_would_drop_refuses_the_copy_there() -> None:
    """An apiserver drops a pod field it does not know (fieldValidation Warn): a copy is
    refused where its fields would be lost, sent where they are known."""
    obj = jobset()
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "schedulingGroup"] = {"podGroupName": "mine"}
    refused = plan(given(obj, member_version="v1.35.4"))
    assert isinstance(refused, Rejection) and refused.reason == "FieldUnknownToMember"
    assert "spec.schedulingGroup (1.36+)" in refused.message
    assert "v1.35.4" in refused.message
    assert isinstance(plan(given(obj, member_version="v1.37.2")), CopyPlan)
    assert isinstance(plan(given(obj)), CopyPlan)  # version not known: nothing refused
    # the copy's own gang field is the member's dialect, never refused there
    joined = plan(given(jobset(), member_version="v1.35.4", mechanism=WORKLOAD_API))
    assert isinstance(joined, CopyPlan) and joined.gangs.mechanism == WORKLOAD_API


def test_a_field_removed_since_is_refused_on_the_newer_member() -> None:
    from dispatcher.control.core.skew import minor, unknown_fields
    from dispatcher.workloads.mutate import PodTemplate
    old = PodTemplate(component="w", metadata={}, spec={
        "workloadRef": {"name": "x", "podGroup": "y"},
        "containers": [{"name": "c", "restartPolicyRules": [{"action": "Restart"}]}]})
    assert unknown_fields([old], "v1.37.2") == ["w: spec.workloadRef (1.35 only)"]
    assert unknown_fields([old], "v1.33.5") == [
        "w: spec.containers[c].restartPolicyRules (1.34+)", "w: spec.workloadRef (1.35 only)"]
    assert unknown_fields([old], "v1.35.4") == []
    assert minor("v1.37.2") == 37 and minor("") is None and minor(None) is None


def test_a_pod_security_check_the_members_minor_lacks_is_run_by_the_plan() -> None:
    """A 1.33 member's Pod Security plugin has no 1.34 host-probe check: a copy whose
    pods set a probe host is refused there when the hub namespace enforces baseline (or
    stricter) at a version that has it, and sent to a member whose plugin refuses it."""
    from dispatcher.kube.podsecurity import Policy

    obj = jobset()
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["readinessProbe"] = {"httpGet": {"host": "10.0.0.9", "port": 80}}
    baseline = Policy("baseline")
    refused = plan(given(obj, member_version="v1.33.5", pod_security=baseline))
    assert isinstance(refused, Rejection) and refused.reason == "PodSecurityUnenforced"
    assert "hostProbesAndHostLifecycle" in refused.message
    assert "'10.0.0.9'" in refused.message and "v1.33.5" in refused.message
    # the member's own plugin has the check: its admission refuses the pods itself
    assert isinstance(plan(given(obj, member_version="v1.34.0", pod_security=baseline)),
                      CopyPlan)
    # a level or a version without the check asks nothing of the member
    for wanted in (Policy("privileged"), Policy("restricted", 33)):
        assert isinstance(plan(given(obj, member_version="v1.33.5", pod_security=wanted)),
                          CopyPlan)
    # pods without a probe host pass on the old member
    assert isinstance(plan(given(jobset(), member_version="v1.33.5",
                                 pod_security=Policy("restricted"))), CopyPlan)
