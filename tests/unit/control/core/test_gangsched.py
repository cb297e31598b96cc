"""What a copy carries for its member's gang mechanism (``control.core.gangsched``), on plain
data: the built-in JobSet, Job and PyTorchJob definitions and hand-made gangs."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.control.core.copies import build_copy, stamped
from dispatcher.control.core.gangsched import (
    GANG_OF_ANNOTATION,
    MECHANISM_ANNOTATION,
    join,
    mechanism_of,
    owned,
    plan,
)
from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.gangapis import (
    API_OF,
    AUTO,
    COMPOSITE_POD_GROUP,
    COMPOSITE_V1ALPHA3,
    COSCHEDULING,
    NONE,
    POD_GROUP,
    POD_GROUP_LABEL,
    PODGROUP_V1ALPHA2,
    PODGROUP_V1BETA1,
    WORKLOAD,
    WORKLOAD_API,
    builtin_at,
    discovered,
    effective,
    note,
)
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.demand import Gang, PodShape
from dispatcher.workloads.errors import DefinitionError
from dispatcher.workloads.gangs import gang_components
from dispatcher.workloads.model import Definition

CATALOG = Catalog.builtin()
JOBSET = CATALOG.find("jobset.x-k8s.io/v1alpha2", "JobSet")
HUB = "hub-a"


def _pod(gpus: int = 1) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "train"}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox",
                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def jobset(*, name: str = "train", workers: int = 3, leader: int = 1,
           completions: int | None = None) -> dict[str, Any]:
    """A JobSet of a leader Job (``leader`` pods) and a workers Job (``workers`` pods at
    once, ``completions`` in all), 1 GPU each."""
    def rjob(rname: str, pods: int, total: int | None = None) -> dict[str, Any]:
        return {"name": rname, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": total or pods, "template": _pod()}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "team-a", "uid": "uid-1",
                         "generation": 1},
            "spec": {"replicatedJobs": [rjob("leader", leader),
                                        rjob("workers", workers, completions)]}}


def _planned(obj: dict[str, Any], mechanism: Any, definition: Definition | None = JOBSET
             ) -> tuple[dict[str, Any], Any]:
    assert definition is not None
    copy = build_copy(obj, hub_id=HUB, definition=definition)
    resolution = CATALOG.resolve(obj) if definition is JOBSET else None
    gangs = resolution.demand.gangs if resolution is not None else ()
    instances = [i for c in resolution.components for i in c.instances] \
        if resolution is not None else []
    units = gang_components(definition, default_name=obj["metadata"]["name"])
    return copy, plan(mechanism=mechanism, definition=definition, gangs=gangs, units=units,
                      copy=copy, hub_id=HUB, instances=instances)


def _templates(copy: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"]["template"] for r in copy["spec"]["replicatedJobs"]]


def test_jobset_gang_becomes_one_workload_with_one_pod_group() -> None:
    copy, found = _planned(jobset(), WORKLOAD_API)
    assert found.mechanism == WORKLOAD_API and not found.skipped
    (workload,) = found.objects
    assert (workload["apiVersion"], workload["kind"]) == (WORKLOAD.api_version, WORKLOAD.kind)
    assert workload["metadata"]["name"] == "jobset-train"
    assert workload["metadata"]["namespace"] == "team-a"
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "train"},
        "podGroups": [{"name": "train", "policy": {"gang": {"minCount": 4}}}]}
    joined = join(copy, JOBSET, found)
    for template in _templates(joined):  # every replicated job's pods join the one gang
        assert template["spec"]["workloadRef"] == {"name": "jobset-train",
                                                   "podGroup": "train"}
    assert mechanism_of(joined) == WORKLOAD_API
    assert joined["metadata"]["annotations"][MECHANISM_ANNOTATION] == WORKLOAD_API
    assert "workloadRef" not in _templates(copy)[0]["spec"]  # the input is not modified


def _pod_groups(found: Any) -> list[tuple[str, int]]:
    (workload,) = found.objects
    return [(g["name"], g["policy"]["gang"]["minCount"]) for g in workload["spec"]["podGroups"]]


def test_an_in_order_jobset_is_one_gang_per_replicated_job() -> None:
    """startupPolicy InOrder: the JobSet controller creates the workers' Job only once the
    leader's is ready. One gang of both would hold the leader's pod for pods that do not
    exist yet (the deadlock of issue 34): each replicated job is its own pod group."""
    obj = jobset(leader=2, workers=3)
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    copy, found = _planned(obj, WORKLOAD_API)
    assert _pod_groups(found) == [("train-leader", 2), ("train-workers", 3)]
    leader, workers = _templates(join(copy, JOBSET, found))
    assert leader["spec"]["workloadRef"] == {"name": "jobset-train",
                                             "podGroup": "train-leader"}
    assert workers["spec"]["workloadRef"] == {"name": "jobset-train",
                                              "podGroup": "train-workers"}
    assert CATALOG.resolve(obj).demand.gangs[0].min_pods == 5  # placement: all at once


def test_a_one_pod_stage_is_not_held_and_says_so() -> None:
    obj = jobset(leader=1, workers=4)
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    copy, found = _planned(obj, COSCHEDULING)
    assert [g["metadata"]["name"] for g in found.objects] == ["jobset-train-train-workers"]
    assert any("stage leader has 1 pod" in line for line in found.skipped)
    leader, workers = _templates(join(copy, JOBSET, found))
    assert POD_GROUP_LABEL not in leader["metadata"]["labels"]
    assert workers["metadata"]["labels"][POD_GROUP_LABEL] == "jobset-train-train-workers"


def test_depends_on_makes_the_dependent_a_stage_and_the_rest_stay_together() -> None:
    obj = jobset(leader=2, workers=3)
    obj["spec"]["replicatedJobs"].append({**obj["spec"]["replicatedJobs"][1],
                                          "name": "eval", "dependsOn": [
                                              {"name": "workers", "status": "Complete"}]})
    copy, found = _planned(obj, WORKLOAD_API)
    assert _pod_groups(found) == [("train", 5), ("train-eval", 3)]
    leader, workers, evaluation = _templates(join(copy, JOBSET, found))
    assert leader["spec"]["workloadRef"]["podGroup"] == "train"
    assert workers["spec"]["workloadRef"]["podGroup"] == "train"
    assert evaluation["spec"]["workloadRef"]["podGroup"] == "train-eval"


def test_pods_in_waves_join_no_gang() -> None:
    """parallelism 3 of completions 5: the Job's last wave has 2 pods, fewer than a gang
    of 3 (or 4) would wait for; the scheduler does not count finished pods."""
    copy, found = _planned(jobset(leader=2, workers=3, completions=5), WORKLOAD_API)
    assert _pod_groups(found) == [("train", 2)]
    assert any("workers's pods come in waves" in line for line in found.skipped)
    leader, workers = _templates(join(copy, JOBSET, found))
    assert leader["spec"]["workloadRef"]["podGroup"] == "train"
    assert "workloadRef" not in workers["spec"]


def test_a_jobset_without_stages_keeps_its_one_gang() -> None:
    obj = jobset()
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    _, found = _planned(obj, WORKLOAD_API)
    assert _pod_groups(found) == [("train", 4)]


def test_gang_objects_carry_the_copys_ownership_stamps_but_are_not_copies() -> None:
    _, found = _planned(jobset(), WORKLOAD_API)
    meta = found.objects[0]["metadata"]
    assert meta["labels"] == {ORIGIN_LABEL: HUB, HUB_UID_LABEL: "uid-1"}
    assert meta["annotations"][GANG_OF_ANNOTATION] == "JobSet.jobset.x-k8s.io/train"
    assert stamped(found.objects[0], hub_id=HUB) is None  # never taken for a copy


def test_coscheduling_is_one_pod_group_per_gang_joined_by_label() -> None:
    copy, found = _planned(jobset(), COSCHEDULING)
    (group,) = found.objects
    assert (group["apiVersion"], group["kind"]) == (POD_GROUP.api_version, POD_GROUP.kind)
    assert group["metadata"]["name"] == "jobset-train-train"
    assert group["spec"] == {"minMember": 4}
    for template in _templates(join(copy, JOBSET, found)):
        assert template["metadata"]["labels"][POD_GROUP_LABEL] == "jobset-train-train"
        assert template["metadata"]["labels"]["app"] == "train"  # merged, not replaced
        assert "workloadRef" not in template["spec"]


def test_owner_reference_points_at_the_created_copy() -> None:
    created = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "train", "uid": "member-uid"}}
    assert owned(created) == {"metadata": {"ownerReferences": [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
         "uid": "member-uid", "blockOwnerDeletion": False}]}}


def test_member_without_a_mechanism_gets_the_plain_copy() -> None:
    copy, found = _planned(jobset(), NONE)
    assert found.mechanism == NONE and not found.objects and not found.joins
    joined = join(copy, JOBSET, found)
    assert MECHANISM_ANNOTATION not in joined["metadata"]["annotations"]
    assert joined["spec"] == copy["spec"]


def test_a_stamp_the_hub_object_carried_is_not_trusted() -> None:
    obj = jobset()
    obj["metadata"]["annotations"] = {MECHANISM_ANNOTATION: WORKLOAD_API}
    copy, found = _planned(obj, NONE)
    assert mechanism_of(join(copy, JOBSET, found)) == NONE


def test_a_one_pod_gang_needs_nothing() -> None:
    _, found = _planned(jobset(workers=0), WORKLOAD_API)
    assert found.mechanism == NONE and not found.objects


def test_a_kind_whose_controllers_drop_the_field_is_left_alone() -> None:
    """PyTorchJob (training-operator v1.8.1): its CRD schema has no workloadRef, so the
    apiserver prunes it; the definition does not declare memberGangs."""
    pytorch = CATALOG.find("kubeflow.org/v1", "PyTorchJob")
    assert pytorch is not None and pytorch.member_gangs == ()
    gang = Gang(name="pytorchjob", pods=4, min_pods=4,
                pod_shapes=(PodShape(count=4, gpus=1),))
    found = plan(mechanism=WORKLOAD_API, definition=pytorch, gangs=[gang],
                 units=gang_components(pytorch, default_name="x"),
                 copy={"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                       "metadata": {"name": "x"}}, hub_id=HUB)
    assert found.mechanism == NONE and not found.objects
    assert found.member_mechanism == WORKLOAD_API
    assert "do not carry workload-api" in found.skipped[0]


def test_independent_units_and_per_replica_gangs_are_not_joined() -> None:
    job = CATALOG.find("batch/v1", "Job")
    lws = CATALOG.find("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert job is not None and lws is not None
    assert gang_components(job, default_name="x") == {}  # gangPer: pod
    assert gang_components(lws, default_name="x") == {}  # gangPer: replica, shared templates
    independent = Gang(name="job", pods=4, min_pods=1, pod_shapes=(), independent=True)
    found = plan(mechanism=WORKLOAD_API, definition=job, gangs=[independent], units={},
                 copy={"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}},
                 hub_id=HUB)
    assert found.mechanism == NONE and not found.skipped


def test_more_gangs_than_a_workload_holds_is_left_alone() -> None:
    gangs = [Gang(name=f"g{i}", pods=2, min_pods=2, pod_shapes=()) for i in range(9)]
    definition = _definition_of_components(9)
    units = gang_components(definition, default_name="x")
    assert set(units) == {f"g{i}" for i in range(9)}
    copy = {"apiVersion": "example.com/v1", "kind": "Multi", "metadata": {"name": "x"}}
    found = plan(mechanism=WORKLOAD_API, definition=definition, gangs=gangs, units=units,
                 copy=copy, hub_id=HUB)
    assert found.mechanism == NONE and "at most 8" in found.skipped[0]
    found = plan(mechanism=WORKLOAD_API, definition=definition, gangs=gangs[:8], units=units,
                 copy=copy, hub_id=HUB)
    assert [g["name"] for g in found.objects[0]["spec"]["podGroups"]] == \
        [f"g{i}" for i in range(8)]
    assert [j.components for j in found.joins] == [(f"c{i}",) for i in range(8)]


def _definition_of_components(count: int) -> Definition:
    children = "\n".join(f"""    - name: c{i}
      ownerRef: multi
      kind: {{group: example.com, version: v1, kind: Part}}
      specDefinition: {{podTemplateSpecPath: '.spec.parts[{i}].template'}}""" for i in range(count))
    groups = "\n".join(f"      - {{name: g{i}, members: [{{componentName: c{i}}}]}}"
                       for i in range(count))
    text = f"""apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {{name: multi}}
