"""admission: invalid requests and never-placeable workloads, over plain member snapshots.

Covered: every reason the issue names (bigger than every member, a product nobody has,
pinned to a missing or namespace-refusing member, bad selector or policy), what is *not*
unplaceable (full now but big enough; a member not listed yet), the bare copy
(the condition reasons are ``placing``'s: test_placing). Left out: the shell (integration tests).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dispatcher.control.core.parking import (
    BareFleet,
    annotation_error,
    bare,
    unplaceable,
)
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from tests.unit.placement.builders import cluster, demand, shape

H100 = "NVIDIA-H100-80GB-HBM3"


def fleet() -> list[MemberSnapshot]:
    """a: 2 x 8 H100, full; b: 4 x 4 (no product), half used, only takes team-b."""
    return [
        MemberSnapshot(name="a", capacity=cluster(
            {"name": "a0", "gpus": 8, "used": 8, "product": H100},
            {"name": "a1", "gpus": 8, "used": 8, "product": H100})),
        MemberSnapshot(name="b", capacity=cluster(*[
            {"name": f"b{i}", "gpus": 4, "used": 2} for i in range(4)]),
            allowed_namespaces=("team-b",)),
    ]


def request(*shapes: Any, namespace: str = "team-a", **kwargs: Any) -> PlacementRequest:
    return PlacementRequest(demand=demand(list(shapes)), namespace=namespace, **kwargs)


def never(req: PlacementRequest, members: list[MemberSnapshot] | None = None,
          unknown: tuple[str, ...] = ()) -> str | None:
    view, _ = BareFleet().view(members if members is not None else fleet())
    return unplaceable(view, req, unknown=unknown)


@pytest.mark.parametrize(("req", "words"), [
    (request(shape(1000, 8)), "even with every GPU free"),              # 8,000 GPUs
    (request(shape(1, 16)), "even with every GPU free"),                # no 16-GPU node
    (request(shape(1, 4, product="NVIDIA-B200")), "even with every GPU free"),
    (request(shape(1, 1), pin="nowhere"), "pinned member 'nowhere'"),
    (request(shape(1, 1), pin="b"), "namespace team-a not allowed"),    # b refuses team-a
    (request(shape(3, 8), namespace="team-b", pin="b"), "even with every GPU free"),
])
def test_never_placeable(req: PlacementRequest, words: str) -> None:
    reason = never(req)
    assert reason is not None and words in reason


@pytest.mark.parametrize("req", [
    request(shape(2, 8)),                            # a is full now, not forever
    request(shape(1, 8, product=H100)),
    request(shape(4, 4), namespace="team-b", pin="b"),
    request(shape(1, 4), namespace="team-b"),
])
def test_placeable_some_day(req: PlacementRequest) -> None:
    assert never(req) is None


def test_member_not_listed_yet_is_unknown_not_empty() -> None:
    """Issue 35: with one member never listed, an 8,000-GPU Job was queued (not parked),
    headed its namespace and was retried at every fleet change. Parked now, saying that
    only the unknown member might take it (re-checked when the fleet changes)."""
    members = [*fleet(), MemberSnapshot(name="c", capacity=ClusterCapacity(), ready=False,
                                        not_ready_reason="connecting")]
    reason = never(request(shape(1000, 8)), members, unknown=("c",))
    assert reason is not None and "c might once connected" in reason
    assert "even with every GPU free" in reason
    # ... and plainly unplaceable when it could not take the workload anyway
    pinned = never(request(shape(1, 16), pin="a"), members, unknown=("c",))
    assert pinned is not None and "might once connected" not in pinned
    # a workload a known member could run some day is not parked
    assert never(request(shape(2, 8)), members, unknown=("c",)) is None


def test_an_unreachable_member_counts_with_its_last_known_nodes() -> None:
    """A member that listed nodes and then went unreachable (nothing listed now) is judged
    on the nodes it last listed, not taken for unknown."""
    bare_fleet = BareFleet()
    members = fleet()
    bare_fleet.view(members)
    lost = [members[0], replace(members[1], capacity=ClusterCapacity(), ready=False,
                                not_ready_reason="unreachable")]
    view, unknown = bare_fleet.view(lost)
    assert unknown == ()
    assert view[1].capacity.node_count == 4 and view[1].ready
    reason = unplaceable(view, request(shape(1000, 8)), unknown=unknown)
    assert reason is not None and "might once connected" not in reason


def test_view_names_unknown_members_and_ignores_health_and_cordon() -> None:
    members = [replace(fleet()[0], ready=False, not_ready_reason="unreachable",
                       cordoned=True),
               MemberSnapshot(name="c", capacity=ClusterCapacity(), ready=False)]
    view, unknown = BareFleet().view(members)
    assert unknown == ("c",)
    assert view[0].ready and not view[0].cordoned
    assert view[0].capacity.free == 16
    assert never(request(shape(2, 8)), members[:1]) is None


def test_bare_keeps_nodes_drops_pods_and_reservations() -> None:
    live = cluster({"name": "n0", "gpus": 8, "used": 6}, {"name": "n1", "gpus": 4})
    live.reserve("n1", 3)
    copy = bare(live)
    assert (copy.free, copy.node_count, copy.pod_count) == (12, 2, 0)
    assert live.free == 2 + 1  # the live model is untouched


def test_bare_copies_are_rebuilt_when_nodes_change() -> None:
    cache = BareFleet()
    live = cluster({"name": "n0", "gpus": 8})
    member = MemberSnapshot(name="m", capacity=live)
    first = cache.view([member])[0][0].capacity
    assert cache.view([member])[0][0].capacity is first
    live.upsert_pod({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"namespace": "x", "name": "p"},
                     "spec": {"nodeName": "n0", "containers": [
                         {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
                     "status": {"phase": "Running"}})
    assert cache.view([member])[0][0].capacity is first  # pods do not matter
    from tests.unit.placement.objects import node
    live.upsert_node(node("n1", 16))
    grown = cache.view([member])[0][0].capacity
    assert grown is not first and grown.largest_free_block == 16


@pytest.mark.parametrize(("req", "words"), [
    (request(shape(1, 1), policy="fastest"), "dispatcher.io/policy='fastest'"),
    (request(shape(1, 1), selector="region in (us"), "dispatcher.io/cluster-selector"),
])
def test_invalid_annotations(req: PlacementRequest, words: str) -> None:
    reason = annotation_error(req)
    assert reason is not None and words in reason
    assert reason.startswith("invalid annotation dispatcher.io/")  # said once, not twice
    assert reason.endswith("not dispatched until it is fixed")


def test_valid_annotations() -> None:
    assert annotation_error(request(shape(1, 1), selector="region=us",
                                    policy="best-fit")) is None
