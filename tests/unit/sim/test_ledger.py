from __future__ import annotations

import pytest

from dispatcher.fleet.fleetfile import parse_fleet
from dispatcher.sim.ledger import Ledger, OverAllocationError
from dispatcher.workloads.demand import PodShape, Toleration

FLEET = parse_fleet({"members": [
    {"name": "a", "nodePools": [
        {"name": "h100", "count": 2, "gpus": 8, "gpuProduct": "H100"},
        {"name": "l40s", "count": 1, "gpus": 4, "gpuProduct": "L40S",
         "taints": [{"key": "inference", "effect": "NoSchedule"}]}]},
    {"name": "b", "nodePools": [{"name": "cpu", "count": 1, "gpus": 0}]},
]})


def test_hold_and_free_keep_totals() -> None:
    ledger = Ledger(FLEET)
    assert (ledger.total, ledger.used) == (20, 0)
    ledger.hold(uid="w", member="a", pods=[("a-h100-0", 8), ("a-h100-1", 3)])
    assert ledger.member_used == {"a": 11, "b": 0}
    assert ledger.node_used("a-h100-1") == 3
    assert ledger.free(uid="w") == "a"
    assert ledger.used == 0
    ledger.check()


def test_over_allocation_raises_and_books_nothing() -> None:
    ledger = Ledger(FLEET)
    ledger.hold(uid="w1", member="a", pods=[("a-h100-0", 6)])
    with pytest.raises(OverAllocationError, match="a-h100-0 would hold 10 GPUs but has 8"):
        ledger.hold(uid="w2", member="a", pods=[("a-h100-1", 8), ("a-h100-0", 4)])
    assert ledger.node_used("a-h100-1") == 0
    with pytest.raises(OverAllocationError, match="outside member b"):
        ledger.hold(uid="w3", member="b", pods=[("a-h100-1", 1)])
    with pytest.raises(OverAllocationError, match="not in the fleet"):
        ledger.hold(uid="w4", member="a", pods=[("ghost", 1)])
    with pytest.raises(OverAllocationError, match="placed twice"):
        ledger.hold(uid="w1", member="a", pods=[("a-h100-1", 1)])
    ledger.check()
    assert ledger.used == 6


def test_fragmentation_counts_free_gpus_no_pending_pod_can_use() -> None:
    ledger = Ledger(FLEET)
    ledger.hold(uid="w", member="a", pods=[("a-h100-0", 5)])
    # free: h100-0: 3, h100-1: 8, l40s (tainted): 4 -> 15
    assert ledger.fragmentation([PodShape(count=1, gpus=8)]) == (7, 15)  # only h100-1 usable
    assert ledger.fragmentation([PodShape(count=1, gpus=2)]) == (4, 15)  # the taint blocks
    tolerant = PodShape(count=1, gpus=2, tolerations=(
        Toleration(key="inference", operator="Exists"),))
    assert ledger.fragmentation([tolerant]) == (0, 15)
    l40s = PodShape(count=1, gpus=1, gpu_product="L40S")
    assert ledger.fragmentation([l40s]) == (15, 15)  # untolerated taint
    l40s_ok = PodShape(count=1, gpus=1, gpu_product="L40S", tolerations=tolerant.tolerations)
    assert ledger.fragmentation([l40s_ok]) == (11, 15)
    assert ledger.fragmentation([]) == (15, 15)
