"""Decisions over members: filters and their reasons, policies, and the properties that
matter (a choice always comes with a valid explicit node assignment, infeasible members are
never chosen, the same input gives the same answer)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.nodes import HARD_EFFECTS
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.placement.engine import decide
from dispatcher.placement.fit import pack, pod_groups
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    PlacementError,
    PlacementRequest,
)
from dispatcher.workloads.demand import Demand, Gang, Toleration

from .builders import cluster, demand, shape
from .objects import node, pod

H100 = "NVIDIA-H100-80GB-HBM3"


def _members() -> list[MemberSnapshot]:
    big = cluster(*({"name": f"a{i}", "gpus": 8, "product": H100} for i in range(4)))
    small = cluster(*({"name": f"b{i}", "gpus": 8, "product": H100, "used": 4}
                      for i in range(4)))
    return [MemberSnapshot(name="big", capacity=big, labels={"region": "us"}),
            MemberSnapshot(name="small", capacity=small, labels={"region": "eu"})]


def _request(**kwargs: Any) -> PlacementRequest:
    return PlacementRequest(demand=demand([shape(2, 4, product=H100)]), **kwargs)


def test_most_free_and_best_fit_choose_opposite_ends() -> None:
    members = _members()
    assert decide(members, _request()).chosen == "big"
    decision = decide(members, _request(policy="best-fit"))
    assert decision.chosen == "small"
    assert decision.verdict("small").score == -8.0
    assert [(g.node, g.gpus) for g in decision.assignment] == [("b0", 4), ("b1", 4)]


def test_preference_goes_before_score_and_names_break_ties() -> None:
    members = _members()
    assert decide(members, _request(prefer=("small",))).chosen == "small"
    twins = [MemberSnapshot(name=n, capacity=cluster({"name": "x", "gpus": 8}))
             for n in ("zeta", "alpha")]
    assert decide(twins, PlacementRequest(demand=demand([shape(1, 8)]))).chosen == "alpha"


def test_weights_add_to_the_score_in_gpus() -> None:
    members = _members()  # big: 24 free after, small: 8 free after (most-free)
    assert decide(members, _request(weights={"small": 16.0})).chosen == "big"
    decision = decide(members, _request(weights={"small": 17.0}))
    assert decision.chosen == "small" and decision.verdict("small").score == 25.0


def test_pin_and_selector() -> None:
    members = _members()
    decision = decide(members, _request(pin="small"))
    assert decision.chosen == "small"
    assert decision.verdict("big").reason == "not the pinned member (dispatcher.io/cluster=small)"
    with pytest.raises(PlacementError, match="pinned member 'nope'"):
        decide(members, _request(pin="nope"))
    decision = decide(members, _request(selector="region=eu"))
    assert decision.chosen == "small"
    assert decision.verdict("big").reason == (
        "selector region=eu does not match (member has region=us)")
    with pytest.raises(PlacementError, match="cluster-selector"):
        decide(members, _request(selector="region in eu"))
    with pytest.raises(PlacementError, match="unknown placement policy"):
        decide(members, _request(policy="cheapest"))


def test_member_state_reasons() -> None:
    cap = cluster({"name": "n", "gpus": 8, "product": H100})
    members = [
        MemberSnapshot(name="down", capacity=cap, ready=False, not_ready_reason="timeout"),
        MemberSnapshot(name="drained", capacity=cap, cordoned=True),
        MemberSnapshot(name="noray", capacity=cap,
                       served_kinds=frozenset({GroupVersionKind.of("jobset.x-k8s.io/v1alpha2",
                                                                         "JobSet")})),
    ]
    decision = decide(members, _request(api_version="ray.io/v1", kind="RayJob"))
    assert decision.chosen is None and decision.assignment == ()
    assert [v.reason for v in decision.verdicts] == [
        "not ready: timeout", "cordoned", "kind RayJob (ray.io) not served"]
    assert decision.summary.startswith("no member can take 2 pod(s) / 8 GPU(s) in 1 gang(s): ")
    assert "drained: cordoned" in decision.summary
    json.dumps(decision.to_dict())


def test_fragmented_member_reason_in_decision() -> None:
    cap = cluster(*({"name": f"n{i}", "gpus": 8, "used": 4} for i in range(12)))
    decision = decide([MemberSnapshot(name="m", capacity=cap)],
                      PlacementRequest(demand=demand([shape(1, 8)]), count_fits=True))
    assert decision.verdict("m").reason == (
        "48 GPUs free, largest free block on one node is 4, a pod needs 8: fits 0 times")
    assert decision.verdict("m").fits == 0


def test_count_fits_and_assignments_for_every_feasible_member_when_explaining() -> None:
    decision = decide(_members(), _request(count_fits=True))
    assert decision.verdict("big").fits == 4 and decision.verdict("small").fits == 2
    assert all(v.assignment for v in decision.verdicts)


# -- properties ------------------------------------------------------------------------------

PRODUCTS = [None, "H100", "A100"]
TAINT = ("dedicated", "x", "NoSchedule")

node_specs = st.fixed_dictionaries({
    "gpus": st.sampled_from([0, 2, 4, 8]),
    "used": st.sampled_from([0, 0, 1, 2, 4]),
    "product": st.sampled_from(PRODUCTS),
    "ready": st.sampled_from([True, True, True, False]),
    "unschedulable": st.sampled_from([False, False, False, True]),
    "taints": st.sampled_from([[], [], [TAINT], [("evict", "", "NoExecute")]]),
    "labels": st.sampled_from([{}, {"zone": "a"}, {"zone": "b"}]),
})
clusters = st.lists(node_specs, min_size=0, max_size=6)
shapes = st.builds(
    lambda count, gpus, product, zone, tolerate: shape(
        count, gpus, product=product, selector={"zone": zone} if zone else None,
        tolerations=[Toleration(key="dedicated", operator="Exists")] if tolerate else []),
    st.integers(min_value=1, max_value=3), st.sampled_from([0, 1, 2, 3, 4, 8]),
    st.sampled_from(PRODUCTS), st.sampled_from([None, None, "a"]), st.booleans())
demands = st.lists(st.lists(shapes, min_size=1, max_size=2), min_size=1, max_size=3).map(
    lambda gangs: demand(*gangs))


def _build(specs: list[dict[str, Any]], *, order: random.Random | None = None
           ) -> ClusterCapacity:
    """A cluster from node specs, events in the given order (pods may precede nodes)."""
    events: list[tuple[str, dict[str, Any]]] = []
    for i, spec in enumerate(specs):
        name = f"n{i}"
        events.append(("node", node(name, spec["gpus"], product=spec["product"],
                                    ready=spec["ready"], unschedulable=spec["unschedulable"],
                                    taints=spec["taints"], labels=spec["labels"])))
        if spec["used"]:
            events.append(("pod", pod(f"busy-{i}", spec["used"], node_name=name)))
    if order is not None:
        order.shuffle(events)
    cap = ClusterCapacity()
    for kind, obj in events:
        (cap.upsert_node if kind == "node" else cap.upsert_pod)(obj)
    return cap


def _check_assignment(cap: ClusterCapacity, wanted: Demand, *, scale: int = 1) -> None:
    """The packer's explicit placements obey every per-node rule, checked from scratch."""
    groups = pod_groups(wanted)
    result = pack(cap, groups, scale=scale)
    assert result is not None
    load: dict[str, int] = {}
    placed = [0] * len(groups)
    for name, index, pods in result.placements():
        group, state = groups[index], cap.node(name)
        assert state is not None and state.ready and not state.unschedulable
        if group.product is not None:
            assert state.product == group.product
        assert all(state.labels.get(k) == v for k, v in group.selector)
        for key, value, effect in state.taints:
            if effect in HARD_EFFECTS:
                assert any(t.tolerates(key=key, value=value, effect=effect)
                           for t in group.tolerations)
        load[name] = load.get(name, 0) + group.gpus * pods
        placed[index] += pods
    for name, gpus in load.items():
        state = cap.node(name)
        assert state is not None and gpus <= state.free
    assert placed == [g.count * scale if g.gpus > 0 else 0 for g in groups]


