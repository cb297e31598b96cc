"""The fleet view's data: the recent-decision ring and a member's rows.

Covered: one entry per workload (its latest), newest first, bounded; a member's free GPUs
per product and the free blocks of single nodes (tainted nodes apart, their taint named,
full nodes and unschedulable ones left out), reservations counted.
"""

from __future__ import annotations

import pytest

from dispatcher.control.overview import Block, member_row
from dispatcher.control.recent import RecentDecisions
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.placement.model import Decision, Verdict
from tests.unit.fleet.objects import node, pod

H100 = "NVIDIA-H100-80GB-HBM3"


def decision(chosen: str | None) -> Decision:
    return Decision(policy="most-free", pods=1, gpus=8, gangs=1, chosen=chosen,
                    assignment=(), summary="s",
                    verdicts=(Verdict(member="m1", feasible=chosen == "m1", reason="r",
                                      free=8),))


def workload(uid: str) -> dict[str, str]:
    return {"namespace": "team-a", "name": f"w-{uid}", "kind": "JobSet", "uid": uid}


def test_recent_keeps_the_latest_decision_per_workload_newest_first() -> None:
    recent = RecentDecisions(limit=3)
    recent.add(at=1.0, workload=workload("a"), decision=decision(None))
    recent.add(at=2.0, workload=workload("b"), decision=decision(None))
    recent.add(at=3.0, workload=workload("a"), decision=decision("m1"))
    assert [(d.workload["uid"], d.at, d.decision.chosen) for d in recent.newest_first()] == [
        ("a", 3.0, "m1"), ("b", 2.0, None)]


def test_recent_is_bounded() -> None:
    recent = RecentDecisions(limit=3)
    for i in range(10):
        recent.add(at=float(i), workload=workload(str(i)), decision=decision(None))
    assert len(recent) == 3
    assert [d.workload["uid"] for d in recent.newest_first()] == ["9", "8", "7"]
    with pytest.raises(ValueError):
        RecentDecisions(limit=0)


def test_member_row_shows_free_gpus_per_product_and_node_blocks() -> None:
    from dispatcher.fleet.capacity import ClusterCapacity

    cap = ClusterCapacity()
    for spec in (node("h1", 8, product=H100), node("h2", 8, product=H100),
                 node("h3", 8, product=H100),
                 node("t1", 8, product=H100, taints=[("dedicated", "research", "NoSchedule")]),
                 node("c1", 8, product=H100, unschedulable=True),
                 node("l1", 4, product="NVIDIA-L40S")):
        cap.upsert_node(spec)
    cap.upsert_pod(pod("busy", 6, node_name="h2"))  # 2 free there
    cap.upsert_pod(pod("full", 8, node_name="h3"))  # none free
    cap.reserve("l1", 1)
    row = member_row(MemberSnapshot(name="m1", capacity=cap, labels={"region": "eu"},
                                    ready=False, not_ready_reason="Syncing"),
                     reachable=True)
    assert (row.name, row.ready, row.reason, row.labels) == ("m1", False, "Syncing",
                                                             {"region": "eu"})
    assert (row.allocatable, row.reserved) == (44, 1)
    products = {p.product: p for p in row.products}
    h100 = products[H100]
    assert h100.allocatable == 40
    assert h100.blocks == (
        Block(gpus=8, nodes=1),
        Block(gpus=8, nodes=1, taints=("dedicated=research:NoSchedule",)),
        Block(gpus=2, nodes=1))
    assert products["NVIDIA-L40S"].blocks == (Block(gpus=3, nodes=1),)
