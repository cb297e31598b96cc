"""MemberCluster status rendering, write throttling and the ``dispatcher clusters`` rows.

Covers: capacity roll-ups in the CRD's shape (per-product largest block, reserved GPUs
counted out of free); conditions keep lastTransitionTime while unchanged; unknown fields
are left out; writes happen on change (bounded by the minimum interval) or when the
lastSeen heartbeat is due; rows for full, empty and cordoned objects. Not covered: the
actual PATCH (integration tests).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatcher.fleet import health, status
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.kube.resources import GroupVersionKind

from .objects import node, pod

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB-HBM3"


def capacity() -> ClusterCapacity:
    cap = ClusterCapacity()
    cap.upsert_node(node("a", 8, product=H100))
    cap.upsert_node(node("b", 8, product=H100))
    cap.upsert_node(node("c", 4, product="NVIDIA-L40S", unschedulable=True))
    cap.upsert_pod(pod("p", 3, node_name="a"))
    cap.reserve("b", 2)
    return cap


def test_capacity_status_shape_and_numbers() -> None:
    out = status.capacity_status(capacity())
    assert out["nodes"] == 3
    assert out["readyNodes"] == 3
    assert out["cordonedNodes"] == 1
    assert out["gpus"] == {"total": 20, "allocatable": 20, "used": 3, "reserved": 2,
                           "free": 11, "largestFreeBlock": 6}
    assert out["products"] == [
        {"product": H100, "nodes": 2, "allocatable": 16, "free": 11, "largestFreeBlock": 6},
        {"product": "NVIDIA-L40S", "nodes": 1, "allocatable": 4, "free": 0,
         "largestFreeBlock": 0}]


def ready() -> health.Health:
    return health.synced(health.connected(health.initial(), now=T0, version="v1"), now=T0)


def test_conditions_keep_transition_time_while_unchanged() -> None:
    first = status.conditions(ready(), previous=(), now=T0)
    assert [(c["type"], c["status"]) for c in first] == [("Reachable", "True"),
                                                        ("Ready", "True")]
    later = T0 + timedelta(minutes=5)
    same = status.conditions(ready(), previous=first, now=later)
    assert [c["lastTransitionTime"] for c in same] == [status.format_time(T0)] * 2
    lost = health.failed(ready(), now=later, problem=health.Problem(
        health.Reason.CONNECTION_REFUSED, "cannot connect"),
        unreachable_after=timedelta(seconds=30))
    changed = status.conditions(lost, previous=same, now=later)
    by_type = {c["type"]: c for c in changed}
    assert by_type["Reachable"]["lastTransitionTime"] == status.format_time(T0)
    assert by_type["Ready"] == {"type": "Ready", "status": "False",
                                "reason": "ConnectionRefused", "message": "cannot connect",
                                "lastTransitionTime": status.format_time(later)}


def test_member_status_leaves_unknown_fields_out() -> None:
    out = status.member_status(health=health.initial(), capacity=None, version=None,
                               kinds=None, previous={}, now=T0)
    assert set(out) == {"conditions"}
    full = status.member_status(
        health=ready(), capacity=capacity(), version="v1.35.4",
        kinds={GroupVersionKind.of("ray.io/v1", "RayJob"),
               GroupVersionKind.of("jobset.x-k8s.io/v1alpha2", "JobSet")},
        previous={}, now=T0)
    assert full["lastSeen"] == "2026-01-01T12:00:00Z"
    assert full["kubernetesVersion"] == "v1.35.4"
    assert full["workloadKinds"] == [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                      "kind": "JobSet"},
                                     {"apiVersion": "ray.io/v1", "kind": "RayJob"}]
    assert full["capacity"]["gpus"]["free"] == 11


def desired(last_seen: str = "2026-01-01T12:00:00Z", free: int = 4) -> dict[str, Any]:
    return {"lastSeen": last_seen, "capacity": {"gpus": {"free": free}}}


@pytest.mark.parametrize(("wanted", "age_s", "write"), [
    (desired(), 100, False),                                   # nothing new
    (desired(free=3), 1, False),                               # changed, too soon
    (desired(free=3), 5, True),                                # changed, interval passed
    (desired(last_seen="2026-01-01T12:00:30Z"), 30, False),    # only lastSeen, no heartbeat
    (desired(last_seen="2026-01-01T12:01:00Z"), 60, True),     # heartbeat due
])
def test_needs_write(wanted: dict[str, Any], age_s: int, write: bool) -> None:
    assert status.needs_write(
        wanted, written=desired(), written_at=T0, now=T0 + timedelta(seconds=age_s),
        min_interval=timedelta(seconds=5), heartbeat=timedelta(seconds=60)) is write


def test_first_write_always_happens() -> None:
    assert status.needs_write(desired(), written=None, written_at=None, now=T0,
                              min_interval=timedelta(seconds=5),
                              heartbeat=timedelta(seconds=60))


def test_rows() -> None:
    now = T0 + timedelta(seconds=42)
    full = {"metadata": {"name": "east"},
            "spec": {"cordoned": True, "queueing": {"localQueue": "team-q"}},
            "status": status.member_status(health=ready(), capacity=capacity(),
                                           version="v1.35.4",
                                           kinds={GroupVersionKind.of("ray.io/v1", "RayJob")},
                                           previous={}, now=T0,
                                           gang=("workload-api", "workload-api"),
                                           queueing=("kueue", True))}
    assert status.row(full, now=now, wide=True) == [
        "east", "True,Cordoned", 3, 20, 11, 6, f"{H100}:11/16,NVIDIA-L40S:0/4", 1,
        "workload-api", "42s", "v1.35.4", "kueue:team-q", "Connected"]
    empty = {"metadata": {"name": "new"}, "spec": {}}
    assert status.row(empty, now=now) == ["new", "Unknown", None, None, None, None, None,
                                          None, None, None]
    assert len(status.BASE_COLUMNS) == 10
    assert len(status.WIDE_COLUMNS) == 13


def test_gang_scheduling_status_only_once_discovered() -> None:
    """``status.gangScheduling`` says the mechanism in use and the discovered one; before
    discovery answered it is left out (kept as last written)."""
    given = {"health": ready(), "capacity": None, "version": None, "kinds": None,
             "previous": {}, "now": T0}
    assert "gangScheduling" not in status.member_status(**given, gang=("none", None))
    assert status.member_status(**given, gang=("none", "workload-api"))[
        "gangScheduling"] == {"mechanism": "none", "discovered": "workload-api"}


def test_a_member_whose_kubernetes_has_a_gang_api_it_does_not_serve_says_why() -> None:
    given = {"health": ready(), "capacity": None, "kinds": None, "previous": {}, "now": T0}
    off = status.member_status(**given, version="v1.37.2", gang=("none", "none"))
    assert off["gangScheduling"]["note"].startswith("Kubernetes v1.37.2 has the built-in")
    row = status.row({"metadata": {"name": "m"}, "status": off}, now=T0)
    assert "none (API off)" in row
    on = status.member_status(**given, version="v1.37.2",
                              gang=("podgroup-v1beta1", "podgroup-v1beta1"))
    assert "note" not in on["gangScheduling"]
    assert "podgroup-v1beta1" in status.row({"metadata": {"name": "m"}, "status": on}, now=T0)
    old = status.member_status(**given, version="v1.33.5", gang=("none", "none"))
    assert "note" not in old["gangScheduling"]  # nothing to turn on there


def test_queueing_status_only_once_discovered() -> None:
    """``status.queueing`` says the system copies are queued for and whether the member
    serves Kueue; before discovery answered it is left out."""
    given = {"health": ready(), "capacity": None, "version": None, "kinds": None,
             "previous": {}, "now": T0}
    assert "queueing" not in status.member_status(**given, queueing=("none", None))
    assert status.member_status(**given, queueing=("none", True))["queueing"] == {
        "system": "none", "kueueServed": True}  # served, but the operator said none


def test_time_round_trip() -> None:
    assert status.parse_time(status.format_time(T0)) == T0
    assert status.parse_time("garbage") is None


def test_rows_leave_out_cpu_only_nodes() -> None:
    cap = capacity()
    cap.upsert_node(node("cpu-0", 0))
    obj = {"metadata": {"name": "m"},
           "status": status.member_status(health=ready(), capacity=cap, version=None,
                                          kinds=None, previous={}, now=T0)}
    assert any(p["product"] == "" for p in obj["status"]["capacity"]["products"])
    assert status.row(obj, now=T0)[6] == f"{H100}:11/16,NVIDIA-L40S:0/4"
