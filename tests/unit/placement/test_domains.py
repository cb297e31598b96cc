"""Topology domains: each gang inside one rack/clique, on plain data.

Covered: a gang lands in one domain and its assignment uses only that domain's nodes;
most-free takes the emptiest domain, best-fit the fullest that holds it; a gang no domain
holds is infeasible with the best domain's numbers although the member's free GPUs could
hold it; two gangs may go to different domains, gangs sharing a pod template share one;
nodes without the label are in no domain; a level the member does not declare, by name or
by node label key; preferred falls back to anywhere; an existing nodeSelector on the level
label restricts the domain; the annotation overrides the definition's constraint and keeps
independent pods together too; a member that cannot take the demand at all gives the plain
reason; the decision and the summary name the domain; explain's rooms count every domain. Property:
every feasible topology verdict's assignment keeps each unit on nodes of one domain value.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.topology import TopologyLevel
from dispatcher.placement.domains import units_of
from dispatcher.placement.engine import decide
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.demand import Demand, Gang, TopologyConstraint

from .builders import cluster, demand, shape
from .objects import node

RACK = "example.com/rack"
LEVELS = (TopologyLevel(name="rack", node_label=RACK),
          TopologyLevel(name="clique", node_label="nvidia.com/gpu.clique"))
REQUIRED = TopologyConstraint(level="rack")


def _racks(*racks: tuple[str, int, int], used: dict[str, int] | None = None
           ) -> ClusterCapacity:
    """Racks as (name, nodes, GPUs per node); node names r<rack>-<i>."""
    specs = []
    for rack, count, gpus in racks:
        for i in range(count):
            name = f"{rack}-n{i}"
            specs.append({"name": name, "gpus": gpus, "labels": {RACK: rack},
                          "used": (used or {}).get(name, 0)})
    return cluster(*specs)


def _member(capacity: ClusterCapacity, name: str = "m1",
            levels: tuple[TopologyLevel, ...] = LEVELS) -> MemberSnapshot:
    return MemberSnapshot(name=name, capacity=capacity, topology_levels=levels)


def _request(d: Demand, *, topology: TopologyConstraint | None = REQUIRED,
             policy: str = "most-free", count_fits: bool = False) -> PlacementRequest:
    return PlacementRequest(demand=d, topology=topology, policy=policy, exhaustive=True,
                            count_fits=count_fits)


def _rack_of(node: str) -> str:
    return node.split("-n", maxsplit=1)[0]


def test_a_gang_lands_inside_one_rack() -> None:
    cap = _racks(("r1", 2, 8), ("r2", 4, 8))
    decision = decide([_member(cap)], _request(demand([shape(3, 8)])))
    assert decision.chosen == "m1"
    assert {_rack_of(g.node) for g in decision.assignment} == {"r2"}
    assert [(d.gangs, d.level, d.node_label, d.value) for d in decision.domains] == [
        (("g0",), "rack", RACK, "r2")]
    assert "placed 3 pod(s) / 24 GPU(s) in 1 gang(s) on m1 in rack r2" in decision.summary
    assert "gang g0 in rack r2" in decision.verdict("m1").reason


def test_most_free_takes_the_emptiest_rack_best_fit_the_fullest_that_holds_it() -> None:
    cap = _racks(("r1", 2, 8), ("r2", 4, 8), ("r3", 1, 8))
    d = demand([shape(2, 8)])
    assert decide([_member(cap)], _request(d)).domains[0].value == "r2"
    assert decide([_member(cap)], _request(d, policy="best-fit")).domains[0].value == "r1"


def test_no_rack_holds_the_gang_although_the_member_could_numeric_reason() -> None:
    cap = _racks(("r1", 3, 8), ("r2", 3, 8), used={"r2-n0": 8})
    d = demand([shape(4, 8)])
    plain = decide([_member(cap)], _request(d, topology=None))
    assert plain.chosen == "m1"  # 40 GPUs free on the member: 4 x 8 fit without racks
    decision = decide([_member(cap)], _request(d))
    assert decision.chosen is None
    verdict = decision.verdict("m1")
    assert verdict.reason == (
        "no rack holds gang g0 (4 pods, 32 GPUs): best rack r1 holds 3 of 4 pods (24 GPUs "
        "free there); then r2 2 of 4; 2 racks, 40 GPUs free on the member")
    assert "no member can take" in decision.summary and "best rack r1 holds 3 of 4" in \
        decision.summary


def test_a_member_without_the_product_gives_the_plain_reason() -> None:
    cap = _racks(("r1", 2, 8))
    d = demand([shape(1, 8, product="NVIDIA-A100-SXM4-80GB")])
    assert decide([_member(cap)], _request(d)).verdict("m1").reason == (
        "no nodes with product NVIDIA-A100-SXM4-80GB")


def test_two_gangs_may_use_two_racks_and_shared_templates_share_one() -> None:
    cap = _racks(("r1", 2, 8), ("r2", 2, 8))
    two = Demand(gangs=(
        Gang(name="a", pods=2, min_pods=2, pod_shapes=(shape(2, 8),), templates=(("w", "a"),)),
        Gang(name="b", pods=2, min_pods=2, pod_shapes=(shape(2, 8),), templates=(("w", "b"),)),
    ))
    decision = decide([_member(cap)], _request(two))
    assert sorted(d.value for d in decision.domains) == ["r1", "r2"]
    shared = Demand(gangs=tuple(replace(g, templates=(("w", ""),)) for g in two.gangs))
    units, rest = units_of(shared, REQUIRED)
    assert [u.names for u in units] == [("a", "b")] and rest == ()
    blocked = decide([_member(cap)], _request(shared))
    assert blocked.chosen is None
    assert "no rack holds gangs a, b (4 pods, 32 GPUs): best rack r1 holds 2 of 4" in \
        blocked.verdict("m1").reason


def test_nodes_without_the_label_are_in_no_domain() -> None:
    cap = _racks(("r1", 1, 8))
    cap.upsert_node(node("loose", 8))
    decision = decide([_member(cap)], _request(demand([shape(2, 8)])))
    assert decision.chosen is None
    assert "best rack r1 holds 1 of 2 pods" in decision.verdict("m1").reason


def test_an_undeclared_level_is_named_with_the_members_levels() -> None:
    cap = _racks(("r1", 2, 8))
    asked = TopologyConstraint(level="block", source="annotation dispatcher.io/topology")
    decision = decide([_member(cap)], _request(demand([shape(1, 8)]), topology=asked))
    assert decision.verdict("m1").reason == (
        "no topology level 'block' here (annotation dispatcher.io/topology; levels: rack "
        f"({RACK}), clique (nvidia.com/gpu.clique))")
    none = decide([_member(cap, levels=())], _request(demand([shape(1, 8)])))
    assert "levels: none declared" in none.verdict("m1").reason


def test_a_level_may_be_asked_by_its_node_label_key() -> None:
    cap = _racks(("r1", 2, 8))
    by_key = TopologyConstraint(level=RACK)
    assert decide([_member(cap)], _request(demand([shape(2, 8)]), topology=by_key)
                  ).domains[0].level == "rack"


def test_preferred_falls_back_to_anywhere() -> None:
    cap = _racks(("r1", 1, 8), ("r2", 1, 8))
    preferred = TopologyConstraint(level="rack", required=False)
    decision = decide([_member(cap)], _request(demand([shape(2, 8)]), topology=preferred))
    assert decision.chosen == "m1" and decision.domains == ()
    assert "gang g0 anywhere (no rack holds gang g0" in decision.verdict("m1").reason
    fits = decide([_member(cap)], _request(demand([shape(1, 8)]), topology=preferred))
    assert fits.domains[0].value == "r1"


def test_a_node_selector_on_the_level_label_restricts_the_domain() -> None:
    cap = _racks(("r1", 2, 8), ("r2", 4, 8))
    d = demand([shape(1, 8, selector={RACK: "r1"})])
    assert decide([_member(cap)], _request(d)).domains[0].value == "r1"


def test_the_definitions_constraint_and_the_annotation_override() -> None:
    cap = _racks(("r1", 1, 8), ("r2", 1, 8))
    gang = Gang(name="g", pods=2, min_pods=2, pod_shapes=(shape(2, 8),),
                topology=TopologyConstraint(level="rack", source="definition x"))
    d = Demand(gangs=(gang,))
    assert decide([_member(cap)], _request(d, topology=None)).chosen is None
    anywhere = TopologyConstraint(level="rack", required=False)
    assert decide([_member(cap)], _request(d, topology=anywhere)).chosen == "m1"


def test_the_annotation_keeps_independent_pods_together_a_definition_does_not() -> None:
    cap = _racks(("r1", 1, 8), ("r2", 1, 8))
    solo = Gang(name="job", pods=2, min_pods=1, pod_shapes=(shape(2, 8),), independent=True)
    d = Demand(gangs=(solo,))
    decision = decide([_member(cap)], _request(d))
    assert decision.chosen is None  # a Job's parallel pods, asked to share a rack
    assert decision.verdict("m1").reason.startswith("no rack holds pods job (2 pods, 16 GPUs)")
    one = Demand(gangs=(replace(solo, pods=1, pod_shapes=(shape(1, 8),)),))
    assert decide([_member(cap)], _request(one)).domains[0].gangs == ("job",)
    own = Demand(gangs=(replace(solo, topology=REQUIRED),))
    assert decide([_member(cap)], _request(own, topology=None)).domains == ()


def test_the_chosen_member_is_one_whose_rack_holds_it() -> None:
    big_flat = _racks(("r1", 2, 8), ("r2", 2, 8), ("r3", 2, 8))  # 48 free, racks of 16
    small_rack = _racks(("x", 3, 8))  # 24 free, one rack of 24
    decision = decide([_member(big_flat, "flat"), _member(small_rack, "tight")],
                      _request(demand([shape(3, 8)])))
    assert decision.chosen == "tight"
    assert decision.verdict("flat").feasible is False


def test_explain_counts_every_domain() -> None:
    cap = _racks(("r1", 2, 8), ("r2", 1, 8))
    decision = decide([_member(cap)], _request(demand([shape(2, 8)]), count_fits=True))
    rooms = {(r.value, r.pods, r.wanted, r.free) for r in decision.verdict("m1").rooms}
    assert rooms == {("r1", 2, 2, 16), ("r2", 1, 2, 8)}
    assert decision.verdict("m1").to_dict()["domains"] == [
        {"gangs": ["g0"], "level": "rack", "nodeLabel": RACK, "value": "r1"}]


def test_without_a_topology_request_nothing_changes() -> None:
    cap = _racks(("r1", 1, 8), ("r2", 1, 8))
    decision = decide([_member(cap)], _request(demand([shape(2, 8)]), topology=None))
    assert decision.chosen == "m1" and decision.domains == ()
    assert "domains" not in decision.to_dict()
    assert decision.verdict("m1").reason == "fits: 16 GPUs free, 0 left after"


@settings(max_examples=60, deadline=None)
@given(racks=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([2, 4, 8])),
                      min_size=1, max_size=4),
       gangs=st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8])),
                      min_size=1, max_size=3),
       best_fit=st.booleans())
def test_every_feasible_assignment_keeps_each_gang_in_one_rack(
        racks: list[tuple[int, int]], gangs: list[tuple[int, int]], best_fit: bool) -> None:
    cap = _racks(*((f"r{i}", count, gpus) for i, (count, gpus) in enumerate(racks)))
    d = Demand(gangs=tuple(
        Gang(name=f"g{i}", pods=pods, min_pods=pods, pod_shapes=(shape(pods, gpus),),
             templates=((f"c{i}", ""),))
        for i, (pods, gpus) in enumerate(gangs)))
    decision = decide([_member(cap)], _request(
        d, policy="best-fit" if best_fit else "most-free"))
    if decision.chosen is None:
        return
    assert len(decision.domains) == len(gangs)
    by_gang = {d.gangs[0]: d.value for d in decision.domains}
    used: dict[str, int] = {}
    for grant in decision.assignment:
        used[_rack_of(grant.node)] = used.get(_rack_of(grant.node), 0) + grant.gpus
        node = cap.node(grant.node)
        assert node is not None and grant.gpus <= node.free
    wanted: dict[str, int] = {}
    for gang in d.gangs:
        wanted[by_gang[gang.name]] = wanted.get(by_gang[gang.name], 0) + gang.gpus
    assert used == wanted  # each rack holds exactly the GPUs of the gangs placed there


def test_the_fast_path_decides_alike() -> None:
    """Not exhaustive (members below the first feasible one are not packed): the same
    choice, domains and reasons."""
    members = [_member(_racks(("r1", 2, 8), ("r2", 2, 8)), "wide"),
               _member(_racks(("x", 1, 8)), "narrow")]
    fast = decide(members, replace(_request(demand([shape(2, 8)])), exhaustive=False))
    full = decide(members, _request(demand([shape(2, 8)])))
    assert fast.chosen == full.chosen == "wide"
    assert fast.domains == full.domains
    assert fast.verdict("narrow").reason == full.verdict("narrow").reason
