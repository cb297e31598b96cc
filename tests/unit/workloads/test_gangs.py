"""Gangs: summed (never multiplied) minimums, splits, leftovers, explicit minimums."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.workloads.errors import EvaluationError
from dispatcher.workloads.resolve import resolve_with

from .shapes import BATCHSET, BATCHSET_OBJ, TRAINRUN, TRAINRUN_OBJ, define, edit


def _gangs(text: str, obj: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(g["name"], g["pods"], g["minPods"])
            for g in resolve_with(define(text), obj).to_dict()["gangs"]]


def _with_gangs(text: str, gangs: dict[str, Any]) -> str:
    return edit(text, lambda d: d["spec"].update(
        optimizationInstructions={"gangScheduling": gangs}))


def test_no_instructions_one_gang_named_after_the_object() -> None:
    assert _gangs(BATCHSET, BATCHSET_OBJ) == [("train", 7, 7)]


def test_podgroups_members_are_summed_not_computed_alone() -> None:
    """§3.8: upstream gives each member its own minimum; here one gang sums them."""
    text = _with_gangs(BATCHSET, {"podGroups": [{"name": "all", "members": [
        {"componentName": "job"}, {"componentName": "batchset"}]}]})
    assert _gangs(text, BATCHSET_OBJ) == [("all", 7, 7)]


def test_parent_scale_is_not_multiplied_into_children() -> None:
    """Upstream would give root replicas × Σ children; counts here are totals."""
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["structureDefinition"]["rootComponent"]["scaleDefinition"] = {
            "replicasPath": "2"}
    text = edit(TRAINRUN, change)
    assert _gangs(text, TRAINRUN_OBJ) == [("run", 5, 3)]


def test_gang_per_instance() -> None:
    text = _with_gangs(BATCHSET, {"podGroups": [{"name": "job", "gangPer": "instance",
                                                 "members": [{"componentName": "job"}]}]})
    assert _gangs(text, BATCHSET_OBJ) == [("job-leader", 1, 1), ("job-workers", 6, 6)]


def test_gang_per_replica_takes_pods_per_replica_of_each_member() -> None:
    text = _with_gangs(BATCHSET, {"podGroups": [{"name": "r", "gangPer": "replica",
                                                 "members": [{"componentName": "job"}]}]})
    # replica 0: leader (1 pod) + workers (3 pods); replica 1: workers only
    assert _gangs(text, BATCHSET_OBJ) == [("r-0", 4, 4), ("r-1", 3, 3)]


def test_leftover_components_get_their_own_gang() -> None:
    def change(doc: dict[str, Any]) -> None:
        structure = doc["spec"]["structureDefinition"]
        structure["rootComponent"]["specDefinition"] = {"podSpecPath": ".spec.launcher"}
        doc["spec"]["optimizationInstructions"] = {"gangScheduling": {"podGroups": [
            {"name": "workers", "members": [{"componentName": "job"}]}]}}
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["launcher"] = {"containers": [{"name": "l", "image": "i"}]}
    assert _gangs(edit(BATCHSET, change), obj) == [("workers", 7, 7), ("batchset", 1, 1)]


def test_direct_mention_wins_over_ancestor() -> None:
    text = _with_gangs(TRAINRUN, {"podGroups": [
        {"name": "whole", "members": [{"componentName": "trainrun"}]},
        {"name": "roles", "members": [{"componentName": "role"}]}]})
    assert _gangs(text, TRAINRUN_OBJ) == [("roles", 5, 3)]


@pytest.mark.parametrize(("path", "expected"), [
    ("3", 3), ("100", 7), ("0", 1), ("null", 7), (".spec.minimum", 5)])
def test_explicit_minimum_is_clamped_and_null_falls_back(path: str, expected: int) -> None:
    text = _with_gangs(BATCHSET, {"podGroup": {"name": "g", "minPodsPath": path}})
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["minimum"] = 5
    assert _gangs(text, obj) == [("g", 7, expected)]


def test_explicit_minimum_of_the_wrong_type_is_an_error() -> None:
    text = _with_gangs(BATCHSET, {"podGroup": {"name": "g", "minPodsPath": ".spec.jobs"}})
    with pytest.raises(EvaluationError, match="must be a number"):
        resolve_with(define(text), BATCHSET_OBJ)


def test_pod_group_subgroups_sum_their_subtree_minimums() -> None:
    text = _with_gangs(TRAINRUN, {"podGroup": {"name": "pg", "subGroups": [
        {"componentName": "role"}]}})
    assert _gangs(text, TRAINRUN_OBJ) == [("pg", 5, 3)]


@pytest.mark.parametrize(("scale", "expected"), [
    ({"replicas": 3, "autoscaling": {"min": 0}}, (3, 3)),   # min 0 falls back to replicas
    ({"replicas": 3, "autoscaling": {"min": 2}}, (3, 2)),
    ({"replicas": 3, "autoscaling": {"min": 5}}, (3, 3)),   # never more than replicas
    ({"autoscaling": {"min": 2}}, (2, 2))])                  # autoscaled: minimum
def test_effective_minimum(scale: dict[str, Any], expected: tuple[int, int]) -> None:
    from .shapes import FRAGSERVE, FRAGSERVE_OBJ

    obj = copy.deepcopy(FRAGSERVE_OBJ)
    obj["spec"].pop("autoscaling")
    obj["spec"].update(scale)
    ((_, pods, minimum),) = _gangs(FRAGSERVE, obj)
    assert (pods, minimum) == expected


def test_explicit_minimum_must_be_one_result() -> None:
    text = _with_gangs(BATCHSET, {"podGroup": {"name": "g",
                                               "minPodsPath": ".spec.jobs[].replicas"}})
    with pytest.raises(EvaluationError, match="exactly one result, got 2"):
        resolve_with(define(text), BATCHSET_OBJ)
