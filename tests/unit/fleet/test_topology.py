"""Topology levels: declared per member or fleet-wide, validated, resolved by name or key.

Covered: ``parse_levels`` accepts ``[{name, nodeLabel}]`` and refuses a non-list, unknown
keys, a missing name or label, a label that is not a label key, duplicates; a request is
resolved by level name first, then by node label key; a MemberCluster's
``spec.topologyLevels`` (an invalid one is a ValueError naming the member), a static
member's and a fleet file member's reach the spec; the config file's ``fleet.topologyLevels``
and a static member's ``topologyLevels``; the fleet runtime gives a member its own levels,
else the fleet-wide ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher import config
from dispatcher.fleet.fleetfile import FleetFileError, parse_fleet
from dispatcher.fleet.members import from_member_cluster
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.fleet.topology import TopologyLevel, parse_levels, resolve_level

RACK = TopologyLevel(name="rack", node_label="example.com/rack")
CLIQUE = TopologyLevel(name="clique", node_label="nvidia.com/gpu.clique")


def test_levels_parse_and_resolve() -> None:
    levels = parse_levels([{"name": "rack", "nodeLabel": "example.com/rack"},
                           {"name": "clique", "nodeLabel": "nvidia.com/gpu.clique"}],
                          where="x")
    assert levels == (RACK, CLIQUE)
    assert resolve_level("rack", levels) == RACK
    assert resolve_level("nvidia.com/gpu.clique", levels) == CLIQUE
    assert resolve_level("zone", levels) is None
    assert parse_levels(None, where="x") == ()


@pytest.mark.parametrize(("raw", "message"), [
    ({"name": "rack"}, "x: must be a list"),
    ([{"name": "rack"}], r"x\[0\].nodeLabel: is required"),
    ([{"nodeLabel": "a/b"}], r"x\[0\].name: is required"),
    ([{"name": "rack", "nodeLabel": "a/b", "weight": 1}], r"x\[0\].weight: unknown key"),
    ([{"name": "rack", "nodeLabel": "not a key"}], "is not a label key"),
    ([{"name": "rack", "nodeLabel": "Bad_Prefix/rack"}], "bad prefix"),
    ([{"name": "r", "nodeLabel": "a/b"}, {"name": "r", "nodeLabel": "a/c"}], "declared twice"),
    ([{"name": "r", "nodeLabel": "a/b"}, {"name": "s", "nodeLabel": "a/b"}], "declared twice"),
])
def test_broken_levels_name_the_entry(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_levels(raw, where="x")


def _member_cluster(levels: Any) -> dict[str, Any]:
    return {"metadata": {"name": "m1"},
            "spec": {"kubeconfigSecretRef": {"namespace": "dispatcher-system", "name": "m1"},
                     "topologyLevels": levels}}


def test_member_cluster_and_fleet_file_members_declare_levels() -> None:
    spec = from_member_cluster(_member_cluster([{"name": "rack",
                                                 "nodeLabel": "example.com/rack"}]))
    assert spec.topology_levels == (RACK,)
    with pytest.raises(ValueError, match=r"MemberCluster m1: spec\.topologyLevels"):
        from_member_cluster(_member_cluster([{"name": "rack"}]))
    fleet = parse_fleet({"members": [{"name": "m1", "topologyLevels": [
        {"name": "rack", "nodeLabel": "example.com/rack"}], "nodePools": [
        {"name": "p", "count": 1, "gpus": 8, "labels": {"example.com/rack": "r1"}}]}]})
    assert fleet.member("m1").topology_levels == (RACK,)
    with pytest.raises(FleetFileError, match=r"members\[0\].topologyLevels"):
        parse_fleet({"members": [{"name": "m1", "topologyLevels": "rack"}]})


def test_config_declares_levels_fleet_wide_and_per_static_member(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("""
fleet:
  topologyLevels: [{name: rack, nodeLabel: example.com/rack}]
  staticMembers:
  - name: m1
    kubeconfig: m1.kc
    topologyLevels: [{name: clique, nodeLabel: nvidia.com/gpu.clique}]
""")
    loaded = config.load(path)
    assert loaded.fleet.topology_levels == (RACK,)
    assert loaded.fleet.static_members[0].topology_levels == (CLIQUE,)
    path.write_text("fleet: {topologyLevels: [{name: rack}]}\n")
    with pytest.raises(config.ConfigError, match=r"fleet\.topologyLevels"):
        config.load(path)


async def test_a_member_gets_its_own_levels_else_the_fleets(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    settings = FleetSettings(static_members=(
        StaticMember(name="own", kubeconfig=missing, topology_levels=(CLIQUE,)),
        StaticMember(name="plain", kubeconfig=missing)),
        topology_levels=(RACK,), reconnect_initial_s=30.0)
    async with Fleet(hub=None, settings=settings) as fleet:
        levels = {s.name: s.topology_levels for s in fleet.snapshots()}
    assert levels == {"own": (CLIQUE,), "plain": (RACK,)}
