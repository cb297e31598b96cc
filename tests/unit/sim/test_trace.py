from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.workloads.demand import Demand, Gang, PodShape, Toleration
from dispatcher.workloads.trace import (
    TraceError,
    demand_from_gangs,
    gangs_json,
    read_trace,
    resolved_event,
)

DEMAND = Demand(gangs=(
    Gang(name="leader", pods=1, min_pods=1, pod_shapes=(
        PodShape(count=1, gpus=0, cpu="4", memory="16Gi"),)),
    Gang(name="workers", pods=3, min_pods=2, pod_shapes=(
        PodShape(count=3, gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", cpu="64",
                 memory="512Gi", node_selector={"pool": "a"},
                 tolerations=(Toleration(key="dedicated", operator="Equal", value="x",
                                         effect="NoSchedule"),)),)),
))


def line(**fields: object) -> str:
    return json.dumps(fields)


def test_event_has_the_inspect_shape_and_round_trips() -> None:
    event = resolved_event(ts="2026-11-29T20:00:00Z", uid="u1", namespace="team-a",
                           name="train", api_version="jobset.x-k8s.io/v1alpha2",
                           kind="JobSet", definition="jobset", demand=DEMAND, priority=5)
    assert event["event"] == "workload.resolved"
    assert (event["pods"], event["gpus"]) == (4, 24)
    assert event["gangs"][1] == {
        "name": "workers", "pods": 3, "minPods": 2, "gpus": 24, "independent": False,
        "podShapes": [{"count": 3, "gpus": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3",
                       "cpu": "64", "memory": "512Gi", "nodeSelector": {"pool": "a"},
                       "tolerations": [{"key": "dedicated", "operator": "Equal",
                                        "value": "x", "effect": "NoSchedule"}]}]}
    [workload] = read_trace([json.dumps(event)])
    assert workload.demand == DEMAND
    assert (workload.uid, workload.kind, workload.priority, workload.at) == (
        "u1", "JobSet", 5, 0.0)


def test_replay_times_ends_and_noise() -> None:
    gangs = gangs_json(DEMAND)
    lines = [
        "not json at all",
        line(event="workload.placed", ts=0, uid="x"),
        line(event="workload.resolved", ts="2026-11-29T20:00:10Z", uid="b", name="b",
             apiVersion="v1", kind="K", gangs=gangs),
        line(event="workload.resolved", ts="2026-11-29T20:00:00+00:00", uid="a", name="a",
             apiVersion="v1", kind="K", gangs=gangs),
        line(event="workload.resolved", ts="2026-11-29T20:05:00Z", uid="a", name="a",
             apiVersion="v1", kind="K", gangs=gangs),  # re-resolved: first arrival kept
        line(event="status.mirrored", ts="2026-11-29T20:30:00Z", uid="a", status="running"),
        line(event="status.mirrored", ts="2026-11-29T21:00:00.5Z", uid="a",
             status="completed"),
        line(event="workload.deleted", ts="2026-11-29T22:00:00Z", uid="a"),
        line(event="workload.resolved", ts="2026-11-29T20:00:20Z", uid="c", name="c",
             apiVersion="v1", kind="K", gangs=gangs),
        line(event="workload.deleted", ts="2026-11-29T20:10:20Z", uid="c"),
        "[1, 2]",
    ]
    first, second, third = read_trace(lines, source="hub.log")
    assert (first.uid, first.at, first.end) == ("a", 0.0, 3600.5)
    assert (second.uid, second.at, second.end) == ("b", 10.0, None)
    assert (third.uid, third.at, third.end) == ("c", 20.0, 620.0)


@pytest.mark.parametrize(("record", "key"), [
    ({"uid": "", "ts": 0}, "uid"),
    ({"uid": "u", "ts": "yesterday"}, "ts"),
    ({"uid": "u", "ts": 0, "kind": None}, "kind"),
    ({"uid": "u", "ts": 0, "gangs": []}, "gangs"),
    ({"uid": "u", "ts": 0, "gangs": [{"podShapes": [{"count": -1, "gpus": 1}]}]},
     "gangs[0].podShapes[0].count"),
    ({"uid": "u", "ts": 0, "gangs": [{"pods": 5, "podShapes": [{"count": 1, "gpus": 1}]}]},
     "gangs[0].pods"),
    ({"uid": "u", "ts": 0, "gangs": [{"podShapes": [
        {"count": 1, "gpus": 1, "tolerations": [{"operator": "Maybe"}]}]}]},
     "gangs[0].podShapes[0].tolerations[0]"),
    ({"uid": "u", "ts": 0, "priority": "high"}, "priority"),
])
def test_bad_lines_name_file_line_and_key(record: dict[str, object], key: str) -> None:
    full = {"event": "workload.resolved", "name": "n", "apiVersion": "v1", "kind": "K",
            "gangs": gangs_json(DEMAND), **record}
    with pytest.raises(TraceError) as info:
        read_trace(["", json.dumps(full)], source="hub.log")
    assert str(info.value).startswith(f"hub.log:2: {key}:"), str(info.value)


shapes = st.builds(PodShape, count=st.integers(1, 8), gpus=st.integers(0, 8),
                   gpu_product=st.sampled_from([None, "NVIDIA-L40S"]))


@settings(max_examples=100)
@given(st.lists(st.lists(shapes, min_size=1, max_size=3), min_size=1, max_size=3))
def test_gangs_round_trip(gang_shapes: list[list[PodShape]]) -> None:
    demand = Demand(gangs=tuple(
        Gang(name=f"g{i}", pods=sum(s.count for s in group), min_pods=1,
             pod_shapes=tuple(group)) for i, group in enumerate(gang_shapes)))
    assert demand_from_gangs(json.loads(json.dumps(gangs_json(demand)))) == demand


junk = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10)


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["uid", "ts", "name", "kind", "apiVersion", "gangs",
                                        "priority", "namespace"]), junk),
       st.sampled_from(["workload.resolved", "workload.finished"]))
def test_junk_lines_give_trace_errors_only(fields: dict[str, object], event: str) -> None:
    record = {"event": event, **fields}
    try:
        read_trace([json.dumps(record)], source="fuzz.log")
    except TraceError as exc:
        assert str(exc).startswith("fuzz.log:1: ")


def test_structlog_rendered_lines_replay() -> None:
    # The controller logs the event dict through structlog with an ISO UTC "ts" key and a
    # JSON renderer (control/observe.py); such lines must replay as they are.
    import io

    import structlog

    buffer = io.StringIO()
    log = structlog.wrap_logger(structlog.PrintLogger(buffer), processors=[
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.JSONRenderer()])
    event = resolved_event(ts="unused", uid="u1", namespace="ns", name="train",
                           api_version="batch/v1", kind="Job", definition="batch-job",
                           demand=DEMAND)
    event.pop("ts")
    log.info(event.pop("event"), **event)
    log.info("status.mirrored", uid="u1", member="m", status="completed", lag_ms=1.0)
    [workload] = read_trace(buffer.getvalue().splitlines(), source="controller.log")
    assert workload.demand == DEMAND
    assert workload.end is not None and workload.end >= 0
