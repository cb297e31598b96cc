"""Per-member namespace allow-lists: a hub user cannot place work in kube-system or in
another tenant's namespace on a member whose operator listed its allowed namespaces.

The allow-list is MemberCluster ``spec.allowedNamespaces`` (or ``allowedNamespaces`` of a
static member in the config file); placement rejects a member whose non-empty list lacks
the workload's namespace, whatever the workload's annotations say (pin, selector, policy).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher import config as configmod
from dispatcher.commands.explain import fleet_snapshots
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.fleet.members import from_member_cluster
from dispatcher.placement import engine
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.catalog import Catalog

BUDGET = settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
TESTS = Path(__file__).resolve().parents[1]
FLEET = fleet_snapshots(load_fleet(TESTS / "integration" / "fleet.yaml"))
JOBSET: dict[str, Any] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "train", "namespace": "team-a"},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
              "parallelism": 1, "completions": 1, "template": {"spec": {"containers": [
                  {"name": "w", "image": "x",
                   "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}}}]}}


def _members(**allowed: tuple[str, ...]) -> list[MemberSnapshot]:
    return [dataclasses.replace(m, allowed_namespaces=allowed.get(m.name.replace("-", "_"), ()))
            for m in FLEET]


def _request(namespace: str, annotations: dict[str, str] | None = None) -> PlacementRequest:
    workload = {**JOBSET, "metadata": {**JOBSET["metadata"], "namespace": namespace,
                                       "annotations": annotations or {}}}
    resolution = Catalog.builtin().resolve(workload)
    return PlacementRequest.from_annotations(
        demand=resolution.demand, api_version=resolution.api_version, kind=resolution.kind,
        annotations=annotations or {}, namespace=namespace, count_fits=True)


def _verdict(decision: Any, member: str) -> Any:
    return next(v for v in decision.verdicts if v.member == member)


def test_a_listed_namespace_may_go_to_the_member() -> None:
    members = _members(member_1=("team-a",), member_2=("team-b",))
    decision = engine.decide(members, _request("team-a"))
    assert decision.chosen == "member-1"
    assert "not allowed" in _verdict(decision, "member-2").reason


def test_kube_system_cannot_reach_a_member_with_an_allow_list() -> None:
    members = _members(member_1=("team-a",))
    decision = engine.decide(members, _request("kube-system"))
    assert decision.chosen == "member-2"  # no list there: the operator allows any
    verdict = _verdict(decision, "member-1")
    assert verdict.feasible is False
    assert verdict.reason == "namespace kube-system not allowed (allowedNamespaces: team-a)"


def test_a_pin_does_not_bypass_the_allow_list() -> None:
    members = _members(member_1=("team-a",), member_2=("team-a",))
    decision = engine.decide(members, _request("team-b", {"dispatcher.io/cluster": "member-1"}))
    assert decision.chosen is None
    assert "not allowed" in _verdict(decision, "member-1").reason


def test_a_selector_does_not_bypass_the_allow_list() -> None:
    members = _members(member_1=("team-a",))
    decision = engine.decide(members, _request(
        "team-b", {"dispatcher.io/cluster-selector": "region=us-east"}))
    assert decision.chosen is None


def test_an_unknown_namespace_never_reaches_a_member_with_an_allow_list() -> None:
    members = _members(member_1=("team-a",), member_2=("",))
    request = dataclasses.replace(_request("team-a"), namespace="")
    decision = engine.decide(members[:1], request)
    assert decision.chosen is None
    assert "(unknown)" in _verdict(decision, "member-1").reason


@BUDGET
@given(st.sampled_from(["team-a", "team-b", "kube-system", "default", "", "Team-A"]),
       st.lists(st.sampled_from(["team-a", "team-b", "default"]), max_size=2),
       st.lists(st.sampled_from(["team-a", "team-b", "kube-system"]), max_size=2),
       st.sampled_from([{}, {"dispatcher.io/cluster": "member-1"},
                        {"dispatcher.io/cluster": "member-2"},
                        {"dispatcher.io/cluster-selector": "region"},
                        {"dispatcher.io/policy": "best-fit"}]))
def test_whatever_the_annotations_the_choice_allows_the_namespace(
        namespace: str, first: list[str], second: list[str], notes: dict[str, str]) -> None:
    members = _members(member_1=tuple(first), member_2=tuple(second))
    request = dataclasses.replace(_request("team-a", notes), namespace=namespace)
    decision = engine.decide(members, request)
    if decision.chosen is not None:
        allowed = next(m for m in members if m.name == decision.chosen).allowed_namespaces
        assert not allowed or namespace in allowed


def test_the_allow_list_comes_from_the_membercluster_and_the_config_file(
        tmp_path: Path) -> None:
    spec = from_member_cluster({"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
                                "metadata": {"name": "m1"},
                                "spec": {"allowedNamespaces": ["team-a", "team-b"],
                                         "kubeconfigSecretRef": {"name": "m1"}}})
    assert spec.allowed_namespaces == ("team-a", "team-b")
    path = tmp_path / "c.yaml"
    path.write_text("fleet:\n  staticMembers:\n  - {name: m1, kubeconfig: k, "
                    "allowedNamespaces: [team-a]}\n")
    member, = configmod.load(path).fleet.static_members
    assert member.allowed_namespaces == ("team-a",)


async def test_the_fleet_hands_the_allow_list_to_placement(tmp_path: Path) -> None:
    from dispatcher.fleet.runtime import Fleet
    from dispatcher.fleet.settings import FleetSettings, StaticMember

    settings = FleetSettings(static_members=(StaticMember(
        name="m1", kubeconfig=str(tmp_path / "absent"), allowed_namespaces=("team-a",)),),
        watch_member_clusters=False)
    fleet = Fleet(hub=None, settings=settings)
    await fleet.start()
    try:
        snapshot, = fleet.snapshots()
        assert snapshot.allowed_namespaces == ("team-a",)
    finally:
        await fleet.stop()
