"""Gang units as frameworks define them: independent pods (``gangPer: pod``), a unit chosen
from the object (``gangPerPath``) and explicit lists (``gangsPath``), docs/definitions.md §3.2.

BATCHSET_OBJ (shapes.py): job ``leader`` 1 pod x 4 GPUs; job ``workers`` 2 replicas x 3
pods x 8 GPUs = 6 pods, 48 GPUs. Every expected list below is worked out from that.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.workloads.demand import Demand, Gang, PodShape
from dispatcher.workloads.errors import DefinitionError, EvaluationError
from dispatcher.workloads.gangs import MAX_GANGS
from dispatcher.workloads.resolve import resolve_with
from dispatcher.workloads.trace import demand_from_gangs, gangs_json

from .shapes import BATCHSET, BATCHSET_OBJ, define, edit

Unit = tuple[str, int, int, int, bool]


def _units(text: str, obj: dict[str, Any] = BATCHSET_OBJ) -> list[Unit]:
    return [(g["name"], g["pods"], g["minPods"], g["gpus"], g["independent"])
            for g in resolve_with(define(text), obj).to_dict()["gangs"]]


def _with_gangs(gangs: dict[str, Any]) -> str:
    return edit(BATCHSET, lambda d: d["spec"].update(
        optimizationInstructions={"gangScheduling": gangs}))


def _group(**entry: Any) -> str:
    return _with_gangs({"podGroups": [{"name": "u", "members": [{"componentName": "job"}],
                                       **entry}]})


def test_gang_per_pod_is_one_entry_of_independent_pods() -> None:
    assert _units(_group(gangPer="pod")) == [("u", 7, 1, 52, True)]


def test_gang_per_path_chooses_the_unit_from_the_object() -> None:
    text = _group(gangPerPath='if .spec.gang then "replica" else "pod" end')
    assert _units(text) == [("u", 7, 1, 52, True)]
    ganged = copy.deepcopy(BATCHSET_OBJ)
    ganged["spec"]["gang"] = True
    # replica 0: leader 1 + workers 3 (4 + 24 GPUs); replica 1: workers 3 (24 GPUs)
    assert _units(text, ganged) == [("u-0", 4, 4, 28, False), ("u-1", 3, 3, 24, False)]


def test_gang_per_path_must_name_a_unit() -> None:
    with pytest.raises(EvaluationError, match="must give one of workload, instance, "
                                              "replica, pod, not 'pods'"):
        resolve_with(define(_group(gangPerPath='"pods"')), BATCHSET_OBJ)


@pytest.mark.parametrize(("entry", "message"), [
    ({"gangPer": "pod", "gangPerPath": '"pod"'}, "use gangPer or gangPerPath, not both"),
    ({"gangPerPath": '"pod"', "minPodsPath": "1"}, "only allowed with gangPer: workload"),
    ({"gangPer": "pod", "minPodsPath": "1"}, "only allowed with gangPer: workload"),
    ({"gangPer": "pods"}, "must be one of workload, instance, replica, pod")])
def test_gang_unit_rules_are_checked_at_load(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        define(_group(**entry))


def test_gangs_path_lists_units_expanded_by_their_counts() -> None:
    text = _with_gangs({"gangsPath": """
        {name: "lead", members: [{component: "job", id: "leader", pods: 1}]},
        {name: "w-{0}", counts: [2], minPods: 2,
         members: [{component: "job", id: "workers", pods: 3}]}"""})
    assert _units(text) == [("lead", 1, 1, 4, False), ("w-0", 3, 2, 24, False),
                            ("w-1", 3, 2, 24, False)]


def test_gangs_path_two_counts_name_every_unit() -> None:
    text = _with_gangs({"gangsPath": """
        {name: "lead", independent: true, minPods: 1,
         members: [{component: "job", id: "leader", pods: 1}]},
        {name: "w-{0}-x-{1}", counts: [2, 3],
         members: [{component: "job", id: "workers", pods: 1}]}"""})
    assert _units(text) == [("lead", 1, 1, 4, True)] + [
        (f"w-{i}-x-{k}", 1, 1, 8, False) for i in range(2) for k in range(3)]


def test_gangs_path_zero_count_gives_no_unit() -> None:
    text = _with_gangs({"gangsPath": """
        {name: "all", members: [{component: "job", id: "leader", pods: 1},
                                {component: "job", id: "workers", pods: 6}]},
        {name: "none-{0}", counts: [0], members: [{component: "job", id: "workers", pods: 5}]}
        """})
    assert _units(text) == [("all", 7, 7, 52, False)]


@pytest.mark.parametrize(("path", "message"), [
    # 1 + 3 of the 6 workers: two pods would be lost
    ('{name: "a", members: [{component: "job", id: "leader", pods: 1},'
     ' {component: "job", id: "workers", pods: 3}]}',
     "the gangs hold 3 of the 6 pods of job workers"),
    # the leader twice: a pod would be counted twice
    ('{name: "a-{0}", counts: [2], members: [{component: "job", id: "leader", pods: 1},'
     ' {component: "job", id: "workers", pods: 3}]}',
     "the gangs hold 2 of the 1 pods of job leader"),
    ('{name: "a", members: [{component: "job", id: "chief", pods: 1}]}',
     "is not a pod-creating instance"),
    ('{name: "a", members: []}, {name: "a", members: []}', "gang name a is not unique"),
    ('{name: "a-{1}", counts: [2], members: []}', "a placeholder has no count"),
    ('{name: "a", counts: [-1], members: []}', "must be a whole number >= 0"),
    ('{name: "a", members: {}}', "members must be a list"),
    ('{name: "", members: []}', "gang name must be a non-empty string"),
    ('"a"', "each gang must be an object"),
    (f'{{name: "a-{{0}}", counts: [{MAX_GANGS + 1}], members: []}}',
     f"more than {MAX_GANGS} gangs")])
def test_gangs_path_must_hold_every_pod_exactly_once(path: str, message: str) -> None:
    with pytest.raises(EvaluationError, match=message):
        resolve_with(define(_with_gangs({"gangsPath": path})), BATCHSET_OBJ)


def test_gangs_path_excludes_the_upstream_forms() -> None:
    with pytest.raises(DefinitionError, match="use one of podGroups, podGroup, gangsPath"):
        define(_with_gangs({"gangsPath": "empty", "podGroup": {"name": "g"}}))


def test_trace_keeps_independent_units() -> None:
    shape = PodShape(count=3, gpus=1)
    demand = Demand(gangs=(Gang(name="web", pods=3, min_pods=1, pod_shapes=(shape,),
                                independent=True),
                           Gang(name="ray", pods=3, min_pods=3, pod_shapes=(shape,))))
    assert demand_from_gangs(gangs_json(demand)) == demand
    legacy = [{k: v for k, v in g.items() if k != "independent"}
              for g in gangs_json(demand)]
    assert [g.independent for g in demand_from_gangs(legacy).gangs] == [False, False]
