"""mutate_pods: every instance's pods get the fields; the input never changes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.workloads.demand import Toleration
from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.mutate import mutate_pods
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


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [job["template"]["spec"]["template"] for job in obj["spec"]["jobs"]]


def test_sets_fields_on_every_instance_and_keeps_input() -> None:
    before = copy.deepcopy(BATCHSET_OBJ)
    out = mutate_pods(BATCHSET_OBJ, define(BATCHSET), labels={"dispatcher.io/origin": "hub"},
                      annotations={"a": "1"}, scheduler_name="kai-scheduler",
                      node_selector={"pool": "gpu"}, priority_class_name="high",
                      tolerations=[Toleration(key="gpu", operator="Exists")])
    assert before == BATCHSET_OBJ
    for template in _templates(out):
        assert template["metadata"]["labels"] == {"dispatcher.io/origin": "hub"}
        assert template["metadata"]["annotations"] == {"a": "1"}
        spec = template["spec"]
        assert spec["schedulerName"] == "kai-scheduler"
        assert spec["priorityClassName"] == "high"
        assert spec["nodeSelector"]["pool"] == "gpu"
        assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    # merged, not replaced: the product selector survives and demand is unchanged
    assert _templates(out)[0]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
    assert resolve_with(define(BATCHSET), out).demand.gpus == \
        resolve_with(define(BATCHSET), BATCHSET_OBJ).demand.gpus


def test_tolerations_are_not_duplicated() -> None:
    toleration = {"key": "gpu", "operator": "Exists"}
    once = mutate_pods(BATCHSET_OBJ, define(BATCHSET), tolerations=[toleration])
    twice = mutate_pods(once, define(BATCHSET), tolerations=[toleration])
    assert _templates(twice)[1]["spec"]["tolerations"] == [toleration]


def test_map_instances_and_component_selection() -> None:
    out = mutate_pods(TRAINRUN_OBJ, define(TRAINRUN), labels={"x": "y"}, components=["role"])
    for role in out["spec"]["roles"].values():
        assert role["podTemplate"]["metadata"]["labels"] == {"x": "y"}
    with pytest.raises(MutationError, match="no pod-creating component ghost"):
        mutate_pods(TRAINRUN_OBJ, define(TRAINRUN), labels={"x": "y"}, components=["ghost"])


def test_fragmented_writes_through_fragment_paths() -> None:
    out = mutate_pods(FRAGSERVE_OBJ, define(FRAGSERVE), labels={"x": "y"},
                      scheduler_name="kai", node_selector={"n": "1"})
    assert out["spec"]["labels"] == {"a": "b", "x": "y"}
    assert out["spec"]["schedulerName"] == "kai"
    assert out["spec"]["nodeSelector"] == {"n": "1"}
    with pytest.raises(MutationError, match="no priorityClassNamePath"):
        mutate_pods(FRAGSERVE_OBJ, define(FRAGSERVE), priority_class_name="high")


def test_non_path_expression_is_a_clear_error() -> None:
    text = edit(FRAGSERVE, lambda d: d["spec"]["structureDefinition"]["rootComponent"][
        "specDefinition"]["fragmentedPodSpecDefinition"].update(labelsPath=".spec.labels // {}"))
    # the `//` trap: writable while labels exist, an error once they do not
    assert mutate_pods(FRAGSERVE_OBJ, define(text), labels={"x": "y"})["spec"]["labels"]
    obj = copy.deepcopy(FRAGSERVE_OBJ)
    del obj["spec"]["labels"]
    with pytest.raises(MutationError, match=r"labelsPath .* cannot be written"):
        mutate_pods(obj, define(text), labels={"x": "y"})


def test_missing_intermediate_objects_are_created() -> None:
    obj = copy.deepcopy(FRAGSERVE_OBJ)
    del obj["spec"]["labels"]
    text = edit(FRAGSERVE, lambda d: d["spec"]["structureDefinition"]["rootComponent"][
        "specDefinition"]["fragmentedPodSpecDefinition"].update(labelsPath=".spec.pod.meta.labels"))
    out = mutate_pods(obj, define(text), labels={"x": "y"})
    assert out["spec"]["pod"] == {"meta": {"labels": {"x": "y"}}}