@settings(max_examples=300, deadline=None)
@given(st.lists(clusters, min_size=1, max_size=3), demands,
       st.sampled_from(["most-free", "best-fit"]), st.randoms(use_true_random=False))
def test_choice_is_valid_feasible_and_deterministic(specs: list[list[dict[str, Any]]],
                                                   wanted: Demand, policy: str,
                                                   rng: random.Random) -> None:
    members = [MemberSnapshot(name=f"m{i}", capacity=_build(s)) for i, s in enumerate(specs)]
    request = PlacementRequest(demand=wanted, policy=policy)
    decision = decide(members, request)
    by_name = {m.name: m for m in members}
    explained = decide(members, PlacementRequest(demand=wanted, policy=policy, count_fits=True))
    for verdict in explained.verdicts:
        if verdict.feasible:
            assert verdict.fits is not None and verdict.fits >= 1
            _check_assignment(by_name[verdict.member].capacity, wanted)
            # "fits k times" is backed by a packing of k copies at once.
            _check_assignment(by_name[verdict.member].capacity, wanted, scale=verdict.fits)
        else:
            assert verdict.fits == 0
    if decision.chosen is None:
        assert not any(v.feasible for v in decision.verdicts)
        assert decision.assignment == ()
    else:
        chosen = decision.verdict(decision.chosen)
        assert chosen.feasible and decision.verdicts[0] is chosen
        assert sum(g.gpus for g in decision.assignment) == wanted.gpus
        for grant in decision.assignment:
            state = by_name[decision.chosen].capacity.node(grant.node)
            assert state is not None and grant.gpus <= state.free
    # Evaluating every member changes nothing about the choice.
    full = decide(members, PlacementRequest(demand=wanted, policy=policy, exhaustive=True))
    assert full.chosen == decision.chosen and full.assignment == decision.assignment
    assert all(v.feasible is not None for v in full.verdicts)
    # Same state reached through another event order and member order: same answer.
    again = [MemberSnapshot(name=f"m{i}", capacity=_build(s, order=rng))
             for i, s in enumerate(specs)]
    rng.shuffle(again)
    assert decide(again, request).to_dict() == decision.to_dict()


