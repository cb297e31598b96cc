"""The controller's SRE metrics, read back from the registry's Prometheus text.

Covers: placement attempts by result (placed, adopted, the PendingReason) from real
``place`` answers; the queue gauges by reason and the wait histogram observed when a
waiting workload is placed (and not when it was deleted: pruned against the queue); the
reconcile wrapper (results, errors, busy workers while it runs); hub and member API
requests split by the client they came from, codes bounded; member gauges per GPU product
read from the fleet at scrape time (a removed member's series disappear); no workload
name or uid in any label value. Not covered: a live scrape of a running controller
(tests/e2e/test_dashboards.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.control.core.decide import MemberHealth
from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import place
from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.meters import ControllerProbe, placed, result_of
from dispatcher.control.observe import Metrics
from dispatcher.placement.model import MemberSnapshot
from tests.unit.control.placing_builders import given, job, members
from tests.unit.fleet.objects import node
from tests.unit.placement.builders import cluster


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    text = metrics.render().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


class Fleet:
    """A ``FleetView`` with only what the probe reads: snapshots and health."""

    def __init__(self, snapshots: list[MemberSnapshot], unreachable: Sequence[str] = ()) -> None:
        self.list = snapshots
        self.unreachable = set(unreachable)

    def snapshots(self) -> Sequence[MemberSnapshot]:
        return self.list

    def health(self, member: str) -> MemberHealth:
        return MemberHealth(reachable=member not in self.unreachable)


def probed(metrics: Metrics, queue: PendingQueue, fleet: Fleet | None = None,
           running: int = 0) -> None:
    metrics.attach(ControllerProbe(metrics=metrics, queue=queue,
                                   fleet=fleet or Fleet([]),  # type: ignore[arg-type]
                                   running=lambda: running, workers=8))


def attempt(metrics: Metrics, queue: PendingQueue, workload: dict[str, Any], **kw: Any) -> str:
    """One real placement applied to ``queue`` as the reconciler does; its result label."""
    placement = place(given(workload, queue=queue, **kw))
    if placement.queue.value == "placed":
        queue.placed(placement.entry)
    elif placement.queue.value == "wait":
        queue.add(placement.entry)
    elif placement.queue.value == "park":
        queue.park(placement.entry, placement.decision.summary)
    else:
        queue.remove(placement.entry.uid)
    placed(metrics, placement, 0.002, queue)
    return result_of(placement)[0]


def test_attempts_are_counted_by_result_and_waits_by_reason() -> None:
    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    probed(metrics, queue)
    assert attempt(metrics, queue, job("fits", gpus=4, parallelism=2)) == "placed"
    big = job("big", gpus=8, parallelism=2)  # 2 x 8: not free now (a0 busy), not impossible
    assert attempt(metrics, queue, big, fleet=members(used_a=8)) == "NoFeasibleMember"
    never = job("never", gpus=64, parallelism=1)
    assert attempt(metrics, queue, never) == "Unplaceable"
    assert value(metrics, "dispatcher_placement_attempts_total", result="placed") == 1
    assert value(metrics, "dispatcher_placement_attempts_total",
                 result="NoFeasibleMember") == 1
    assert value(metrics, "dispatcher_placement_duration_seconds_count") == 3
    assert value(metrics, "dispatcher_queue_depth", reason="NoFeasibleMember") == 1
    assert value(metrics, "dispatcher_queue_depth", reason="Unplaceable") == 1
    assert value(metrics, "dispatcher_queue_depth", reason="Queued") == 0  # always present
    oldest = value(metrics, "dispatcher_queue_oldest_wait_seconds", reason="Unplaceable")
    assert oldest is not None and oldest >= 0
    # the waiting one is placed once room frees: its wait is observed under its reason
    assert attempt(metrics, queue, job("big", gpus=8, parallelism=2)) == "placed"
    assert value(metrics, "dispatcher_queue_wait_seconds_count", reason="NoFeasibleMember") == 1
    assert value(metrics, "dispatcher_queue_depth", reason="NoFeasibleMember") == 0
    assert value(metrics, "dispatcher_placement_attempts_total", result="placed") == 2


def test_an_adopted_copy_and_a_deleted_waiting_workload() -> None:
    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    probed(metrics, queue)
    assert attempt(metrics, queue, job("held"), held=("a",)) == "adopted"
    assert attempt(metrics, queue, job("gone", gpus=64, parallelism=1)) == "Unplaceable"
    queue.remove("uid-gone")  # deleted while parked (Writes.forget): no wait observed
    assert value(metrics, "dispatcher_queue_depth", reason="Unplaceable") == 0
    assert "uid-gone" not in metrics.waiting_since
    assert value(metrics, "dispatcher_queue_wait_seconds_count", reason="Unplaceable") is None


def test_the_waiting_map_is_pruned_without_scrapes() -> None:
    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    for i in range(300):
        attempt(metrics, queue, job(f"w{i}", gpus=64, parallelism=1))
        queue.remove(f"uid-w{i}")
    assert len(metrics.waiting_since) <= 2 * len(queue) + 65


async def test_reconciles_are_counted_timed_and_shown_busy() -> None:
    metrics = Metrics.create()
    release = asyncio.Event()

    async def handler(uid: str) -> float | None:
        if uid == "boom":
            raise RuntimeError("broken")
        if uid == "slow":
            await release.wait()
        return 5.0 if uid == "later" else None

    metered = metrics.reconciling(handler)
    assert await metered("done") is None
    assert await metered("later") == 5.0
    with pytest.raises(RuntimeError):
        await metered("boom")
    slow = asyncio.create_task(metered("slow"))
    await asyncio.sleep(0)
    assert value(metrics, "dispatcher_workers_busy") == 1
    release.set()
    await slow
    assert value(metrics, "dispatcher_workers_busy") == 0
    assert value(metrics, "dispatcher_reconcile_total", result="success") == 2
    assert value(metrics, "dispatcher_reconcile_total", result="requeue_after") == 1
    assert value(metrics, "dispatcher_reconcile_total", result="error") == 1
    assert value(metrics, "dispatcher_reconcile_errors_total") == 1
    assert value(metrics, "dispatcher_reconcile_duration_seconds_count") == 4


class Client:
    def __init__(self, name: str) -> None:
        self.name = name


def test_requests_are_split_between_hub_and_members_with_bounded_codes() -> None:
    metrics = Metrics.create()
    hub, member, named_hub = Client("hub"), Client("gpu-east"), Client("hub")
    observe = metrics.request_observer(hub)
    observe(hub, "GET", 200, 0.003)
    observe(member, "PATCH", 409, 0.004)
    observe(member, "PATCH", 409, 0.004)
    observe(member, "WATCH", 0, 10.0)
    observe(named_hub, "GET", 200, 0.001)  # a member *named* hub is still a member
    observe(member, "GET", 999, 0.001)
    assert value(metrics, "dispatcher_hub_api_requests_total", verb="GET", code="200") == 1
    assert value(metrics, "dispatcher_member_api_requests_total", member="gpu-east",
                 verb="PATCH", code="409") == 2
    assert value(metrics, "dispatcher_member_api_requests_total", member="gpu-east",
                 verb="WATCH", code="0") == 1
    assert value(metrics, "dispatcher_member_api_requests_total", member="hub",
                 verb="GET", code="200") == 1
    assert value(metrics, "dispatcher_member_api_requests_total", member="gpu-east",
                 verb="GET", code="other") == 1
    assert value(metrics, "dispatcher_member_api_request_duration_seconds_count",
                 member="gpu-east", verb="PATCH") == 2
    assert value(metrics, "dispatcher_hub_api_request_duration_seconds_sum", verb="GET") \
        == pytest.approx(0.003)


def test_member_gauges_are_read_from_the_fleet_per_product() -> None:
    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    east = cluster({"name": "h0", "gpus": 8, "used": 3, "product": "NVIDIA-H100"},
                   {"name": "a0", "gpus": 4, "product": "NVIDIA-A100"})
    east.upsert_node(node("cpu0", 0))
    fleet = Fleet([MemberSnapshot(name="east", capacity=east),
                   MemberSnapshot(name="west", capacity=cluster({"name": "w0", "gpus": 2}),
                                  ready=False, not_ready_reason="ProbeFailed: timeout")],
                  unreachable=("west",))
    probed(metrics, queue, fleet, running=5)
    assert value(metrics, "dispatcher_member_free_gpus", member="east",
                 product="NVIDIA-H100") == 5
    assert value(metrics, "dispatcher_member_allocatable_gpus", member="east",
                 product="NVIDIA-H100") == 8
    assert value(metrics, "dispatcher_member_free_gpus", member="east",
                 product="NVIDIA-A100") == 4
    assert value(metrics, "dispatcher_member_free_gpus", member="west", product="") == 2
    assert value(metrics, "dispatcher_member_ready", member="east") == 1
    assert value(metrics, "dispatcher_member_ready", member="west") == 0
    assert value(metrics, "dispatcher_member_reachable", member="west") == 0
    assert value(metrics, "dispatcher_workers_max") == 8
    assert value(metrics, "dispatcher_workers_waiting") == 5
    fleet.list = fleet.list[:1]  # west removed: its series go with it
    assert value(metrics, "dispatcher_member_ready", member="west") is None
    probed(metrics, queue, fleet)  # attached again (a new controller): no duplicate series
    assert value(metrics, "dispatcher_member_ready", member="east") == 1


def test_no_workload_identity_in_any_label() -> None:
    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    probed(metrics, queue)
    for name, gpus in (("secret-project", 4), ("secret-huge", 64)):
        attempt(metrics, queue, job(name, gpus=gpus, parallelism=1))
    label_values = {v for (_, labels) in samples(metrics) for _, v in labels}
    assert not {v for v in label_values if "secret" in v}
    reasons = {v for (name, labels) in samples(metrics) for k, v in labels
               if name.startswith("dispatcher_queue_") and k == "reason"}
    assert reasons <= {r.value for r in PendingReason}


def test_a_kueue_members_quota_gauges_are_the_bound_placement_uses() -> None:
    from dispatcher.fleet.quota import build
    from tests.unit.fleet.kueueobjects import cluster_queue, flavor, local_queue

    metrics, queue = Metrics.create(), PendingQueue(backfill_limit=2)
    quota = build([cluster_queue("team-a", {"h100": 32}, reserved={"h100": 24})],
                  [local_queue("team-a", "gpus", "team-a")], [flavor("h100")])
    fleet = Fleet([MemberSnapshot(name="east", capacity=cluster({"name": "h0", "gpus": 8}),
                                  quota=quota),
                   MemberSnapshot(name="west", capacity=cluster({"name": "w0", "gpus": 2}))])
    probed(metrics, queue, fleet)
    labels = {"member": "east", "cluster_queue": "team-a", "flavor": "h100"}
    assert value(metrics, "dispatcher_member_quota_nominal_gpus", **labels) == 32
    assert value(metrics, "dispatcher_member_quota_free_gpus", **labels) == 8
    assert not [k for k in samples(metrics) if k[0].startswith("dispatcher_member_quota")
                and ("member", "west") in k[1]]
