"""A Kueue member's GPU quota as placement's second bound: flavors in order, node labels and
taints, pod sets that never split, cohort borrowing within its limits, closed queues, the
LocalQueue a copy lands in, and the engine choosing the member whose quota has room."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.fleet.queueing import KUEUE, Queueing
from dispatcher.fleet.quota import MemberQuota, QuotaObjects, build
from dispatcher.placement.engine import decide
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.demand import Toleration

from ..placement.builders import cluster, demand, shape
from .kueueobjects import cluster_queue, flavor, local_queue

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def one_queue(quotas: dict[str, int], reserved: dict[str, int] | None = None,
              flavors: tuple[dict[str, Any], ...] | None = None) -> MemberQuota:
    return build([cluster_queue("team-a", quotas, reserved=reserved)],
                 [local_queue("team-a", "gpus", "team-a")],
                 flavors or tuple(flavor(f, product=H100) for f in quotas))


def test_free_quota_is_nominal_minus_reserved_and_the_misfit_names_the_queues() -> None:
    quota = one_queue({"h100": 32}, reserved={"h100": 24})
    fit = quota.fit(demand([shape(2, 8, product=H100)]), namespace="team-a", queue="gpus")
    assert fit is not None and not fit.fits
    assert (fit.free, fit.reserved, fit.nominal, fit.asked) == (8, 24, 32, 16)
    assert fit.reason.startswith("ClusterQueue team-a (LocalQueue team-a/gpus): 24 of 32 "
                                 "nvidia.com/gpu reserved, 8 free by quota")
    ok = quota.fit(demand([shape(1, 8, product=H100)]), namespace="team-a", queue="gpus")
    assert ok is not None and ok.fits and ok.reason == ""


def test_only_flavors_whose_node_labels_the_pods_match_count() -> None:
    quota = one_queue({"a100": 64, "h100": 8},
                      flavors=(flavor("a100", product=A100), flavor("h100", product=H100)))
    h100 = quota.fit(demand([shape(2, 8, product=H100)]), namespace="team-a", queue="gpus")
    assert h100 is not None and not h100.fits and h100.free == 8
    anyone = quota.fit(demand([shape(2, 8)]), namespace="team-a", queue="gpus")
    assert anyone is not None and anyone.fits and anyone.free == 72


def test_a_tainted_flavor_needs_a_toleration() -> None:
    taint = ("dedicated", "gpu", "NoSchedule")
    quota = one_queue({"h100": 16}, flavors=(flavor("h100", product=H100, taints=(taint,)),))
    bare = quota.fit(demand([shape(1, 8, product=H100)]), namespace="team-a", queue="gpus")
    assert bare is not None and not bare.fits
    assert bare.reason == ("ClusterQueue team-a (LocalQueue team-a/gpus): no flavor of it "
                           "admits the pods (node labels, taints), 8 asked")
    tolerating = shape(1, 8, product=H100,
                       tolerations=(Toleration(key="dedicated", operator="Exists"),))
    fit = quota.fit(demand([tolerating]), namespace="team-a", queue="gpus")
    assert fit is not None and fit.fits


def test_a_pod_set_never_splits_across_flavors() -> None:
    quota = one_queue({"f1": 4, "f2": 4}, flavors=(flavor("f1"), flavor("f2")))
    whole = quota.fit(demand([shape(1, 8)]), namespace="team-a", queue="gpus")
    assert whole is not None and not whole.fits and whole.free == 8
    assert whole.reason.endswith("8 asked (a pod set of 8 GPU(s) finds no flavor with room)")
    two = quota.fit(demand([shape(1, 4)], [shape(1, 4)]), namespace="team-a", queue="gpus")
    assert two is not None and two.fits


def test_in_flight_gpus_are_taken_before_the_pod_sets() -> None:
    quota = one_queue({"h100": 16})
    ask = demand([shape(1, 8, product=H100)])
    fit = quota.fit(ask, namespace="team-a", queue="gpus", in_flight=8)
    assert fit is not None and fit.fits
    full = quota.fit(ask, namespace="team-a", queue="gpus", in_flight=9)
    assert full is not None and not full.fits and (full.free, full.in_flight) == (7, 9)
    assert full.reason == ("ClusterQueue team-a (LocalQueue team-a/gpus): 0 of 16 "
                           "nvidia.com/gpu reserved, 7 free by quota (9 held for copies just "
                           "sent), 8 asked")


@pytest.mark.parametrize(("limits", "free"), [
    ({}, 24),                                   # b lends all of its 16 unused
    ({"borrowing": {"h100": 4}}, 12),           # a borrows at most 4
    ({"lending": {"h100": 6}}, 14),             # b lends at most 6 (set on b)
])
def test_cohort_borrowing_within_its_limits(limits: dict[str, Any], free: int) -> None:
    lending = limits.get("lending")
    a = cluster_queue("a", {"h100": 16}, reserved={"h100": 8}, cohort="research",
                      borrowing=limits.get("borrowing"))
    b = cluster_queue("b", {"h100": 16}, cohort="research", lending=lending)
    quota = build([a, b], [local_queue("team-a", "gpus", "a")], [flavor("h100")])
    fit = quota.fit(demand([shape(1, 8)]), namespace="team-a", queue="gpus")
    assert fit is not None and fit.free == free


def test_a_queue_borrowing_from_the_cohort_leaves_less_to_lend() -> None:
    a = cluster_queue("a", {"h100": 8}, cohort="research")
    b = cluster_queue("b", {"h100": 8}, reserved={"h100": 12}, cohort="research")
    quota = build([a, b], [local_queue("team-a", "gpus", "a")], [flavor("h100")])
    fit = quota.fit(demand([shape(1, 8)]), namespace="team-a", queue="gpus")
    assert fit is not None and fit.free == 4 and not fit.fits


@pytest.mark.parametrize(("cq_spec", "lq_spec", "said"), [
    ({"stopPolicy": "Hold"}, {}, "ClusterQueue team-a stopped (stopPolicy Hold)"),
    ({"namespaceSelector": None}, {}, "admits no namespace"),
    ({}, {"stopPolicy": "HoldAndDrain"}, "stopped (stopPolicy HoldAndDrain)"),
])
def test_a_closed_queue_admits_nothing(cq_spec: dict[str, Any], lq_spec: dict[str, Any],
                                       said: str) -> None:
    quota = build([cluster_queue("team-a", {"h100": 32}, **cq_spec)],
                  [local_queue("team-a", "gpus", "team-a", **lq_spec)], [flavor("h100")])
    fit = quota.fit(demand([shape(1, 1)]), namespace="team-a", queue="gpus")
    assert fit is not None and not fit.fits and said in fit.reason


def test_the_local_queue_a_copy_lands_in() -> None:
    quota = build([cluster_queue("cq", {"h100": 8})],
                  [local_queue("team-a", "default", "cq")], [flavor("h100")])
    ask = demand([shape(1, 8)])
    defaulted = quota.fit(ask, namespace="team-a", queue=None)
    assert defaulted is not None and defaulted.local_queue == "team-a/default" and defaulted.fits
    assert quota.fit(ask, namespace="team-b", queue=None) is None  # not queued: not bounded
    missing = quota.fit(ask, namespace="team-b", queue="gpus")
    assert missing is not None and not missing.fits
    assert missing.reason == "LocalQueue team-b/gpus does not exist (the copy would wait forever)"


def test_v1beta1_cohort_and_quantities() -> None:
    a = cluster_queue("a", {"h100": 0}, cohort="")
    a["spec"]["cohort"] = "research"
    b = cluster_queue("b", {"h100": 16}, cohort="research")
    b["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "16"
    quota = build([a, b], [local_queue("ns", "q", "a")], [flavor("h100")])
    fit = quota.fit(demand([shape(2, 8)]), namespace="ns", queue="q")
    assert fit is not None and fit.fits and fit.free == 16


def test_quota_objects_follow_watch_events_and_rebuild_only_after_a_change() -> None:
    objects = QuotaObjects()
    objects.relist("clusterqueues", [cluster_queue("cq", {"h100": 8})])
    objects.relist("localqueues", [local_queue("ns", "q", "cq")])
    assert not objects.synced
    objects.relist("resourceflavors", [flavor("h100")])
    assert not objects.synced
    objects.relist("workloads", [])
    assert objects.synced
    view = objects.view()
    assert objects.view() is view
    objects.apply("clusterqueues", "MODIFIED", cluster_queue("cq", {"h100": 8},
                                                              reserved={"h100": 8}))
    fit = objects.view().fit(demand([shape(1, 1)]), namespace="ns", queue="q")
    assert fit is not None and fit.free == 0
    objects.apply("localqueues", "DELETED", local_queue("ns", "q", "cq"))
    gone = objects.view().fit(demand([shape(1, 1)]), namespace="ns", queue="q")
    assert gone is not None and "does not exist" in gone.reason


def _kueue_member(name: str, quota: MemberQuota, free_nodes: int) -> MemberSnapshot:
    capacity = cluster(*({"name": f"{name}-n{i}", "gpus": 8, "product": H100}
                         for i in range(free_nodes)))
    return MemberSnapshot(name=name, capacity=capacity, quota=quota,
                          queueing=Queueing(system=KUEUE, local_queue="gpus"))


@pytest.mark.parametrize("exhaustive", [True, False])
def test_placement_skips_a_member_whose_quota_is_exhausted(exhaustive: bool) -> None:
    full = _kueue_member("member-1", one_queue({"h100": 32}, reserved={"h100": 24}), 5)
    roomy = _kueue_member("member-2", one_queue({"h100": 32}), 3)
    request = PlacementRequest(demand=demand([shape(2, 8, product=H100)]),
                               namespace="team-a", exhaustive=exhaustive)
    decision = decide([full, roomy], request)
    assert decision.chosen == "member-2"
    chosen = decision.verdict("member-2").quota
    assert chosen is not None and chosen.cell() == "team-a: 32 of 32 free"
    assert chosen.describe().startswith("ClusterQueue team-a (LocalQueue team-a/gpus): 0 of 32")
    refused = decision.verdict("member-1")
    assert refused.feasible is False
    assert refused.reason == ("ClusterQueue team-a (LocalQueue team-a/gpus): 24 of 32 "
                              "nvidia.com/gpu reserved, 8 free by quota, 16 asked; 40 free "
                              "on nodes")
    assert decision.summary.endswith("; not by quota: member-1: " + refused.reason)
    assert "member-1: ClusterQueue team-a" in decide([full], request).summary


def test_quota_does_not_bound_a_member_without_kueue() -> None:
    exhausted = one_queue({"h100": 8}, reserved={"h100": 8})
    plain = MemberSnapshot(name="m", capacity=cluster({"name": "n", "gpus": 8}),
                           quota=exhausted)
    decision = decide([plain], PlacementRequest(demand=demand([shape(1, 8)]),
                                                namespace="team-a", exhaustive=True))
    assert decision.chosen == "m" and decision.verdict("m").quota is None


def test_a_fleet_file_carries_a_members_kueue_objects_and_explain_reads_their_quota() -> None:
    from pathlib import Path

    from dispatcher.fleet.fleetfile import FleetFileError, load_fleet, parse_fleet
    from dispatcher.placement.offline import fleet_snapshots

    fleet = load_fleet(Path(__file__).parents[3] / "clusters" / "kueue-members.yaml")
    member_1 = {m.name: m for m in fleet_snapshots(fleet)}["member-1"]
    assert member_1.queueing.system == KUEUE and member_1.quota is not None
    fit = member_1.quota.fit(demand([shape(3, 8, product=H100)]), namespace="team-a",
                             queue=None)
    assert fit is not None and not fit.fits and (fit.free, fit.nominal) == (16, 16)
    with pytest.raises(FleetFileError, match=r"members\[0\].kueue\[0\].kind: expected one of"):
        parse_fleet({"members": [{"name": "m", "kueue": [{"kind": "Pod"}]}]})
    with pytest.raises(FleetFileError, match=r"kueue\[0\].metadata.namespace"):
        parse_fleet({"members": [{"name": "m", "kueue": [
            {"kind": "LocalQueue", "metadata": {"name": "q"}}]}]})
    listed = parse_fleet({"members": [{"name": "m", "kueue": [
        {"kind": "ResourceFlavor", "metadata": {"name": "f"}}]}]})
    assert listed.members[0].kueue[0]["apiVersion"] == "kueue.x-k8s.io/v1beta2"


def _workload(name: str, *, queue: str, gpus: dict[str, int], reserved: bool = True,
              finished: bool = False) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    return {"metadata": {"name": name, "namespace": "ns"}, "status": {
        "conditions": conditions,
        "admission": {"clusterQueue": queue, "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": f, "cpu": f},
             "resourceUsage": {"nvidia.com/gpu": str(n), "cpu": "4"}}
            for f, n in gpus.items()]}}}


def test_the_quota_workloads_hold_counts_before_the_cluster_queue_status_says_so() -> None:
    objects = QuotaObjects()
    objects.relist("clusterqueues", [cluster_queue("cq", {"h100": 16})])  # status: 0 used
    objects.relist("localqueues", [local_queue("ns", "q", "cq")])
    objects.relist("resourceflavors", [flavor("h100")])
    objects.relist("workloads", [_workload("a", queue="cq", gpus={"h100": 8}),
                                 _workload("waiting", queue="cq", gpus={"h100": 8},
                                           reserved=False),
                                 _workload("done", queue="cq", gpus={"h100": 8},
                                           finished=True)])
    ask = demand([shape(1, 8)])
    fit = objects.view().fit(ask, namespace="ns", queue="q")
    assert fit is not None and (fit.reserved, fit.free) == (8, 8)
    version = objects.version
    objects.apply("workloads", "MODIFIED", _workload("waiting", queue="cq", gpus={"h100": 8},
                                                     reserved=False))
    assert objects.version == version  # holds nothing, held nothing: no rebuild
    objects.apply("workloads", "ADDED", _workload("b", queue="cq", gpus={"h100": 8}))
    full = objects.view().fit(ask, namespace="ns", queue="q")
    assert full is not None and not full.fits and full.reserved == 16
    objects.apply("workloads", "DELETED", _workload("a", queue="cq", gpus={"h100": 8}))
    # the status, once written, counts too: the larger of the two
    objects.apply("clusterqueues", "MODIFIED", cluster_queue("cq", {"h100": 16},
                                                              reserved={"h100": 12}))
    later = objects.view().fit(ask, namespace="ns", queue="q")
    assert later is not None and later.reserved == 12


@pytest.mark.parametrize("key", ["ns/hub-wl", "copy-uid"])
def test_a_reservation_counts_against_the_quota_until_its_workload_holds_it_then_once(
        key: str) -> None:
    """GPUs reserved for a copy just sent are in flight until the member's Kueue Workload
    for it (named as MultiKueue's copy, ``ns/hub-wl``, or labelled with the copy's uid)
    reserves quota; from then they are the ClusterQueue's numbers, not counted twice."""
    from dispatcher.fleet.capacity import ClusterCapacity
    from dispatcher.fleet.reservations import MemberReservations, Reservation

    from .objects import node

    capacity = ClusterCapacity()
    for name in ("n1", "n2"):
        capacity.upsert_node(node(name, 8))
    book = MemberReservations(member="m", capacity=capacity)
    book.add(Reservation(workload_uid="hub-uid", member="m", nodes=(("n1", 8),),
                         expires_at=100.0))
    book.quota_by("hub-uid", key)
    book.quota_by("not-held", "ns/other")  # no reservation: nothing to say of it
    objects = QuotaObjects()
    objects.relist("clusterqueues", [cluster_queue("cq", {"h100": 16})])
    objects.relist("localqueues", [local_queue("ns", "q", "cq")])
    objects.relist("resourceflavors", [flavor("h100")])
    objects.relist("workloads", [])

    def member() -> MemberSnapshot:
        quota = objects.view()
        return MemberSnapshot(name="m", capacity=capacity, quota=quota,
                              quota_in_flight=book.in_flight(quota.holders),
                              queueing=Queueing(system=KUEUE, local_queue="q"))

    ask = PlacementRequest(demand=demand([shape(1, 8)]), namespace="ns", exhaustive=True)
    before = decide([member()], ask).verdict("m").quota
    assert before is not None and before.fits and (before.free, before.in_flight) == (8, 8)
    held = _workload("hub-wl", queue="cq", gpus={"h100": 8})
    held["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "copy-uid"}
    objects.apply("workloads", "ADDED", held)
    assert objects.view().holders == {"ns/hub-wl", "copy-uid"}
    after = decide([member()], ask).verdict("m").quota
    assert after is not None and after.fits and (after.free, after.reserved,
                                                  after.in_flight) == (8, 8, 0)
    # another workload's Workload holding quota does not take this reservation's place
    book.quota_by("hub-uid", "ns/someone-else")
    both = decide([member()], ask).verdict("m").quota
    assert both is not None and (both.free, both.in_flight) == (0, 8) and not both.fits
    book.release("hub-uid")
    assert book.in_flight(objects.view().holders) == 0