@settings(max_examples=200, deadline=None)
@given(st.lists(clusters, min_size=1, max_size=3), st.lists(demands, min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(min_value=0, max_value=2),
                          st.integers(min_value=0, max_value=7), st.booleans()),
                min_size=1, max_size=6),
       st.sampled_from(["most-free", "best-fit"]))
def test_memoised_verdicts_equal_fresh_ones(specs: list[list[dict[str, Any]]],
                                            wanted: list[Demand],
                                            changes: list[tuple[int, int, bool]],
                                            policy: str) -> None:
    """Verdicts answered from a member's memo (the controller's path) are the ones a
    member never decided before gives, across capacity changes between decisions."""
    live = [_build(s) for s in specs]
    for step, request_demand in enumerate(wanted * 2):
        request = PlacementRequest(demand=request_demand, policy=policy, exhaustive=True)
        memoised = decide([MemberSnapshot(name=f"m{i}", capacity=c)
                           for i, c in enumerate(live)], request)
        fresh = decide([MemberSnapshot(name=f"m{i}", capacity=_build(s))
                        for i, s in enumerate(specs)], request)
        assert memoised == fresh
        if step < len(changes):  # the same change on the live fleet and its description
            member, index, fill = changes[step]
            spec = specs[member % len(specs)]
            if spec:
                target = spec[index % len(spec)]
                target["used"] = target["gpus"] if fill else 0  # a node fills or empties
                rebuilt = _build(spec)
                live[member % len(specs)].relist_nodes(
                    [node(f"n{i}", s["gpus"], product=s["product"], ready=s["ready"],
                          unschedulable=s["unschedulable"], taints=s["taints"],
                          labels=s["labels"]) for i, s in enumerate(spec)])
                live[member % len(specs)].relist_pods(
                    [pod(f"busy-{i}", s["used"], node_name=f"n{i}")
                     for i, s in enumerate(spec) if s["used"]])
                assert rebuilt.free == live[member % len(specs)].free


# What a member looks like besides its capacity, and how a request reads it: every input of a
# verdict the memo must not answer from a stale entry.
member_metas = st.fixed_dictionaries({
    "labels": st.sampled_from([{}, {"region": "eu"}, {"region": "us", "tier": "batch"}]),
    "ready": st.sampled_from([True, True, True, False]),
    # restrict() turns excluded members not-ready with this reason (control.reconcile)
    "not_ready_reason": st.sampled_from(["", "Unreachable: timeout",
                                         "excluded: an earlier attempt there failed"]),
    "cordoned": st.sampled_from([False, False, True]),
    "served_kinds": st.sampled_from([None, frozenset({("batch", "Job")}),
                                     frozenset({("batch", "Job"), ("ray.io", "RayJob")})]),
    "allowed_namespaces": st.sampled_from([(), ("team-a",), ("team-b",)]),
})
requests = st.fixed_dictionaries({
    "pin": st.sampled_from([None, None, "m0", "m1"]),
    "selector": st.sampled_from([None, None, "region=eu", "tier!=batch"]),
    "namespace": st.sampled_from(["", "team-a", "team-b"]),
    "kind": st.sampled_from([("batch/v1", "Job"), ("ray.io/v1", "RayJob")]),
    "policy": st.sampled_from(["most-free", "best-fit"]),
    "mode": st.sampled_from(["decide", "exhaustive", "exhaustive", "explain"]),
    "prefer": st.sampled_from([(), ("m1",), ("m2", "m0")]),
    "weights": st.sampled_from([{}, {"m0": 3.0}, {"m1": -2.5, "m2": 1.0}]),
})