spec:
  structureDefinition:
    rootComponent:
      name: multi
      kind: {{group: example.com, version: v1, kind: Multi}}
      statusDefinition:
        statusMappings:
          running: [{{byExpression: {{expression: 'true', expectedResult: "true"}}}}]
    childComponents:
{children}
  optimizationInstructions:
    gangScheduling:
      podGroups:
{groups}
  copyDefinition:
    memberGangs: [workload-api]
"""
    (definition,) = load_text(text, source="test")
    return definition


def test_names_are_dns_and_stable() -> None:
    long = "a" * 70
    _, found = _planned(jobset(name=long), COSCHEDULING)
    name = found.objects[0]["metadata"]["name"]
    assert len(name) <= 63 and name.replace("-", "").isalnum() and name.islower()
    assert _planned(jobset(name=long), COSCHEDULING)[1].objects[0]["metadata"]["name"] == name


def test_member_gangs_must_be_a_known_mechanism() -> None:
    text = _definition_of_components(1).document
    text["spec"]["copyDefinition"]["memberGangs"] = ["volcano"]
    import yaml
    with pytest.raises(DefinitionError, match="memberGangs"):
        load_text(yaml.safe_dump(text), source="test")


@pytest.mark.parametrize("mechanism", [PODGROUP_V1BETA1, PODGROUP_V1ALPHA2])
def test_on_1_36_and_later_a_gang_is_a_built_in_pod_group_joined_by_scheduling_group(
        mechanism: Any) -> None:
    """1.36 tombstoned ``workloadRef``: a pod names its PodGroup in
    ``spec.schedulingGroup.podGroupName`` and the PodGroup holds the gang's minimum
    (k8s.io/api v0.37.2 scheduling/v1beta1 PodGroupSpec, core/v1 PodSchedulingGroup)."""
    copy, found = _planned(jobset(), mechanism)
    assert found.mechanism == mechanism and not found.skipped
    (group,) = found.objects
    gvk = API_OF[mechanism]
    assert (group["apiVersion"], group["kind"]) == (gvk.api_version, "PodGroup")
    assert group["apiVersion"].startswith("scheduling.k8s.io/")  # not coscheduling's
    assert group["metadata"]["name"] == "jobset-train-train"
    assert group["metadata"]["namespace"] == "team-a"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    joined = join(copy, JOBSET, found)
    for template in _templates(joined):
        assert template["spec"]["schedulingGroup"] == {"podGroupName": "jobset-train-train"}
        assert "workloadRef" not in template["spec"]
        assert POD_GROUP_LABEL not in template["metadata"]["labels"]
    assert mechanism_of(joined) == mechanism


def test_an_in_order_jobset_on_1_37_is_one_pod_group_per_stage() -> None:
    obj = jobset(leader=2, workers=3)
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    copy, found = _planned(obj, PODGROUP_V1BETA1)
    assert [(g["metadata"]["name"], g["spec"]["schedulingPolicy"]["gang"]["minCount"])
            for g in found.objects] == [("jobset-train-train-leader", 2),
                                        ("jobset-train-train-workers", 3)]
    leader, workers = _templates(join(copy, JOBSET, found))
    assert leader["spec"]["schedulingGroup"]["podGroupName"] == "jobset-train-train-leader"
    assert workers["spec"]["schedulingGroup"]["podGroupName"] == "jobset-train-train-workers"


def test_the_built_in_dialect_is_discovered_newest_first_and_named_by_workload_api() -> None:
    v1beta1, v1alpha2 = API_OF[PODGROUP_V1BETA1], API_OF[PODGROUP_V1ALPHA2]
    assert discovered({v1beta1, POD_GROUP}) == PODGROUP_V1BETA1
    assert discovered({v1alpha2}) == PODGROUP_V1ALPHA2
    assert discovered({WORKLOAD}) == WORKLOAD_API
    # a MemberCluster's "workload-api" means the built-in API, in the dialect it speaks
    assert effective(WORKLOAD_API, PODGROUP_V1BETA1) == PODGROUP_V1BETA1
    assert effective(WORKLOAD_API, NONE) == WORKLOAD_API
    assert effective(NONE, PODGROUP_V1BETA1) == NONE


def test_a_member_whose_kubernetes_has_the_gang_api_but_serves_none_gets_a_note() -> None:
    assert builtin_at("v1.37.2") == PODGROUP_V1BETA1
    assert builtin_at("v1.36.3") == PODGROUP_V1ALPHA2
    assert builtin_at("v1.35.4") == WORKLOAD_API
    assert builtin_at("v1.33.5") is None and builtin_at("") is None
    off = note("v1.37.2", NONE)
    assert "scheduling.k8s.io/v1beta1 PodGroup" in off and "GenericWorkload" in off
    assert note("v1.37.2", PODGROUP_V1BETA1) == ""
    assert note("v1.33.5", NONE) == ""  # nothing to enable there
    assert note("v1.35.4", COSCHEDULING).startswith("Kubernetes v1.35.4 has")


def test_discovery_and_spec_override() -> None:
    assert discovered({WORKLOAD, POD_GROUP}) == WORKLOAD_API
    assert discovered({POD_GROUP}) == COSCHEDULING
    assert discovered(set()) == NONE
    assert effective(AUTO, WORKLOAD_API) == WORKLOAD_API
    assert effective(AUTO, None) == NONE
    assert effective(NONE, WORKLOAD_API) == NONE  # the operator said no
    assert effective(COSCHEDULING, NONE) == COSCHEDULING


def test_explain_names_the_chosen_members_gang_mechanism(
        capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace
    from pathlib import Path

    from dispatcher.commands.explain import explain_objects, print_table
    from dispatcher.fleet.fleetfile import load_fleet
    from dispatcher.placement.offline import fleet_snapshots

    fleet = Path(__file__).resolve().parents[4] / "clusters" / "local.yaml"
    members = [replace(m, gang_mechanism=WORKLOAD_API if m.name == "member-1" else NONE)
               for m in fleet_snapshots(load_fleet(str(fleet)))]
    obj = jobset()
    obj["metadata"]["annotations"] = {"dispatcher.io/cluster": "member-1"}
    (report,), code = explain_objects([obj], members=members, catalog=CATALOG, policy=None,
                                      default_policy="most-free", source="test")
    assert code == 0 and report["gangMechanism"] == WORKLOAD_API
    print_table(report, wide=False)
    assert "gang mechanism on member-1: workload-api" in capsys.readouterr().out


def _disagg_planned(mechanism: Any, **fields: Any) -> tuple[dict[str, Any], Any, Definition]:
    from tests.builders.disagg import DISAGG_DEFINITION, disagg_jobset

    (definition,) = load_text(DISAGG_DEFINITION, source="test")
    obj = disagg_jobset("llm", namespace="team-a", **fields)
    obj["metadata"]["uid"] = "uid-1"
    resolution = Catalog([definition]).resolve(obj)
    copy = build_copy(obj, hub_id=HUB, definition=definition)
    found = plan(mechanism=mechanism, definition=definition, gangs=resolution.demand.gangs,
                 units=gang_components(definition, default_name="llm"), copy=copy,
                 hub_id=HUB, instances=[i for c in resolution.components for i in c.instances])
    return copy, found, definition


def test_sub_groups_become_a_composite_pod_group_over_a_pod_group_each() -> None:
    """1.37's hierarchical gang (k8s.io/api v0.37.2 scheduling/v1alpha3 CompositePodGroup,
    v1beta1 PodGroupSpec.parentCompositePodGroupName and WorkloadReference): the Workload
    holds the templates every group names, the composite needs both children, each child
    its own pods."""
    copy, found, definition = _disagg_planned(COMPOSITE_V1ALPHA3, prefill=1, decode=2)
    assert found.mechanism == COMPOSITE_V1ALPHA3 and not found.skipped
    assert found.notes == ("gang serve: a CompositePodGroup jobset-llm-serve that needs all 2 "
                           "of its sub-group gangs: prefill (1), decode (2)",)
    workload, root, prefill, decode = found.objects
    assert (workload["apiVersion"], workload["kind"]) == ("scheduling.k8s.io/v1beta1",
                                                          "Workload")
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "llm"},
        "compositePodGroupTemplates": [{
            "name": "serve", "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "podGroupTemplates": [
                {"name": "prefill", "schedulingPolicy": {"gang": {"minCount": 1}}},
                {"name": "decode", "schedulingPolicy": {"gang": {"minCount": 2}}}]}]}
    assert (root["apiVersion"], root["kind"]) == (COMPOSITE_POD_GROUP.api_version,
                                                  "CompositePodGroup")
    assert root["metadata"]["name"] == "jobset-llm-serve"
    assert root["spec"] == {"workloadRef": {"workloadName": "jobset-llm",
                                            "templateName": "serve"},
                            "schedulingPolicy": {"gang": {"minGroupCount": 2}}}
    for group, role, count in ((prefill, "prefill", 1), (decode, "decode", 2)):
        assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1",
                                                        "PodGroup")
        assert group["metadata"]["name"] == f"jobset-llm-serve-{role}"
        assert group["spec"] == {
            "parentCompositePodGroupName": "jobset-llm-serve",
            "workloadRef": {"workloadName": "jobset-llm", "templateName": role},
            "schedulingPolicy": {"gang": {"minCount": count}}}
    for obj in found.objects:
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"][ORIGIN_LABEL] == HUB
    joined = join(copy, definition, found)
    by_role = {r["name"]: r["template"]["spec"]["template"]["spec"]
               for r in joined["spec"]["replicatedJobs"]}
    assert by_role["prefill"]["schedulingGroup"] == {"podGroupName": "jobset-llm-serve-prefill"}
    assert by_role["decode"]["schedulingGroup"] == {"podGroupName": "jobset-llm-serve-decode"}
    assert mechanism_of(joined) == COMPOSITE_V1ALPHA3  # an update joins the same way


def test_without_composite_pod_groups_the_sub_groups_are_one_gang_and_explain_says_so(
        ) -> None:
    _, found, _ = _disagg_planned(PODGROUP_V1BETA1)
    (group,) = found.objects
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    assert not found.skipped and found.notes == (
        "gang serve: its sub-groups are held as one gang (the member serves no "
        "CompositePodGroup)",)


def test_a_composite_member_holds_plain_gangs_as_v1beta1_pod_groups() -> None:
    copy, found = _planned(jobset(), COMPOSITE_V1ALPHA3)
    (group,) = found.objects
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert found.mechanism == COMPOSITE_V1ALPHA3 and not found.skipped
    for template in _templates(join(copy, JOBSET, found)):
        assert template["spec"]["schedulingGroup"] == {"podGroupName": "jobset-train-train"}


def test_a_sub_group_without_a_pod_keeps_the_gang_whole_and_says_why() -> None:
    _, found, _ = _disagg_planned(COMPOSITE_V1ALPHA3, prefill=0)
    assert [o["kind"] for o in found.objects] == ["PodGroup"]
    assert found.notes == ("gang serve: sub-groups not held as a CompositePodGroup: "
                           "sub-group prefill holds no pod",)


def test_composite_pod_groups_are_discovered_first_and_noted_as_the_built_in_api() -> None:
    served = {API_OF[PODGROUP_V1BETA1], COMPOSITE_POD_GROUP}
    assert discovered(served) == COMPOSITE_V1ALPHA3
    assert effective(WORKLOAD_API, COMPOSITE_V1ALPHA3) == COMPOSITE_V1ALPHA3
    assert builtin_at("v1.37.2") == PODGROUP_V1BETA1  # what a gate-off 1.37 lacks
    assert note("v1.37.2", COMPOSITE_V1ALPHA3) == ""


def test_more_sub_groups_than_a_composite_template_holds_stay_one_gang() -> None:
    """k8s.io/api v0.37.2: ``podGroupTemplates`` of a composite template, at most 8."""
    from dataclasses import replace as swap

    from dispatcher.workloads.model import GangGroup, GangScheduling
    from tests.builders.disagg import disagg_jobset

    _, _, definition = _disagg_planned(COMPOSITE_V1ALPHA3)
    wide = GangScheduling(form="podGroup", groups=(GangGroup(
        name="serve", members=("prefill",) * 5 + ("decode",) * 4),))
    obj = disagg_jobset("llm", namespace="team-a")
    resolution = Catalog([definition]).resolve(obj)
    found = plan(mechanism=COMPOSITE_V1ALPHA3, definition=swap(definition, gangs=wide),
                 gangs=resolution.demand.gangs,
                 units=gang_components(definition, default_name="llm"),
                 copy=build_copy(obj, hub_id=HUB, definition=definition), hub_id=HUB,
                 instances=[i for c in resolution.components for i in c.instances])
    assert [o["kind"] for o in found.objects] == ["PodGroup"]
    assert found.notes == ("gang serve: sub-groups not held as a CompositePodGroup: 9 "
                           "sub-groups, at most 8",)
