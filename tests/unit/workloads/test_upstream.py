"""Upstream definitions evaluate like upstream (issue 15 part 4).

Every example definition of run-ai/karta ``docs/examples`` (copied into ``upstream/`` with
its origin and license) is run over running, completed and failed objects of its kind, as
the framework's controller writes them. The expected lists are upstream's own result:
every matched status in upstream's order (Running, Failed, Completed, Initializing,
Degraded), ``unknown`` for none; upstream definitions have no ``statusPrecedence``.

Where upstream's mapping cannot give the right answer the case says so (``upstream:``):
those are limits of the example definitions (an absent condition never matches, so a
matcher that wants ``Succeeded=False`` never matches a running job, whose controller only
adds ``Succeeded`` when it finishes), not of the evaluation. The built-in catalog
definitions get them right (see ``catalog/*/*.frames.yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.resolve import status_of

UPSTREAM = Path(__file__).parent / "upstream"


def _conds(**types: str) -> dict[str, Any]:
    return {"conditions": [{"type": t, "status": s} for t, s in types.items()]}


# (definition file, apiVersion, kind, case, .status, expected statuses)
CASES: list[tuple[str, str, str, str, dict[str, Any], list[str]]] = [
    # training-operator v1: conditions are added as they happen; Running flips to False
    # when the job finishes (filterOutCondition).
    ("pytorch", "kubeflow.org/v1", "PyTorchJob", "finished",
     _conds(Created="True", Running="False", Succeeded="True"), ["completed", "initializing"]),
    ("pytorch", "kubeflow.org/v1", "PyTorchJob", "failed",
     _conds(Created="True", Running="False", Failed="True"), ["failed", "initializing"]),
    ("pytorch", "kubeflow.org/v1", "PyTorchJob", "running, every condition written",
     _conds(Created="True", Running="True", Succeeded="False", Failed="False"),
     ["running", "initializing"]),
    # upstream: running wants Succeeded/Failed False, which a running job does not have
    ("pytorch", "kubeflow.org/v1", "PyTorchJob", "running as the operator writes it",
     _conds(Created="True", Running="True"), ["initializing"]),
    ("mpijob", "kubeflow.org/v1", "MPIJob", "finished",
     _conds(Created="True", Running="False", Succeeded="True"), ["completed", "initializing"]),
    ("mpijob", "kubeflow.org/v1", "MPIJob", "failed",
     _conds(Created="True", Running="False", Failed="True"), ["failed", "initializing"]),
    ("mpijob", "kubeflow.org/v1", "MPIJob", "running, every condition written",
     _conds(Created="True", Running="True", Succeeded="False", Failed="False"), ["running"]),
    # upstream: as PyTorchJob, and initializing wants Running=False, absent before start
    ("mpijob", "kubeflow.org/v1", "MPIJob", "running as the operator writes it",
     _conds(Created="True", Running="True"), ["unknown"]),
    # JobSet: Completed / Failed only appear at the end; StartupPolicy* only with a
    # startupPolicy. upstream: running wants Completed=False and Failed=False.
    ("jobset", "jobset.x-k8s.io/v1alpha2", "JobSet", "finished",
     _conds(Completed="True"), ["completed"]),
    ("jobset", "jobset.x-k8s.io/v1alpha2", "JobSet", "failed", _conds(Failed="True"),
     ["failed"]),
    ("jobset", "jobset.x-k8s.io/v1alpha2", "JobSet", "running in order, startup done",
     _conds(StartupPolicyCompleted="True"), ["unknown"]),
    ("jobset", "jobset.x-k8s.io/v1alpha2", "JobSet", "starting in order",
     _conds(StartupPolicyInProgress="True"), ["initializing"]),
    # Knative: services never complete; upstream maps no failed state
    ("knative-serving", "serving.knative.dev/v1", "Service", "running",
     _conds(ConfigurationsReady="True", Ready="True", RoutesReady="True"), ["running"]),
    ("knative-serving", "serving.knative.dev/v1", "Service", "failed revision",
     _conds(ConfigurationsReady="False", Ready="False", RoutesReady="False"), ["unknown"]),
    ("kserve", "serving.kserve.io/v1beta1", "InferenceService", "running",
     _conds(IngressReady="True", LatestDeploymentReady="True",
            PredictorConfigurationReady="True", PredictorReady="True", Ready="True",
            RoutesReady="True"), ["running"]),
    ("kserve", "serving.kserve.io/v1beta1", "InferenceService", "failed",
     _conds(PredictorConfigurationReady="False", PredictorReady="False", Ready="False",
            RoutesReady="False"), ["failed"]),
    # LWS: exactly one of Available/Progressing/UpdateInProgress is True; UpdateInProgress
    # is absent until the first update. upstream: running wants UpdateInProgress=False,
    # and initializing and failed are the same matcher.
    ("lws", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "running after an update",
     _conds(Available="True", Progressing="False", UpdateInProgress="False"), ["running"]),
    ("lws", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "running, never updated",
     _conds(Available="True", Progressing="False"), ["unknown"]),
    ("lws", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "nothing available",
     _conds(Available="False", Progressing="False", UpdateInProgress="False"),
     ["failed", "initializing"]),
    ("milvus", "milvus.io/v1beta1", "Milvus", "running",
     _conds(EtcdReady="True", StorageReady="True", MsgStreamReady="True",
            MilvusReady="True"), ["running"]),
    ("milvus", "milvus.io/v1beta1", "Milvus", "dependencies down",
     _conds(EtcdReady="False", StorageReady="False", MsgStreamReady="False",
            MilvusReady="False"), ["failed", "initializing"]),
    ("nimservice", "apps.nvidia.com/v1alpha1", "NIMService", "running",
     {"state": "Ready"}, ["running"]),
    ("nimservice", "apps.nvidia.com/v1alpha1", "NIMService", "failed",
     {"state": "Failed"}, ["failed"]),
    ("nimservice", "apps.nvidia.com/v1alpha1", "NIMService", "starting",
     {"state": "NotReady"}, ["initializing"]),
    ("raycluster", "ray.io/v1", "RayCluster", "running", {"state": "ready"}, ["running"]),
    ("raycluster", "ray.io/v1", "RayCluster", "failed", {"state": "failed"}, ["failed"]),
    ("rayjob", "ray.io/v1", "RayJob", "running",
     {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}, ["running"]),
    ("rayjob", "ray.io/v1", "RayJob", "finished",
     {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}, ["completed"]),
    ("rayjob", "ray.io/v1", "RayJob", "failed",
     {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}, ["failed"]),
    ("dynamo", "nvidia.com/v1alpha1", "DynamoGraphDeployment", "running",
     {"state": "successful"}, ["running"]),
    ("dynamo", "nvidia.com/v1alpha1", "DynamoGraphDeployment", "failed",
     {"state": "failed"}, ["failed"]),
]


@pytest.fixture(scope="module")
def upstream() -> Catalog:
    return Catalog.load([UPSTREAM])


def test_every_upstream_example_is_covered(upstream: Catalog) -> None:
    files = {p.stem for p in UPSTREAM.glob("*.yaml")}
    assert files == {case[0] for case in CASES}
    assert len(upstream) == len(files)
    for definition in upstream.definitions:
        assert "statusPrecedence" not in str(definition.document)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[2]}-{c[3]}" for c in CASES])
def test_upstream_definition_status(
        upstream: Catalog, case: tuple[str, str, str, str, dict[str, Any], list[str]]) -> None:
    source, api_version, kind, name, status, expected = case
    definition = upstream.find(api_version, kind)
    assert definition is not None and definition.source.endswith(f"{source}.yaml")
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
           "spec": {}, "status": status}
    reading = status_of(obj, catalog=upstream)
    assert list(reading.statuses) == expected, name
    assert reading.status == expected[0]


def test_resuming_alias_ranks_first_but_initializing_after_completed() -> None:
    from dispatcher.workloads.statusdef import precedence_rank

    keys = ["initializing", "completed", "resuming", "running", "failed", "degraded"]
    assert sorted(keys, key=lambda k: precedence_rank(k, [])) == [
        "resuming", "running", "failed", "completed", "initializing", "degraded"]
    # a listed generic status goes first; its aliases keep upstream's order among them
    assert sorted(keys, key=lambda k: precedence_rank(k, ["initializing"])) == [
        "resuming", "initializing", "running", "failed", "completed", "degraded"]


def test_catalog_pytorchjob_reads_a_running_job_as_running() -> None:
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"},
           "spec": {"pytorchReplicaSpecs": {}},
           "status": _conds(Created="True", Running="True")}
    assert status_of(obj, catalog=Catalog.builtin()).status == "running"
