"""control.core.topology on plain data: a copy's gangs keep to the domains placement chose.

Covered: a JobSet (one gang) keeps both templates in its rack; gangs per replicated job
(``podGroups`` per instance) get their own domain on their own template; a Job (one gang)
gets a required term; the user's required terms are each narrowed, never widened (an OR
of zones stays an OR, each ANDed with the rack), an empty term stays empty, preferred
terms and pod affinity are kept, the input is not modified; a gang no longer in the
resolution pins nothing; a malformed affinity is a MutationError; the Dispatch record
keeps the domains and a requeue drops them. The real member's scheduler obeying it is in
tests/integration/test_dispatch_real_topology.py.

Planned nodes (``steer``): every GPU template gets one preferred term per planned node
(sorted, once each: the apiserver takes one value per node field requirement), beside the
domain's required term and the user's own preferred terms; a CPU-only template (an MPIJob
launcher) gets none; applying it twice (an update recomputing the plan) adds nothing; a
preferred list that is not a list is a MutationError; an update recomputes the terms
only on a copy that carries them (``carries_planned``: a Job made before them keeps its
immutable template).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.topology import (
    PREFERRED,
    REQUIRED,
    carries_planned,
    gpu_templates,
    keep_in_domains,
    narrowed,
    preferring,
    steer,
)
from dispatcher.placement.model import GangDomain, Verdict
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.model import Definition
from dispatcher.workloads.resolve import resolve_with

CATALOG = Catalog.builtin()
ROOT = Path(__file__).resolve().parents[4]
RACK = "example.com/rack"


def _pod(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": 8}}}], **extra}


def _jobset(*jobs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "team-a", "uid": "u1"},
            "spec": {"replicatedJobs": [
                {"name": name, "replicas": 1, "template": {"spec": {
                    "parallelism": 2, "completions": 2, "template": {"spec": pod}}}}
                for name, pod in jobs]}}


def _per_job_gangs() -> Definition:
    """The built-in JobSet definition with one gang per replicated job (``podGroups``
    ``gangPer: instance``), so two gangs have two templates."""
    document = yaml.safe_load((ROOT / "definitions" / "jobset.yaml").read_text())
    document["metadata"]["name"] = "jobset-per-job"
    document["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroups": [
        {"name": "job", "members": [{"componentName": "replicatedjob"}],
         "gangPer": "instance"}]}}
    (definition,) = load_text(yaml.safe_dump(document), source="t.yaml")
    return definition


def _keep(obj: dict[str, Any], domains: list[GangDomain],
          definition: Definition | None = None) -> dict[str, Any]:
    definition = definition or CATALOG.find(obj["apiVersion"], obj["kind"])
    assert definition is not None
    resolution = resolve_with(definition, obj)
    return keep_in_domains(obj, definition, domains=domains, gangs=resolution.demand.gangs,
                           instances={c.name: [i.id for i in c.instances]
                                      for c in resolution.components})


def _required(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = \
        pod_spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    return terms


def _rack(value: str) -> dict[str, Any]:
    return {"key": RACK, "operator": "In", "values": [value]}


def test_a_jobset_gang_keeps_every_template_in_its_rack() -> None:
    obj = _jobset(("leader", _pod()), ("workers", _pod()))
    (gang,) = CATALOG.resolve(obj).demand.gangs  # the whole JobSet is one gang
    before = copy.deepcopy(obj)
    out = _keep(obj, [GangDomain(gangs=(gang.name,), level="rack", node_label=RACK,
                                 value="r1")])
    assert obj == before
    specs = [job["template"]["spec"]["template"]["spec"] for job in out["spec"]["replicatedJobs"]]
    assert [_required(s) for s in specs] == [[{"matchExpressions": [_rack("r1")]}]] * 2


def test_each_gang_keeps_to_its_own_rack_on_its_own_template() -> None:
    definition = _per_job_gangs()
    obj = _jobset(("leader", _pod()), ("workers", _pod()))
    gangs = [g.name for g in resolve_with(definition, obj).demand.gangs]
    assert len(gangs) == 2
    out = _keep(obj, [GangDomain(gangs=(gangs[0],), level="rack", node_label=RACK, value="r1"),
                      GangDomain(gangs=(gangs[1],), level="rack", node_label=RACK, value="r2")],
                definition)
    specs = [job["template"]["spec"]["template"]["spec"] for job in out["spec"]["replicatedJobs"]]
    assert _required(specs[0]) == [{"matchExpressions": [_rack("r1")]}]
    assert _required(specs[1]) == [{"matchExpressions": [_rack("r2")]}]


def test_a_job_gets_one_required_term() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "eval", "namespace": "team-a", "uid": "u1"},
           "spec": {"parallelism": 2, "completions": 2,
                    "template": {"spec": {**_pod(), "restartPolicy": "Never"}}}}
    name = CATALOG.resolve(job).demand.gangs[0].name
    out = _keep(job, [GangDomain(gangs=(name,), level="rack", node_label=RACK, value="r3")])
    assert _required(out["spec"]["template"]["spec"]) == [{"matchExpressions": [_rack("r3")]}]


def test_the_users_affinity_is_narrowed_never_widened() -> None:
    zone = "topology.kubernetes.io/zone"
    user = {
        REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": zone, "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]},
            {},
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [
                {"key": "fast", "operator": "Exists"}]}}],
    }
    before = copy.deepcopy(user)
    out = narrowed(user, [(RACK, "r1")], where="t")
    assert user == before
    assert out[REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": zone, "operator": "In", "values": ["a"]}, _rack("r1")]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}],
         "matchExpressions": [_rack("r1")]},
        {},  # matches no node: adding the rack would make it match some
    ]
    assert out["preferredDuringSchedulingIgnoredDuringExecution"] == \
        user["preferredDuringSchedulingIgnoredDuringExecution"]
    assert narrowed(out, [(RACK, "r1")], where="t") == out  # idempotent


def test_pod_affinity_and_other_fields_stay() -> None:
    pod_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": RACK, "labelSelector": {"matchLabels": {"app": "x"}}}]}
    obj = _jobset(("workers", _pod(affinity={"podAffinity": pod_affinity},
                                   nodeSelector={"nvidia.com/gpu.product": "H100"})))
    name = CATALOG.resolve(obj).demand.gangs[0].name
    out = _keep(obj, [GangDomain(gangs=(name,), level="rack", node_label=RACK, value="r1")])
    spec = out["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["affinity"]["podAffinity"] == pod_affinity
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert _required(spec) == [{"matchExpressions": [_rack("r1")]}]


def test_a_gang_gone_from_the_resolution_pins_nothing() -> None:
    obj = _jobset(("workers", _pod()))
    out = _keep(obj, [GangDomain(gangs=("gone",), level="rack", node_label=RACK, value="r1")])
    assert out == obj


def test_a_malformed_affinity_is_a_mutation_error() -> None:
    with pytest.raises(MutationError, match="nodeSelectorTerms is not a list"):
        narrowed({REQUIRED: {"nodeSelectorTerms": "all"}}, [(RACK, "r1")], where="t")
    with pytest.raises(MutationError, match="nodeAffinity is not an object"):
        narrowed(["x"], [(RACK, "r1")], where="t")


def test_the_record_keeps_the_domains_until_a_requeue() -> None:
    from dispatcher.control.core import record as records
    from dispatcher.placement.model import Decision

    domain = GangDomain(gangs=("train",), level="rack", node_label=RACK, value="r2")
    decision = Decision(policy="most-free", pods=2, gpus=16, gangs=1, verdicts=(),
                        chosen="m1", assignment=(), summary="placed", domains=(domain,))
    decision = replace(decision, verdicts=(Verdict(member="m1", feasible=True, reason="",
                                                   free=16, domains=(domain,)),))
    status = records.placed_status(decision=decision, reservation=None, attempt=1, now=0.0)
    assert status["decision"]["domains"] == [
        {"gangs": ["train"], "level": "rack", "nodeLabel": RACK, "value": "r2"}]
    read = records.read({"status": status})
    assert read.domains == (domain,)
    junk = records.read({"status": {"decision": {"domains": [{"gangs": "x"}, 3]}}})
    assert junk.domains == ()
    requeued = records.requeued_status(record=read, reason="lost", outcome="lost", now=1.0)
    assert requeued["decision"]["domains"] is None  # a merge patch drops them


def test_the_first_decision_made_at_create_carries_the_domains() -> None:
    from dispatcher.control.core import record as records
    from dispatcher.placement.model import Decision

    domain = GangDomain(gangs=("train",), level="rack", node_label=RACK, value="r1")
    decision = Decision(policy="most-free", pods=2, gpus=16, gangs=1,
                        verdicts=(Verdict(member="m1", feasible=True, reason="", free=16,
                                          domains=(domain,)),),
                        chosen="m1", assignment=(), summary="placed", domains=(domain,))
    spec = records.first_placement(decision=decision, reservation=None, now=0.0, demand={})
    assert records.read({"spec": spec}).domains == (domain,)  # read before Submitted


def _steer(obj: dict[str, Any], nodes: list[str], domains: list[GangDomain] | None = None
           ) -> dict[str, Any]:
    definition = CATALOG.find(obj["apiVersion"], obj["kind"])
    assert definition is not None
    resolution = resolve_with(definition, obj)
    return steer(obj, definition, domains=domains or [], nodes=nodes,
                 gangs=resolution.demand.gangs, gpu=gpu_templates(resolution),
                 instances={c.name: [i.id for i in c.instances]
                            for c in resolution.components})


def _planned(*nodes: str) -> list[dict[str, Any]]:
    """One term per node: the apiserver refuses a node field requirement of two values."""
    return [{"weight": 100, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}} for node in nodes]


def test_gpu_templates_prefer_the_planned_nodes_beside_the_domain() -> None:
    user = {"weight": 5, "preference": {"matchExpressions": [
        {"key": "disk", "operator": "In", "values": ["ssd"]}]}}
    obj = _jobset(("leader", _pod()), ("workers", _pod(affinity={"nodeAffinity": {
        PREFERRED: [user]}})))
    (gang,) = CATALOG.resolve(obj).demand.gangs
    before = copy.deepcopy(obj)
    out = _steer(obj, ["n2", "n1", "n2"], [GangDomain(gangs=(gang.name,), level="rack",
                                                      node_label=RACK, value="r1")])
    assert obj == before
    leader, workers = (job["template"]["spec"]["template"]["spec"]
                       for job in out["spec"]["replicatedJobs"])
    assert leader["affinity"]["nodeAffinity"][PREFERRED] == _planned("n1", "n2")
    assert workers["affinity"]["nodeAffinity"][PREFERRED] == [user, *_planned("n1", "n2")]
    assert _required(leader) == _required(workers) == [{"matchExpressions": [_rack("r1")]}]


def test_a_cpu_only_template_is_not_steered_onto_gpu_nodes() -> None:
    launcher = {"containers": [{"name": "launcher", "image": "mpi"}]}
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
              "metadata": {"name": "mpi", "namespace": "team-a", "uid": "u1"},
              "spec": {"mpiReplicaSpecs": {
                  "Launcher": {"replicas": 1, "template": {"spec": launcher}},
                  "Worker": {"replicas": 2, "template": {"spec": _pod()}}}}}
    out = _steer(mpijob, ["n1"])
    specs = out["spec"]["mpiReplicaSpecs"]
    assert "affinity" not in specs["Launcher"]["template"]["spec"]
    assert specs["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][PREFERRED] == \
        _planned("n1")


def test_steering_twice_adds_nothing_and_no_nodes_change_nothing() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "eval", "namespace": "team-a", "uid": "u1"},
           "spec": {"parallelism": 2, "completions": 2,
                    "template": {"spec": {**_pod(), "restartPolicy": "Never"}}}}
    once = _steer(job, ["n1"])
    assert _steer(once, ["n1"]) == once
    assert _steer(job, []) == job


def test_a_preferred_list_that_is_not_a_list_is_a_mutation_error() -> None:
    with pytest.raises(MutationError, match="not a list"):
        preferring({PREFERRED: {"weight": 1}}, ["n1"], where="w")
    assert preferring(None, ["n1"], where="w") == {PREFERRED: _planned("n1")}


def test_only_a_copy_made_with_the_terms_carries_them() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "eval", "namespace": "team-a", "uid": "u1"},
           "spec": {"parallelism": 2, "completions": 2,
                    "template": {"spec": {**_pod(), "restartPolicy": "Never"}}}}
    made = _steer(job, ["n1", "n2"])
    assert carries_planned(made["spec"], ["n2", "n1"])
    assert not carries_planned(made["spec"], ["n1", "n3"])
    assert not carries_planned(job["spec"], ["n1"])
    assert not carries_planned(made["spec"], [])
