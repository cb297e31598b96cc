"""The event loop over the real capacity model and placement engine."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.fleet.fleetfile import FleetSpec, node_manifests, parse_fleet
from dispatcher.sim.cores import CoreBackend
from dispatcher.sim.engine import simulate
from dispatcher.sim.results import RunResult, SimWorkload
from dispatcher.sim.scenario import QueueSpec
from dispatcher.sim.stream import annotations_of
from tests.unit.sim.helpers import demand, fleet, workload


def run(spec: FleetSpec, workloads: list[SimWorkload], *, policy: str = "most-free",
        duration: float = 100.0, queue: QueueSpec | None = None,
        backend: CoreBackend | None = None) -> RunResult:
    return simulate(fleet=spec, workloads=workloads, backend=backend or CoreBackend(spec),
                    policy=policy, duration=duration, queue=queue, sample_interval=1.0,
                    check_every=1)


def test_hand_computed_waits_and_choices() -> None:
    # a: one node of 8 GPUs; b: two nodes of 4.
    spec = fleet({"a": [(1, 8)], "b": [(2, 4)]})
    result = run(spec, [
        workload("w1", at=0, run=10, need=demand((1, 8))),  # only a has an 8-GPU node
        workload("w2", at=1, run=20, need=demand((2, 4))),  # a is full -> b
        workload("w3", at=2, run=5, need=demand((1, 8))),   # waits for w1: starts at 10
        workload("w4", at=3, run=1, need=demand((1, 4))),   # behind w3; b full until 21,
    ], duration=30)                                          # a free again at 15
    got = {d.uid: (d.member, d.start, d.wait) for d in result.decisions}
    assert got == {"w1": ("a", 0, 0), "w2": ("b", 1, 0), "w3": ("a", 10, 8),
                   "w4": ("a", 15, 12)}
    assert result.decisions[1].nodes == (("b-p0-0", 4), ("b-p0-1", 4))
    assert result.completed == 4
    assert result.pending_at_end == 0
    # GPU-seconds: a: 8*10 + 8*5 + 4*1 = 124; b: 8*20 = 160; fleet 16 GPUs over 30 s.
    assert result.gpu_seconds == {"a": 124.0, "b": 160.0}
    assert result.utilization == pytest.approx(284 / (16 * 30))


def test_priority_first_then_age() -> None:
    spec = fleet({"a": [(1, 8)]})
    result = run(spec, [
        workload("first", at=0, run=10, need=demand((1, 8))),
        workload("old", at=1, run=5, need=demand((1, 8))),
        workload("urgent", at=2, run=5, need=demand((1, 8)), priority=10),
    ])
    assert [(d.uid, d.start) for d in result.decisions] == [
        ("first", 0), ("urgent", 10), ("old", 15)]


@pytest.mark.parametrize(("limit", "namespace", "start"), [
    (0, "default", 60),  # head-of-line blocking: waits for the big one (starts 50, runs 10)
    (0, "team-b", 2),    # ... but never across namespaces
    (4, "default", 2),   # backfill within the limit
])
def test_backfill_is_bounded_per_namespace(limit: int, namespace: str, start: float) -> None:
    spec = fleet({"a": [(2, 8)]})
    stream = [workload("busy", at=0, run=50, need=demand((1, 4))),
              workload("big", at=1, run=10, need=demand((2, 8))),
              replace(workload("small", at=2, run=10, need=demand((1, 2))),
                      namespace=namespace)]
    result = run(spec, stream, queue=QueueSpec(backfill_limit=limit))
    assert {d.uid: d.start for d in result.decisions}["small"] == start


def test_the_gate_rescues_a_starving_gang() -> None:
    # Small 1-GPU jobs arrive every second and run 3.5 s, so the two nodes are never both
    # empty; the 2 x 8 GPU gang starts only once its namespace's gate holds them back.
    spec = fleet({"a": [(2, 8)]})
    smalls = [workload(f"s{i}", at=float(i), run=3.5, need=demand((1, 1)))
              for i in range(200)]
    big = workload("big", at=0.5, run=10, need=demand((2, 8)))
    starved = run(spec, [*smalls, big], duration=250,
                  queue=QueueSpec(backfill_limit=10_000))
    assert {d.uid: d.start for d in starved.decisions}["big"] > 200
    assert starved.gated == 0
    rescued = run(spec, [*smalls, big], duration=250, queue=QueueSpec(backfill_limit=5))
    starts = {d.uid: d.start for d in rescued.decisions}
    assert rescued.gated == 1
    # Five small jobs were placed past it, then the ones running finished (3.5 s at most).
    assert starts["big"] <= 0.5 + 5 + 3.5 + 1


def test_a_saturated_gang_holds_one_member_and_its_namespace_runs_on_the_others() -> None:
    """One namespace streams 1-GPU jobs over two members while its 2 x 8 gang waits. With
    claims off, the gate (backfill limit 5) holds the namespace off both members until the
    gang starts; with them, the gang claims one member within its namespace: it starts
    within the same bound (that member drains once what runs there ends; the gate's
    either member, a fraction sooner), and the stream keeps the other member busy."""
    spec = fleet({"a": [(2, 8)], "b": [(2, 8)]})
    smalls = [workload(f"s{i}", at=float(i), run=20, need=demand((1, 1))) for i in range(200)]
    big = workload("big", at=10.5, run=10, need=demand((2, 8)))  # both members part-used
    gated = run(spec, [*smalls, big], duration=250,
                queue=QueueSpec(backfill_limit=5, claim_after_s=0))
    claimed = run(spec, [*smalls, big], duration=250,
                  queue=QueueSpec(backfill_limit=5, claim_after_s=300))
    start = {d.uid: d.start for d in claimed.decisions}["big"]
    bound = 10.5 + 5 + 20 + 1  # five bypasses, then the longest run there
    assert {d.uid: d.start for d in gated.decisions}["big"] <= start <= bound
    during = [d for d in claimed.decisions if d.uid != "big" and 16 < d.start < start]
    held_off = [d for d in gated.decisions if d.uid != "big" and 16 < d.start < start]
    assert held_off == [] and len(during) >= 10  # the other member kept taking the stream
    assert {d.member for d in during} == {"b"}  # and the claimed one drained for the gang
    assert claimed.gated == gated.gated == 1


def test_a_claim_rescues_a_gang_starved_by_another_namespaces_stream() -> None:
    """As above, but the small jobs are another namespace's: no gate holds them back, and
    without claims the gang waits for the stream to end. With ``claimAfter`` 20 s it claims
    the member once it waited that long: nothing behind it is placed there and it starts
    once the small jobs running there finish (3.5 s at most)."""
    spec = fleet({"a": [(2, 8)], "b": [(2, 8)]})
    smalls = [workload(f"s{i}", at=i / 4, run=7.5, need=demand((1, 1))) for i in range(800)]
    big = replace(workload("big", at=0.5, run=10, need=demand((2, 8))), namespace="team-b")
    starved = run(spec, [*smalls, big], duration=250,
                  queue=QueueSpec(backfill_limit=5, claim_after_s=0))
    assert {d.uid: d.start for d in starved.decisions}["big"] > 200
    rescued = run(spec, [*smalls, big], duration=250,
                  queue=QueueSpec(backfill_limit=5, claim_after_s=20))
    starts = {d.uid: d.start for d in rescued.decisions}
    assert 0.5 + 20 <= starts["big"] <= 0.5 + 20 + 7.5 + 1
    assert len(rescued.decisions) >= len(starved.decisions) - 2  # the others still run


def test_one_tenants_burst_and_impossible_workload_do_not_starve_another() -> None:
    # 4 x 8 GPUs. Tenant a: a gang that never fits (64 GPUs on one node), a gang that
    # needs the whole fleet, then 2,000 8-GPU jobs at once; tenant b: 60 1-GPU jobs, one a
    # second from t=5. b's jobs wait only for a GPU to free up (a's jobs run 20 s), never
    # behind a's queue.
    spec = fleet({"m": [(4, 8)]})
    tenant_a = [workload("impossible", at=0, run=10, need=demand((1, 64)), priority=10**9),
                workload("whole", at=0, run=10, need=demand((4, 8))),
                *[workload(f"a{i}", at=1, run=20, need=demand((1, 8))) for i in range(2000)]]
    tenant_b = [replace(workload(f"b{i}", at=5.0 + i, run=10, need=demand((1, 1))),
                        namespace="team-b") for i in range(60)]
    result = simulate(fleet=spec, workloads=[*tenant_a, *tenant_b], backend=CoreBackend(spec),
                      policy="most-free", duration=20_000, sample_interval=500.0)
    waits = {d.uid: d.wait for d in result.decisions}
    assert [u.uid for u in result.unplaceable] == ["impossible"]
    b_waits = sorted(waits[f"b{i}"] for i in range(60))
    assert len(b_waits) == 60
    assert b_waits[-1] <= 20  # at most one run of an a-job
    assert "whole" in waits  # a's own gate protected its gang from its burst


def test_never_placeable_is_reported_not_queued() -> None:
    spec = fleet({"a": [(2, 8)], "b": [(1, 4)]})
    result = run(spec, [workload("huge", at=0, run=10, need=demand((1, 16))),
                        workload("ok", at=1, run=10, need=demand((1, 8)))])
    assert [d.uid for d in result.decisions] == ["ok"]
    [item] = result.unplaceable
    assert item.uid == "huge"
    assert item.gpus == 16
    assert "a:" in item.reason and "b:" in item.reason
    assert result.pending_at_end == 0


def test_services_hold_their_gpus_until_the_end() -> None:
    spec = fleet({"a": [(2, 8)]})
    result = run(spec, [workload("svc", at=0, run=None, need=demand((1, 8))),
                        workload("job", at=0, run=50, need=demand((1, 4)))], duration=100)
    assert result.completed == 1
    assert result.gpu_seconds["a"] == 8 * 100 + 4 * 50
    assert result.utilization == pytest.approx((800 + 200) / 1600)


def fragmentation_stream() -> list[SimWorkload]:
    services = [workload(f"svc{i}", at=float(i), run=None, need=demand((1, 4)))
                for i in range(8)]
    bigs = [workload(f"big{i}", at=10.0 + i, run=20, need=demand((2, 8))) for i in range(2)]
    return services + bigs


def test_best_fit_beats_most_free_on_fragmentation() -> None:
    # Four members of 2 x 8 GPUs; eight 4-GPU services, then two gangs of 2 x 8 GPUs.
    # most-free spreads the services so every member keeps one busy node: the gangs never
    # fit and 32 free GPUs sit stranded. best-fit packs them into two members.
    spec = fleet({f"m{i}": [(2, 8)] for i in range(4)})
    spread = run(spec, fragmentation_stream(), policy="most-free")
    packed = run(spec, fragmentation_stream(), policy="best-fit")
    spread_stranded, _ = spread.fragmentation()
    packed_stranded, _ = packed.fragmentation()
    assert spread_stranded is not None and spread_stranded > 0
    assert (packed_stranded or 0) < spread_stranded
    bigs = {"big0", "big1"}
    assert not bigs & {d.uid for d in spread.decisions}
    assert bigs <= {d.uid for d in packed.decisions}
    assert len({d.member for d in packed.decisions if d.uid.startswith("svc")}) == 2


def test_capacity_model_and_ledger_agree_at_the_end() -> None:
    spec = fleet({"a": [(2, 8)], "b": [(3, 4)]})
    backend = CoreBackend(spec)
    run(spec, [workload("svc", at=0, run=None, need=demand((2, 3))),
               workload("job", at=0, run=500, need=demand((1, 4), (1, 2)))],
        backend=backend)
    used = {name: state.used for m in spec.members
            for name in [n["metadata"]["name"] for n in node_manifests(m)]
            if (state := backend.capacity(m.name).node(name)) is not None}
    assert sum(used.values()) == 6 + 6


# -- properties ---------------------------------------------------------------------------

pools = st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8])),
                 min_size=1, max_size=2)
fleets = st.dictionaries(st.sampled_from(["a", "b", "c"]), pools, min_size=1)
gangs = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 8)), min_size=1, max_size=2)
streams = st.lists(st.tuples(st.floats(0, 50, allow_nan=False), st.one_of(
    st.none(), st.floats(1, 40, allow_nan=False)), gangs, st.integers(0, 2)), max_size=25)


def max_concurrent(result: RunResult, stream: list[SimWorkload]) -> dict[str, int]:
    """Peak GPUs per node, recomputed from the decisions alone (start, end, nodes)."""
    runs = {w.uid: w.run_time for w in stream}
    deltas: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for d in result.decisions:
        run_time = runs[d.uid]
        end = result.duration if run_time is None else min(d.start + run_time,
                                                           result.duration + 1)
        for node, gpus in d.nodes:
            deltas[node] += [(d.start, gpus), (end, -gpus)]
    peaks = {}
    for node, items in deltas.items():
        level = peak = 0
        for _, delta in sorted(items, key=lambda item: (item[0], item[1])):
            level += delta
            peak = max(peak, level)
        peaks[node] = peak
    return peaks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets, streams, st.sampled_from(["most-free", "best-fit"]), st.integers(0, 4))
def test_no_node_is_ever_over_allocated(members: dict[str, list[tuple[int, int]]],
                                        raw: list[tuple[float, float | None,
                                                        list[tuple[int, int]], int]],
                                        policy: str, limit: int) -> None:
    spec = fleet(members)
    stream = [workload(f"w{i}", at=at, run=run_time, need=demand(*need), priority=prio)
              for i, (at, run_time, need, prio) in enumerate(raw)]
    result = run(spec, stream, policy=policy,
                 queue=QueueSpec(backfill_limit=limit))
    capacity = {n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"])
                for m in spec.members for n in node_manifests(m)}
    for node, peak in max_concurrent(result, stream).items():
        assert peak <= capacity[node], (node, peak)
    for d in result.decisions:
        by_uid = {w.uid: w for w in stream}[d.uid]
        assert sum(g for _, g in d.nodes) == by_uid.demand.gpus
        assert d.wait >= 0
        assert all(node.startswith(f"{d.member}-") for node, _ in d.nodes)
    # Every workload is accounted for exactly once.
    assert (len(result.decisions) + result.pending_at_end + len(result.unplaceable)
            == len(stream))



def test_annotations_pin_select_and_override_the_policy() -> None:
    spec = parse_fleet({"members": [
        {"name": "a", "labels": {"region": "us"}, "nodePools": [{"name": "p", "count": 2,
                                                                  "gpus": 8}]},
        {"name": "b", "labels": {"region": "eu"}, "nodePools": [{"name": "p", "count": 1,
                                                                  "gpus": 8}]}]})
    manifest = {"metadata": {"annotations": {"dispatcher.io/cluster-selector": "region=eu"}}}
    pin = "dispatcher.io/cluster"
    result = run(spec, [
        workload("pinned", at=0, run=10, need=demand((1, 2)), annotations={pin: "b"}),
        workload("selected", at=1, run=10, need=demand((1, 2)),
                 annotations=dict(annotations_of(manifest))),
        workload("free", at=2, run=10, need=demand((1, 2))),          # most-free: a
        workload("packed", at=3, run=10, need=demand((1, 2)),         # best-fit: fuller b
                 annotations={"dispatcher.io/policy": "best-fit"}),
        workload("waits", at=4, run=10, need=demand((1, 4)), annotations={pin: "b"}),
        workload("ghost", at=5, run=10, need=demand((1, 1)), annotations={pin: "zz"}),
    ])
    placed = {d.uid: (d.member, d.start) for d in result.decisions}
    assert placed["pinned"][0] == "b"
    assert placed["selected"][0] == "b"
    assert placed["free"][0] == "a"
    assert placed["packed"][0] == "b"
    assert placed["waits"] == ("b", 10)  # b has 2 free until "pinned" ends at 10
    [ghost] = result.unplaceable
    assert ghost.uid == "ghost"
    assert "pinned member 'zz'" in ghost.reason