def _snapshots(capacities: list[ClusterCapacity], metas: list[dict[str, Any]]
               ) -> list[MemberSnapshot]:
    return [MemberSnapshot(name=f"m{i}", capacity=c, **metas[i % len(metas)])
            for i, c in enumerate(capacities)]


def _outcome(members: list[MemberSnapshot], request: PlacementRequest) -> object:
    try:
        return decide(members, request)
    except PlacementError as exc:
        return str(exc)


@settings(max_examples=200, deadline=None)
@given(st.lists(clusters, min_size=1, max_size=3), demands, st.data())
def test_memoised_verdicts_equal_fresh_ones_whatever_the_gates_and_reservations(
        specs: list[list[dict[str, Any]]], wanted: Demand, data: st.DataObject) -> None:
    """Memoised verdicts (pack results, whole verdicts, gate verdicts) equal a fresh
    decision's while member metadata, request rules (pin, selector, namespace, kind, policy,
    mode, preference, weights), node usage and reservations change between decisions."""
    live = [_build(s) for s in specs]
    reserved: list[list[tuple[str, int]]] = [[] for _ in specs]
    for _ in range(data.draw(st.integers(min_value=2, max_value=6), label="decisions")):
        metas = data.draw(st.lists(member_metas, min_size=len(specs), max_size=len(specs)),
                          label="metas")
        rules: dict[str, Any] = data.draw(requests, label="request")
        api_version, kind = rules["kind"]
        request = PlacementRequest(
            demand=data.draw(st.sampled_from([wanted, wanted, demand([shape(1, 1)])]),
                             label="demand"),
            api_version=api_version, kind=kind, pin=rules["pin"], selector=rules["selector"],
            namespace=rules["namespace"], policy=rules["policy"], prefer=rules["prefer"],
            weights=rules["weights"], exhaustive=rules["mode"] == "exhaustive",
            count_fits=rules["mode"] == "explain")
        fresh_caps = [_build(s) for s in specs]
        for cap, held in zip(fresh_caps, reserved, strict=True):
            for node_name, gpus in held:
                cap.reserve(node_name, gpus)
        memoised = _outcome(_snapshots(live, metas), request)
        assert memoised == _outcome(_snapshots(fresh_caps, metas), request)
        # Between decisions: the chosen member reserves its assignment (as the controller
        # does), and a node fills, empties or loses a reservation.
        if isinstance(memoised, Decision) and memoised.chosen is not None:
            index = int(memoised.chosen[1:])
            for grant in memoised.assignment:
                live[index].reserve(grant.node, grant.gpus)
                reserved[index].append((grant.node, grant.gpus))
        member = data.draw(st.integers(min_value=0, max_value=len(specs) - 1), label="member")
        change = data.draw(st.sampled_from(["fill", "empty", "release", "none"]), label="what")
        spec = specs[member]
        if change == "release" and reserved[member]:
            node_name, gpus = reserved[member].pop()
            live[member].reserve(node_name, -gpus)
        elif change in ("fill", "empty") and spec:
            index = data.draw(st.integers(min_value=0, max_value=len(spec) - 1), label="node")
            spec[index]["used"] = spec[index]["gpus"] if change == "fill" else 0
            live[member].relist_pods([pod(f"busy-{i}", s["used"], node_name=f"n{i}")
                                      for i, s in enumerate(spec) if s["used"]])


def test_memo_answers_per_member_name_and_policy() -> None:
    """One capacity seen under two names gets each name's verdict; a most-free decision's
    memo does not answer a best-fit one (its tie-break reads the placement's leftover)."""
    cap = cluster({"name": "a", "gpus": 8, "product": H100})
    request = PlacementRequest(demand=demand([shape(1, 4, product=H100)]), exhaustive=True)
    assert decide([MemberSnapshot(name="first", capacity=cap)], request).chosen == "first"
    assert decide([MemberSnapshot(name="second", capacity=cap)], request).chosen == "second"
    # Same free GPUs, so best-fit ties on score: the member whose 4-GPU node takes the pod
    # (leftover 0) beats the one that must split its 8-GPU node (leftover 4), names aside.
    snug = cluster({"name": "s0", "gpus": 4, "product": H100},
                   {"name": "s1", "gpus": 4, "product": H100})
    loose = cluster({"name": "l0", "gpus": 8, "product": H100},
                    {"name": "l1", "gpus": 8, "product": H100, "used": 8})
    members = [MemberSnapshot(name="z-snug", capacity=snug),
               MemberSnapshot(name="a-loose", capacity=loose)]
    decide(members, request)  # most-free: fills both members' memos
    assert decide(members, replace(request, policy="best-fit")).chosen == "z-snug"


