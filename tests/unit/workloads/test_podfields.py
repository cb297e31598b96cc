"""The scheduling fields a workload's pod templates set, found by resolve in every pod
template its definition names, each with its JSON path (docs/security.md, finding 5).

Plain manifests of several kinds through the built-in catalog: a Job, a JobSet's
replicated jobs, a RayCluster's head and worker groups, an MPIJob's replica map, a KServe
predictor (a fragmented pod spec) and its transformer (a bare pod spec).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.podfields import scheduling_fields
from dispatcher.workloads.resolve import resolve

CATALOG = Catalog.builtin()


def _pod(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": 1}}}], **fields}


def _found(obj: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(f.path, f.field, f.value) for f in resolve(obj, catalog=CATALOG).scheduling]


def test_a_plain_job_sets_nothing() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": _pod(schedulerName="", priorityClassName=None)}}}
    assert _found(job) == []


def test_a_job_names_each_field_by_its_path() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": _pod(nodeName="gpu-7", priority=0,
                                               priorityClassName="system-node-critical",
                                               schedulerName="volcano")}}}
    assert _found(job) == [
        ("spec.template.spec.nodeName", "nodeName", "gpu-7"),
        ("spec.template.spec.priority", "priority", 0),
        ("spec.template.spec.priorityClassName", "priorityClassName", "system-node-critical"),
        ("spec.template.spec.schedulerName", "schedulerName", "volcano"),
    ]


def test_a_jobset_is_read_in_every_replicated_job() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js"}, "spec": {"replicatedJobs": [
                  {"name": "driver", "replicas": 1,
                   "template": {"spec": {"template": {"spec": _pod()}}}},
                  {"name": "workers", "replicas": 2, "template": {"spec": {
                      "parallelism": 2, "template": {"spec": _pod(nodeName="n1")}}}}]}}
    assert _found(jobset) == [
        ("spec.replicatedJobs[1].template.spec.template.spec.nodeName", "nodeName", "n1")]


def test_a_raycluster_is_read_in_its_head_and_every_worker_group() -> None:
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
           "spec": {"headGroupSpec": {"template": {"spec": _pod(
               priorityClassName="system-cluster-critical")}},
                    "workerGroupSpecs": [
                        {"groupName": "small", "replicas": 1,
                         "template": {"spec": _pod()}},
                        {"groupName": "big", "replicas": 2,
                         "template": {"spec": _pod(schedulerName="my-scheduler")}}]}}
    assert _found(ray) == [
        ("spec.headGroupSpec.template.spec.priorityClassName", "priorityClassName",
         "system-cluster-critical"),
        ("spec.workerGroupSpecs[1].template.spec.schedulerName", "schedulerName",
         "my-scheduler"),
    ]


def test_an_mpijob_is_read_in_every_replica_spec() -> None:
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "m"},
           "spec": {"mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": _pod()}},
               "Worker": {"replicas": 2, "template": {"spec": _pod(nodeName="n2")}}}}}
    assert _found(mpi) == [
        ("spec.mpiReplicaSpecs.Worker.template.spec.nodeName", "nodeName", "n2")]


def test_a_kserve_predictor_and_transformer_are_read_too() -> None:
    """The predictor is a fragmented pod spec (its fields inline, each with its own
    fragment path); the transformer a bare pod spec."""
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "s"}, "spec": {
                "predictor": {"nodeName": "n3", "priorityClassName": "high",
                              "model": {"modelFormat": {"name": "sklearn"},
                                        "resources": {"limits": {"nvidia.com/gpu": 1}}}},
                "transformer": _pod(schedulerName="other")}}
    assert _found(isvc) == [
        ("spec.predictor.nodeName", "nodeName", "n3"),
        ("spec.predictor.priorityClassName", "priorityClassName", "high"),
        ("spec.transformer.schedulerName", "schedulerName", "other"),
    ]


@pytest.mark.parametrize(("spec", "found"), [
    (None, ()), ([], ()), ({}, ()),
    ({"nodeName": ""}, ()),                       # "" is unset for the apiserver
    ({"schedulerName": "default-scheduler"}, ()),  # what the hub defaults a Job's to
    ({"nodeName": None, "priority": None}, ()),
    ({"priority": 0}, (("priority", 0),)),        # 0 is a value
    ({"schedulerName": 7}, (("schedulerName", 7),)),  # a wrong type is still judged
    ({"tolerations": [{"operator": "Exists"}], "nodeSelector": {"a": "b"}}, ()),
])
def test_what_counts_as_set(spec: Any, found: tuple[tuple[str, Any], ...]) -> None:
    assert scheduling_fields(spec) == found
