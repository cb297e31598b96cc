"""The external MultiKueue dispatcher's decision (``control.core.nomination``), on plain
data: hub Workloads as Kueue v0.17.0 writes them, placed over real capacity models."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dispatcher.control.core.nomination import (
    Candidates,
    NominationKind,
    decide,
    needs_placement,
    place,
)
from dispatcher.control.core.record import parse_time
from dispatcher.placement.model import MemberSnapshot
from dispatcher.workloads.kueueworkload import KueueWorkload, pod_sets_demand
from tests.unit.control import placing_builders as pb
from tests.unit.placement.builders import cluster
from tests.unit.workloads.test_kueueworkload import workload

NOW = parse_time("2026-12-01T10:10:00Z") or 0.0
WITHIN = 300.0


def read(obj: dict[str, Any]) -> KueueWorkload:
    return KueueWorkload.of(obj, frozenset({"multikueue"}), parse_time)


def placed(wl: KueueWorkload, obj: dict[str, Any], fleet: list[MemberSnapshot]) -> Any:
    return place(wl, pod_sets_demand(obj), api_version="batch/v1", kind="Job",
                 annotations={}, members=lambda: fleet, now=NOW, reservation_ttl_s=60.0,
                 default_policy="most-free")


def test_a_waiting_workload_is_nominated_where_every_pod_fits_with_its_gpus_reserved() -> None:
    obj = workload()
    obj["metadata"]["namespace"] = "team-b"  # b takes team-b only: both are candidates
    wl = read(obj)
    assert needs_placement(wl, held=None, since=None, now=NOW,
                           admit_within=WITHIN) is Candidates.OTHERS
    answer = decide(wl, held=None, since=None, now=NOW, admit_within=WITHIN,
                    fit=placed(wl, obj, pb.members()))
    assert answer.kind is NominationKind.NOMINATE and answer.members == ("a",)
    assert answer.placement is not None and answer.placement.reservation is not None
    assert answer.placement.reservation.gpus == 8


def test_nothing_fits_now_nominates_nobody_and_says_why() -> None:
    obj = workload()
    obj["spec"]["podSets"][0]["count"] = 5  # 20 GPUs: more than any member
    wl = read(obj)
    answer = decide(wl, held=None, since=None, now=NOW, admit_within=WITHIN,
                    fit=placed(wl, obj, pb.members()))
    assert answer.kind is NominationKind.NOTHING and answer.members == ()
    assert answer.reason.startswith("no worker fits now")


def busy(name: str, *nodes: tuple[int, int]) -> MemberSnapshot:
    """A worker whose nodes have (GPUs, used) each."""
    return MemberSnapshot(name=name, capacity=cluster(
        *({"name": f"{name}{i}", "gpus": gpus, "used": used}
          for i, (gpus, used) in enumerate(nodes))))


def test_nothing_fits_now_stands_by_on_every_worker_whose_nodes_could_hold_it() -> None:
    """Saturated: no worker has 2 x 4 GPUs free now. The Workload waits in the queue of
    each worker whose nodes could hold it once free (best first), so the first whose GPUs
    free admits it without a round trip through us; the worker whose nodes never could
    (one 4-GPU node), nor a worker cordoned now, gets no copy, and no GPUs are
    reserved (none is free)."""
    wl = read(obj := workload())
    fleet = [busy("small", (4, 0)),  # free now, but 4 GPUs on one node: never 2 x 4
             busy("x", (8, 6), (8, 8)), busy("y", (8, 8)), busy("z", (8, 2), (4, 4))]
    fit = placed(wl, obj, fleet)
    assert fit.now.decision.chosen is None
    answer = decide(wl, held=None, since=None, now=NOW, admit_within=WITHIN, fit=fit)
    assert answer.kind is NominationKind.NOMINATE
    assert set(answer.members) == {"x", "y", "z"} and answer.placement is None
    assert "standing by on" in answer.reason and "no worker fits now" in answer.reason
    cordoned = [replace(m, cordoned=True) if m.name == "y" else m for m in fleet]
    fit = placed(wl, obj, cordoned)
    assert set(fit.standby) == {"x", "z"}


def test_a_worker_that_fits_now_is_nominated_alone_not_the_standby_list() -> None:
    wl = read(obj := workload())
    fit = placed(wl, obj, [busy("x", (8, 8), (8, 8)), busy("y", (8, 0))])
    assert fit.standby == ()
    answer = decide(wl, held=None, since=None, now=NOW, admit_within=WITHIN, fit=fit)
    assert answer.kind is NominationKind.NOMINATE and answer.members == ("y",)


def test_a_nominee_is_given_time_to_admit_then_another_is_added_never_removed() -> None:
    obj = workload(nominatedClusterNames=["b"])
    obj["metadata"]["namespace"] = "team-b"
    wl = read(obj)
    early = NOW - 100
    assert needs_placement(wl, held="b", since=early, now=NOW, admit_within=WITHIN) is None
    waiting = decide(wl, held="b", since=early, now=NOW, admit_within=WITHIN, fit=None)
    assert waiting.kind is NominationKind.NOTHING and waiting.recheck_after == 200
    late = NOW - 400
    assert needs_placement(wl, held="b", since=late, now=NOW,
                           admit_within=WITHIN) is Candidates.OTHERS
    fleet = [m for m in pb.members() if m.name == "a"]  # the shell offers those not listed
    widened = decide(wl, held="b", since=late, now=NOW, admit_within=WITHIN,
                     fit=placed(wl, obj, fleet))
    assert widened.kind is NominationKind.NOMINATE and widened.members == ("b", "a")


@pytest.mark.parametrize(("obj", "held", "kind"), [
    (workload(state="Ready", clusterName="a"), "a", NominationKind.NOTHING),  # pods binding
    # a standby list: another nominee than the one we held GPUs on admitted it
    (workload(state="Ready", clusterName="b"), "a", NominationKind.RELEASE),
    (workload(conditions={"QuotaReserved": "True", "Finished": "True"}), "a",
     NominationKind.RELEASE),
    (workload(conditions={"QuotaReserved": "False"}), "a", NominationKind.RELEASE),  # evicted
    (workload(conditions={"QuotaReserved": "False"}), None, NominationKind.NOTHING),
])
def test_what_is_not_waiting_is_left_to_kueue(obj: dict[str, Any], held: str | None,
                                              kind: NominationKind) -> None:
    wl = read(obj)
    assert needs_placement(wl, held=held, since=None, now=NOW, admit_within=WITHIN) is None
    assert decide(wl, held=held, since=None, now=NOW, admit_within=WITHIN,
                  fit=None).kind is kind


def test_a_nominee_of_before_a_restart_has_its_gpus_held_again() -> None:
    """Nominated by the process before this one: its nominee's GPUs are reserved again
    (nothing written), so a burst after a restart does not nominate them twice."""
    obj = workload(nominatedClusterNames=["a"])
    wl = read(obj)
    assert needs_placement(wl, held=None, since=NOW, now=NOW,
                           admit_within=WITHIN) is Candidates.NOMINEES
    fleet = [m for m in pb.members() if m.name == "a"]
    answer = decide(wl, held=None, since=NOW, now=NOW, admit_within=WITHIN,
                    fit=placed(wl, obj, fleet))
    assert answer.kind is NominationKind.HOLD and answer.members == ()
    assert answer.placement is not None and answer.placement.reservation is not None
    assert answer.placement.reservation.member == "a"
