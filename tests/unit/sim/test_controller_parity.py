"""One seeded stream through the controller's placing path and through ``simulate``: the
same decision for every workload.

The controller's path is ``control.core.placing.place`` on real Job objects resolved through the
built-in catalog, its queue step applied to a ``PendingQueue`` and its reservation held in
the member's ``MemberReservations`` (as ``control.reconcile`` does); ``simulate`` runs the
same workloads (the same demands, annotations, priorities, arrival order) through its event
loop. Nothing completes, so capacity only shrinks and a workload that waits once waits to
the end on both paths. The stream mixes gangs of several sizes, two namespaces, priorities,
a small backfill limit (so the namespace gate holds some), pins, selectors, a best-fit
override, and annotations the controller parks (unknown policy, bad selector, a pin to a
member that does not exist) next to workloads too big for any member. Claims are off on
both paths (``claimAfter`` 0: the gate holds at the backfill limit): a claim acts through
the rounds it starts, which this arrival-only walk of the controller's path does not model
(``tests/unit/sim/test_engine.py`` and ``tests/integration/test_control_claims.py`` do).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.parking import BareFleet
from dispatcher.control.core.placing import PlacementInput, QueueStep, place
from dispatcher.control.core.priority import PriorityPolicy
from dispatcher.control.core.queue import PendingQueue
from dispatcher.fleet.fleetfile import FleetSpec, parse_fleet
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.placement.offline import fleet_snapshots
from dispatcher.sim.cores import CoreBackend
from dispatcher.sim.engine import simulate
from dispatcher.sim.results import SimWorkload
from dispatcher.sim.scenario import QueueSpec
from dispatcher.sim.stream import annotations_of
from dispatcher.workloads.catalog import Catalog

CATALOG = Catalog.builtin()
BACKFILL = 2
START = 1_800_000_000.0  # creationTimestamp of the first arrival (Unix seconds)
ANNOTATIONS: list[dict[str, str]] = [
    {}, {}, {}, {},
    {"dispatcher.io/cluster": "east"},
    {"dispatcher.io/cluster-selector": "region=eu"},
    {"dispatcher.io/policy": "best-fit"},
    {"dispatcher.io/policy": "fastest"},                 # parked: unknown policy
    {"dispatcher.io/cluster-selector": "region in (eu"},  # parked: bad selector
    {"dispatcher.io/cluster": "nowhere"},                # parked: no such member
]


def fleet() -> FleetSpec:
    return parse_fleet({"members": [
        {"name": "east", "labels": {"region": "us"},
         "nodePools": [{"name": "big", "count": 3, "gpus": 8}]},
        {"name": "west", "labels": {"region": "us"},
         "nodePools": [{"name": "small", "count": 4, "gpus": 4}]},
        {"name": "euro", "labels": {"region": "eu"},
         "nodePools": [{"name": "mixed", "count": 2, "gpus": 8},
                       {"name": "tiny", "count": 2, "gpus": 2}]}]})


def job(uid: str, *, at: float, namespace: str, pods: int, gpus: int, priority: int,
        annotations: dict[str, str]) -> dict[str, Any]:
    stamp = f"2027-01-15T08:{int(at) // 60:02d}:{int(at) % 60:02d}Z"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": uid, "namespace": namespace, "uid": uid,
                         "creationTimestamp": stamp,
                         "annotations": {**annotations,
                                         "dispatcher.io/priority": str(priority)}},
            "spec": {"parallelism": pods, "completions": pods,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": "busybox",
                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}


def stream(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` Job objects, one a second, drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [job(f"w{i:03d}", at=float(i), namespace=rng.choice(["team-a", "team-b"]),
                pods=rng.choice([1, 1, 2, 3, 4]), gpus=rng.choice([1, 2, 4, 8, 16]),
                priority=rng.choice([0, 0, 1, 5]), annotations=rng.choice(ANNOTATIONS))
            for i in range(count)]


Outcome = tuple[str, str]  # ("placed", member) | ("parked", reason) | ("waits", reason)


def through_the_controller(spec: FleetSpec, objects: list[dict[str, Any]]
                           ) -> tuple[dict[str, Outcome], dict[str, dict[str, int]]]:
    """Each object placed on arrival by ``control.core.placing.place``, its queue step and
    reservation applied as ``control.reconcile`` applies them."""
    members = fleet_snapshots(spec)
    books = {m.name: MemberReservations(member=m.name, capacity=m.capacity) for m in members}
    queue, bare = PendingQueue(backfill_limit=BACKFILL), BareFleet()
    outcomes: dict[str, Outcome] = {}
    nodes: dict[str, dict[str, int]] = {}
    for at, obj in enumerate(objects):
        uid = obj["metadata"]["uid"]
        placement = place(PlacementInput(
            uid=uid, workload=obj, resolution=CATALOG.resolve(obj), excluded=(), held=(),
            members=lambda: members, bare=bare, queue=queue,
            priority=PriorityPolicy(max=10), default_policy="most-free",
            reservation_ttl_s=3600.0, now=START + at))
        step, entry = placement.queue, placement.entry
        if step is QueueStep.PLACED:
            queue.placed(entry)
            assert placement.reservation is not None and placement.decision.chosen
            books[placement.decision.chosen].add(placement.reservation)
            outcomes[uid] = ("placed", placement.decision.chosen)
            nodes[uid] = dict(placement.reservation.nodes)
        elif step is QueueStep.PARK:
            queue.park(entry, str(placement.reason))
            outcomes[uid] = ("parked", str(placement.reason))
        else:
            assert step is QueueStep.WAIT
            queue.add(entry)
            outcomes[uid] = ("waits", str(placement.reason))  # Queued: behind the gate
    return outcomes, nodes


def through_simulate(spec: FleetSpec, objects: list[dict[str, Any]]
                     ) -> tuple[dict[str, Outcome], dict[str, dict[str, int]]]:
    workloads = [SimWorkload(
        uid=obj["metadata"]["uid"], namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"], kind=obj["kind"], api_version=obj["apiVersion"],
        template="job", arrival=float(at), run_time=None,
        priority=int(obj["metadata"]["annotations"]["dispatcher.io/priority"]),
        demand=CATALOG.resolve(obj).demand, annotations=annotations_of(obj))
        for at, obj in enumerate(objects)]
    result = simulate(fleet=spec, workloads=workloads, backend=CoreBackend(spec),
                      policy="most-free", duration=float(len(objects) + 10),
                      queue=QueueSpec(backfill_limit=BACKFILL, claim_after_s=0.0),
                      sample_interval=5.0,
                      check_every=1)
    outcomes: dict[str, Outcome] = {w.uid: ("waits", "") for w in workloads}
    nodes: dict[str, dict[str, int]] = {}
    for decision in result.decisions:
        outcomes[decision.uid] = ("placed", decision.member)
        per_node: dict[str, int] = defaultdict(int)
        for node, gpus in decision.nodes:
            per_node[node] += gpus
        nodes[decision.uid] = dict(per_node)
    for item in result.unplaceable:
        outcomes[item.uid] = ("parked", item.parked)
    assert result.pending_at_end == sum(1 for o in outcomes.values() if o[0] == "waits")
    return outcomes, nodes


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 6, 7, 8, 9])
def test_the_controller_and_simulate_decide_alike(seed: int) -> None:
    spec, objects = fleet(), stream(seed, 60)
    controller, controller_nodes = through_the_controller(spec, objects)
    simulated, simulated_nodes = through_simulate(spec, objects)
    for obj in objects:
        uid = obj["metadata"]["uid"]
        kind, why = controller[uid]
        # simulate keeps no per-workload wait reason: a waiting one is waiting
        expected = (kind, "") if kind == "waits" else (kind, why)
        assert simulated[uid] == expected, (uid, obj["metadata"]["annotations"], why)
    assert simulated_nodes == controller_nodes
    # The stream exercises every branch the comparison is about.
    kinds = set(controller.values())
    assert "placed" in {kind for kind, _ in kinds}
    assert ("waits", str(PendingReason.NO_FEASIBLE_MEMBER)) in kinds
    assert ("waits", str(PendingReason.QUEUED)) in kinds  # the namespace gate held some
    assert ("parked", str(PendingReason.INVALID_ANNOTATION)) in kinds
    assert ("parked", str(PendingReason.UNPLACEABLE)) in kinds
