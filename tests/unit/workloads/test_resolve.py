"""Resolution of invented shapes: instances, pods, GPUs, shapes, status; both formats."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import EvaluationError, ObjectError, TemplateError
from dispatcher.workloads.jqrun import Limits
from dispatcher.workloads.resolve import resolve_with

from .shapes import (
    BATCHSET,
    BATCHSET_OBJ,
    FRAGSERVE,
    FRAGSERVE_OBJ,
    TRAINRUN,
    TRAINRUN_OBJ,
    define,
    edit,
)


@pytest.mark.parametrize("fmt", ["karta", "ri"])
def test_array_of_replicated_jobs_counts_replicas_times_parallelism(fmt: str) -> None:
    result = resolve_with(define(BATCHSET, fmt), BATCHSET_OBJ)
    out = result.to_dict()
    (comp,) = out["components"]
    assert comp["instances"] == [
        {"id": "leader", "replicas": 1, "pods": 1, "gpusPerPod": 4},
        {"id": "workers", "replicas": 2, "pods": 6, "gpusPerPod": 8},
    ]
    assert (out["pods"], out["gpus"]) == (7, 4 + 6 * 8)
    (gang,) = out["gangs"]
    assert gang["name"] == "train" and gang["pods"] == gang["minPods"] == 7
    assert gang["podShapes"] == [
        {"count": 1, "gpus": 4, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "cpu": "16",
         "memory": "128Gi"},
        {"count": 6, "gpus": 8, "gpuProduct": None, "cpu": None, "memory": None}]
    assert out["status"] == "running" and out["statuses"] == ["running"]
    assert list(out) == ["apiVersion", "kind", "namespace", "name", "definition", "status",
                         "statuses", "pods", "gpus", "gangs", "components"]
    assert result.demand.gpus == out["gpus"] and result.definition_name == "demo-batchset"


def test_both_formats_give_identical_results() -> None:
    for text, obj in ((BATCHSET, BATCHSET_OBJ), (TRAINRUN, TRAINRUN_OBJ),
                      (FRAGSERVE, FRAGSERVE_OBJ)):
        karta = resolve_with(define(text, "karta"), obj).to_dict()
        ri = resolve_with(define(text, "ri"), obj).to_dict()
        assert karta == ri


def test_map_of_roles_sorted_ids_and_summed_minimum() -> None:
    """Reference §1.13: ids sorted (gojq map order), gang minimum 1 + 2 = 3, not multiplied."""
    out = resolve_with(define(TRAINRUN), TRAINRUN_OBJ).to_dict()
    assert [i["id"] for i in out["components"][0]["instances"]] == ["chief", "worker"]
    assert [i["pods"] for i in out["components"][0]["instances"]] == [1, 4]
    (gang,) = out["gangs"]
    assert (gang["name"], gang["pods"], gang["minPods"], gang["gpus"]) == ("run", 5, 3, 8)


def test_insertion_order_does_not_change_alignment() -> None:
    obj = copy.deepcopy(TRAINRUN_OBJ)
    obj["spec"]["roles"] = dict(reversed(list(obj["spec"]["roles"].items())))
    assert resolve_with(define(TRAINRUN), obj).to_dict() == \
        resolve_with(define(TRAINRUN), TRAINRUN_OBJ).to_dict()


def test_fragmented_spec_resources_affinity_product_and_autoscaled_minimum() -> None:
    result = resolve_with(define(FRAGSERVE), FRAGSERVE_OBJ)
    out = result.to_dict()
    assert out["pods"] == 1  # no replicas, min 0 -> at least 1
    (shape,) = out["gangs"][0]["podShapes"]
    assert shape == {"count": 1, "gpus": 1, "gpuProduct": "NVIDIA-A100-SXM4-80GB",
                     "cpu": None, "memory": "16Gi"}
    (pod_shape,) = result.demand.gangs[0].pod_shapes
    assert pod_shape.tolerations[0].key == "gpu" and pod_shape.tolerations[0].operator == "Exists"
    assert out["status"] == "running"


@pytest.mark.parametrize(("spec", "pods"), [
    ({"replicas": 3}, 3), ({"replicas": 0}, 0), ({"autoscaling": {"min": 2}}, 2),
    ({"replicas": None, "autoscaling": {"min": 4}}, 4), ({}, 1)])
def test_replicas_rule(spec: dict[str, Any], pods: int) -> None:
    obj = copy.deepcopy(FRAGSERVE_OBJ)
    obj["spec"].pop("autoscaling")
    obj["spec"].update(spec)
    out = resolve_with(define(FRAGSERVE), obj).to_dict()
    assert out["pods"] == pods
    assert out["gangs"] == [] if pods == 0 else out["gangs"][0]["pods"] == pods


def test_defined_but_empty_is_not_an_error() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"] = []
    out = resolve_with(define(BATCHSET), obj).to_dict()
    assert (out["pods"], out["gangs"], out["components"]) == (0, [], [
        {"name": "job", "instances": []}])


def test_string_replicas_is_a_clear_error() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][1]["replicas"] = "2"
    with pytest.raises(EvaluationError) as caught:
        resolve_with(define(BATCHSET), obj)
    error = caught.value
    assert error.field.endswith("scaleDefinition.replicasPath")
    assert "tonumber" in str(error) and error.name == "train"


def test_iterating_null_names_expression_and_field() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    del obj["spec"]["jobs"]
    with pytest.raises(EvaluationError) as caught:
        resolve_with(define(BATCHSET), obj)
    assert caught.value.expression == ".spec.jobs[].name"
    assert "Cannot iterate over null" in str(caught.value)


def test_count_mismatch_is_an_error() -> None:
    """§2.7: without instanceIdPath a path must give exactly one result."""
    text = edit(FRAGSERVE, lambda d: d["spec"]["structureDefinition"]["rootComponent"][
        "scaleDefinition"].update(replicasPath=".spec.many[]"))
    obj = copy.deepcopy(FRAGSERVE_OBJ)
    obj["spec"]["many"] = [1, 2]
    with pytest.raises(EvaluationError, match=r"instance ids count \(1\) does not match "
                                              r"results count \(2\)"):
        resolve_with(define(text), obj)


def test_empty_instance_id_is_an_error_listing_ids() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][0]["name"] = None
    with pytest.raises(EvaluationError, match=r"empty string values \[,workers\]"):
        resolve_with(define(BATCHSET), obj)


def test_alternative_trap_is_reproduced_not_fixed() -> None:
    """§2.7: `.a[].r // 1` skips items, so counts mismatch (upstream errors the same way)."""
    text = edit(BATCHSET, lambda d: d["spec"]["structureDefinition"]["childComponents"][0][
        "scaleDefinition"].update(replicasPath=".spec.jobs[].replicas // 1"))
    obj = copy.deepcopy(BATCHSET_OBJ)
    del obj["spec"]["jobs"][0]["replicas"]
    obj["spec"]["jobs"].append({"name": "third", "replicas": 5, "template": {}})
    result = resolve_with(define(text), obj).to_dict()
    # two truthy values for three ids: padded at the end, so "third" gets no replicas -> 1
    assert [i["replicas"] for i in result["components"][0]["instances"]] == [2, 5, 1]


def test_float_numbers_are_integers_and_non_integral_is_an_error() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][1]["replicas"] = 2.0
    assert resolve_with(define(BATCHSET), obj).demand.pods == 7
    obj["spec"]["jobs"][1]["replicas"] = 2.5
    with pytest.raises(EvaluationError, match="whole number"):
        resolve_with(define(BATCHSET), obj)


def test_bad_pod_spec_types_are_clear_errors() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    spec = obj["spec"]["jobs"][1]["template"]["spec"]["template"]["spec"]
    spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "lots"
    at = "spec.jobs[1].template.spec.template.spec.containers[0]"
    with pytest.raises(TemplateError, match="not a quantity") as caught:
        resolve_with(define(BATCHSET), obj)
    assert caught.value.path == f'{at}.resources.requests["nvidia.com/gpu"]'
    spec["containers"] = {"name": "c"}
    with pytest.raises(TemplateError, match="must be a list"):
        resolve_with(define(BATCHSET), obj)


@pytest.mark.parametrize(("container", "where", "reason"), [
    ({"image": "i"}, "containers[0].name", "is required"),
    ({"name": "c"}, "containers[0].image", "is required"),
    ({"name": "c", "image": ""}, "containers[0].image", "is required"),
    ({"name": "c", "image": 7}, "containers[0].image", "must be a string, not number 7"),
    ({"name": 3, "image": "i"}, "containers[0].name", "must be a string, not number 3"),
    ({"name": "c", "image": "i", "command": ["run", 8]}, "containers[0].command[1]",
     "must be a string, not number 8"),
    ({"name": "c", "image": "i", "args": "--all"}, "containers[0].args",
     "must be a list of strings, not string"),
    ({"name": "c", "image": "i", "resources": {"limits": {"memory": "8GB"}}},
     'containers[0].resources.limits["memory"]', "not a quantity"),
])
def test_invalid_pod_template_names_the_json_path(container: dict[str, Any], where: str,
                                                  reason: str) -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][1]["template"]["spec"]["template"]["spec"]["containers"] = [container]
    with pytest.raises(TemplateError) as caught:
        resolve_with(define(BATCHSET), obj)
    error = caught.value
    assert error.path == f"spec.jobs[1].template.spec.template.spec.{where}"
    assert reason in error.reason and error.name == "train"
    assert isinstance(error, ObjectError) and not isinstance(error, EvaluationError)
    assert error.path in str(error)


def test_negative_replica_count_is_a_template_error() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][1]["replicas"] = -2
    with pytest.raises(TemplateError, match="replica count -2 is negative") as caught:
        resolve_with(define(BATCHSET), obj)
    assert caught.value.path == "spec.jobs[1].replicas"


def test_mpijob_launcher_command_with_a_number_is_rejected() -> None:
    # the catalog sample once held -b 8 (a number): the apiserver would refuse the Pod
    sample = Path(__file__).parent / "catalog" / "mpijob" / "typical.yaml"
    obj = yaml.safe_load(sample.read_text())
    launcher = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["containers"][0]["command"][5] = 8
    with pytest.raises(TemplateError) as caught:
        Catalog.builtin().resolve(obj)
    assert caught.value.path == ("spec.mpiReplicaSpecs.Launcher.template.spec.containers[0]"
                                 ".command[5]")
    assert caught.value.definition == "mpijob"


@pytest.mark.parametrize("obj", [None, [], "x", {"kind": "BatchSet"},
                                 {"apiVersion": "demo.example/v1", "kind": "BatchSet",
                                  "metadata": "oops"}])
def test_not_an_object_is_an_object_error(obj: Any) -> None:
    with pytest.raises(ObjectError):
        resolve_with(define(BATCHSET), obj)


def test_too_deep_or_too_large_objects_are_rejected_before_jq() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(150):
        node["x"] = {}
        node = node["x"]
    obj["spec"]["extra"] = deep
    with pytest.raises(ObjectError, match="deeper"):
        resolve_with(define(BATCHSET), obj)
    obj["spec"]["extra"] = "y" * 5000
    with pytest.raises(ObjectError, match="bytes"):
        resolve_with(define(BATCHSET), obj, limits=Limits(max_bytes=4000))


def test_thousand_results_fail_like_upstream() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    job = obj["spec"]["jobs"][1]
    obj["spec"]["jobs"] = [dict(job, name=f"j{i}") for i in range(1000)]
    with pytest.raises(EvaluationError, match="exceed the allowed number 1000"):
        resolve_with(define(BATCHSET), obj)
    obj["spec"]["jobs"] = obj["spec"]["jobs"][:999]
    assert resolve_with(define(BATCHSET), obj).demand.pods == 999 * 6


def test_duplicate_instance_ids_are_an_error_not_a_silent_loss() -> None:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["jobs"][1]["name"] = "leader"
    with pytest.raises(EvaluationError, match=r"duplicate instance ids \['leader'\]"):
        resolve_with(define(BATCHSET), obj)


MAPFRAG = """
apiVersion: optimization.nvidia.com/v1alpha1
kind: ResourceInterface
metadata: {name: demo-graph}
spec:
  structureDefinition:
    rootComponent:
      name: graph
      kind: {group: demo.example, version: v1, kind: Graph}
      statusDefinition:
        phaseDefinition: {path: .status.state}
        statusMappings: {running: [{byPhase: successful}]}
    childComponents:
    - name: service
      ownerRef: graph
      instanceIdPath: .spec.services | keys[]
      specDefinition:
        fragmentedPodSpecDefinition:
          resourcesPath: .spec.services[] | .resources
          containerPath: .spec.services[] | .main
          labelsPath: .spec.services[] | .labels
      scaleDefinition:
        replicasPath: .spec.services[] | (.replicas // 1)
        podsPerReplicaPath: .spec.services[] | (.nodes // 1)
      podSelector:
        componentInstanceSelector: {idPath: '.metadata.labels["demo/service"]'}
"""


def test_fragmented_map_instances_align_in_key_order() -> None:
    obj = {"apiVersion": "demo.example/v1", "kind": "Graph", "metadata": {"name": "g"},
           "spec": {"services": {
               "worker": {"replicas": 2, "nodes": 2, "main": {"name": "main"},
                          "resources": {"limits": {"nvidia.com/gpu": 8}}},
               "frontend": {"main": {"name": "main",
                                     "resources": {"requests": {"cpu": "2"}}}}}},
           "status": {"state": "successful"}}
    out = resolve_with(define(MAPFRAG), obj).to_dict()
    assert out["components"][0]["instances"] == [
        {"id": "frontend", "replicas": 1, "pods": 1, "gpusPerPod": 0},
        {"id": "worker", "replicas": 2, "pods": 4, "gpusPerPod": 8}]
    assert (out["pods"], out["gpus"], out["status"]) == (5, 32, "running")
    assert out["gangs"][0]["podShapes"][0]["cpu"] == "2"


def _catalog_sample(kind: str, case: str) -> dict[str, Any]:
    path = Path(__file__).parent / "catalog" / kind / f"{case}.yaml"
    obj = yaml.safe_load(path.read_text())
    assert isinstance(obj, dict)
    return obj


def test_missing_image_by_spec_pattern() -> None:
    """A Pod needs an image: a template (Job) or inline pod spec (Knative) without one is
    refused naming the path; a KServe ``.model`` predictor (fragmented) gets its image from
    the ServingRuntime and resolves."""
    catalog = Catalog.builtin()
    job = _catalog_sample("job", "typical")
    del job["spec"]["template"]["spec"]["containers"][0]["image"]
    with pytest.raises(TemplateError, match="is required") as caught:
        catalog.resolve(job)
    assert caught.value.path == "spec.template.spec.containers[0].image"
    knative = _catalog_sample("knative-service", "typical")
    del knative["spec"]["template"]["spec"]["containers"][0]["image"]
    with pytest.raises(TemplateError) as caught:
        catalog.resolve(knative)
    assert caught.value.path == "spec.template.spec.containers[0].image"
    kserve = _catalog_sample("inferenceservice", "typical")
    assert "image" not in kserve["spec"]["predictor"]["model"]
    assert catalog.resolve(kserve).demand.pods == 1