def test_whole_workload_fits_on_one_member_whatever_its_units() -> None:
    """Independent pods and several gangs are still placed together: a member that could
    run each unit alone but not all of them at once is infeasible (issue #15 part 6).

    "two": 2 nodes x 8 free GPUs = 16; "four": 4 x 8 = 32. The workload: a gang of 2 pods
    x 8 GPUs plus 1 independent pod x 8 GPUs = 24 GPUs, so only "four" takes it."""
    two = cluster(*({"name": f"t{i}", "gpus": 8, "product": H100} for i in range(2)))
    four = cluster(*({"name": f"f{i}", "gpus": 8, "product": H100} for i in range(4)))
    members = [MemberSnapshot(name="two", capacity=two),
               MemberSnapshot(name="four", capacity=four)]
    units = Demand(gangs=(
        Gang(name="ray", pods=2, min_pods=2, pod_shapes=(shape(2, 8, product=H100),)),
        Gang(name="submitter", pods=1, min_pods=1, pod_shapes=(shape(1, 8, product=H100),),
             independent=True)))
    decision = decide(members, PlacementRequest(demand=units))
    assert decision.chosen == "four"
    assert decision.gangs == 1
    assert decision.summary.startswith(
        "placed 3 pod(s) / 24 GPU(s) in 1 gang(s) and 1 independent pod(s) on four")
    assert decision.verdict("two").reason is not None
    assert decision.verdict("two").reason.startswith("16 GPUs free")
    assert sum(g.gpus for g in decision.assignment) == 24
    # the same pods as one gang get the same answer and the same nodes
    whole = decide(members, PlacementRequest(demand=demand([shape(3, 8, product=H100)])))
    assert (whole.chosen, whole.assignment) == (decision.chosen, decision.assignment)


def test_misfit_names_gangs_and_independent_pods() -> None:
    """2 nodes x 8 GPUs; 3 independent pods of 8 GPUs: room for 2 of 3."""
    two = cluster(*({"name": f"t{i}", "gpus": 8} for i in range(2)))
    units = Demand(gangs=(Gang(name="web", pods=3, min_pods=1, pod_shapes=(shape(3, 8),),
                               independent=True),))
    decision = decide([MemberSnapshot(name="two", capacity=two)],
                      PlacementRequest(demand=units))
    assert decision.chosen is None and decision.gangs == 0
    assert decision.summary.startswith("no member can take 3 pod(s) / 24 GPU(s) as 3 "
                                       "independent pod(s): ")
    assert "room for 2 of 3 pods of 8 GPUs (pods web): fits 0 times" in decision.summary


def test_a_requests_identity_holds_every_field() -> None:
    """``identity`` keys memos of answers that are a function of the request (the
    simulator's bare-fleet memo): a field left out of it would share one answer between
    requests that differ in it."""
    from dataclasses import fields

    from dispatcher.placement.model import PlacementRequest

    request = PlacementRequest(demand=demand([shape(1, 8)]), weights={"b": 1.0, "a": 2.0})
    assert len(request.identity) == len(fields(PlacementRequest))
    assert request.identity == PlacementRequest(
        demand=demand([shape(1, 8)]), weights={"a": 2.0, "b": 1.0}).identity
    for name, other in (("pin", "x"), ("selector", "a=b"), ("policy", "best-fit"),
                        ("namespace", "team-b"), ("reasons", False), ("exhaustive", True)):
        assert replace(request, **{name: other}).identity != request.identity, name
    hash(request.identity)


def test_a_choice_only_request_chooses_alike_and_leaves_the_rejected_out() -> None:
    members = _members()
    for policy in ("most-free", "best-fit"):
        for pods, gpus in ((2, 4), (4, 8), (8, 8)):  # the last fits nowhere
            wanted = demand([shape(pods, gpus, product=H100)])
            full = decide(members, PlacementRequest(demand=wanted, policy=policy,
                                                    exhaustive=True))
            terse = decide(members, PlacementRequest(demand=wanted, policy=policy,
                                                     reasons=False))
            assert terse.chosen == full.chosen and terse.assignment == full.assignment
            out_of_bounds = {v.member for v in full.verdicts if not v.feasible
                             and "free" in v.reason and v.free < wanted.gpus}
            assert not out_of_bounds & {v.member for v in terse.verdicts}
    # a selector's gate rejects "big": no verdict for it without reasons
    gated = decide(members, _request(selector="region=eu", reasons=False))
    assert gated.chosen == "small" and [v.member for v in gated.verdicts] == ["small"]
