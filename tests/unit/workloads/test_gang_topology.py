"""A definition's ``podGroup.topology`` (Workload Map format) on the resolved gang.

Covered: ``requiredTopologyLevel`` (a node label key) is carried as a required constraint,
``preferredTopologyLevel`` alone as a preference, the required level wins when both are
given; neither level, an unknown key or a wrong type is a definition error naming the
field; a sub-group's topology is validated; gangs name the pod templates they use
(component, instance id), per replica the templates of every member that has that replica.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.workloads.errors import DefinitionError
from dispatcher.workloads.resolve import resolve_with

from .shapes import BATCHSET, BATCHSET_OBJ, TRAINRUN, define, edit

CLIQUE = "nvidia.com/gpu.clique"


def _with_gangs(text: str, gangs: dict[str, Any]) -> str:
    return edit(text, lambda d: d["spec"].update(
        optimizationInstructions={"gangScheduling": gangs}))


def _group(topology: dict[str, Any]) -> str:
    return _with_gangs(BATCHSET, {"podGroup": {"name": "g", "topology": topology}})


def test_required_level_is_carried_on_the_gang() -> None:
    text = _group({"topologyName": "cluster", "requiredTopologyLevel": CLIQUE,
                   "preferredTopologyLevel": "kubernetes.io/hostname"})
    (gang,) = resolve_with(define(text), BATCHSET_OBJ).demand.gangs
    assert gang.topology is not None
    assert (gang.topology.level, gang.topology.required) == (CLIQUE, True)
    assert "podGroup.topology" in gang.topology.source


def test_preferred_level_alone_is_a_preference() -> None:
    (gang,) = resolve_with(define(_group({"preferredTopologyLevel": CLIQUE})),
                           BATCHSET_OBJ).demand.gangs
    assert gang.topology is not None and not gang.topology.required


@pytest.mark.parametrize(("topology", "message"), [
    ({"topologyName": "cluster"}, "give requiredTopologyLevel or preferredTopologyLevel"),
    ({"requiredTopologyLevel": CLIQUE, "zone": "a"}, "topology.zone: unknown field"),
    ({"requiredTopologyLevel": 3}, "requiredTopologyLevel: must be a string"),
])
def test_a_broken_topology_is_a_definition_error(topology: dict[str, Any],
                                                  message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        define(_group(topology))


def test_a_sub_groups_topology_is_validated() -> None:
    text = _with_gangs(TRAINRUN, {"podGroup": {"name": "pg", "subGroups": [
        {"componentName": "worker", "topology": {"requiredTopologyLevel": 1}}]}})
    with pytest.raises(DefinitionError, match=r"subGroups\[0\].topology"):
        define(text)


def test_gangs_name_their_pod_templates() -> None:
    (gang,) = resolve_with(define(BATCHSET), BATCHSET_OBJ).demand.gangs
    assert gang.topology is None
    assert gang.templates == (("job", "leader"), ("job", "workers"))
    per_replica = _with_gangs(BATCHSET, {"podGroups": [{"name": "r", "gangPer": "replica",
                                                        "members": [{"componentName": "job"}]}]})
    first, second = resolve_with(define(per_replica), BATCHSET_OBJ).demand.gangs
    assert first.templates == (("job", "leader"), ("job", "workers"))
    assert second.templates == (("job", "workers"),)  # the leader has one replica only
