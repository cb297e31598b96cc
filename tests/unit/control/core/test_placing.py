"""place(): the placement decision over plain data — every reason, the queue step, the
reservation. Real Job objects resolved through the built-in catalog, real capacity models
and the controller's own PendingQueue; no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import (
    Placement,
    QueueStep,
    alternatives,
    place,
    request_for,
    restrict,
)
from dispatcher.control.core.queue import Entry, PendingQueue
from dispatcher.control.core.record import format_time
from dispatcher.placement.model import MemberSnapshot
from dispatcher.workloads.bounded import DefinitionQuarantined, ObjectQuarantined
from dispatcher.workloads.errors import TemplateError, WorkloadError
from tests.unit.control.placing_builders import CATALOG, NOW, given, job, members
from tests.unit.placement.builders import cluster


def test_a_fitting_job_is_placed_with_its_reservation() -> None:
    placement = place(given(job()))
    assert placement.decision.chosen == "a" and placement.reason is None
    assert placement.queue is QueueStep.PLACED and placement.decided
    assert placement.reservation is not None
    assert placement.reservation.gpus == 8 and placement.reservation.expires_at == NOW + 60
    assert {node for node, _ in placement.reservation.nodes} <= {"a0", "a1"}


def test_a_full_fleet_waits_for_capacity() -> None:
    placement = place(given(job(gpus=8, parallelism=2), fleet=members(used_a=4)))
    assert placement.decision.chosen is None
    assert placement.reason is PendingReason.NO_FEASIBLE_MEMBER
    assert placement.queue is QueueStep.WAIT and placement.reservation is None


def test_bigger_than_the_fleet_is_parked_unplaceable() -> None:
    placement = place(given(job(gpus=8, parallelism=3)))
    assert placement.reason is PendingReason.UNPLACEABLE and placement.reason.parked
    assert placement.queue is QueueStep.PARK
    assert "even with every GPU free" in placement.decision.summary


def test_a_namespace_refused_everywhere_is_unplaceable() -> None:
    pinned = job(annotations={"dispatcher.io/cluster": "b"})
    placement = place(given(pinned))
    assert placement.reason is PendingReason.UNPLACEABLE
    assert "namespace team-a not allowed" in placement.decision.summary


@pytest.mark.parametrize(("annotations", "words"), [
    ({"dispatcher.io/priority": "ten"}, "dispatcher.io/priority"),
    ({"dispatcher.io/policy": "fastest"}, "dispatcher.io/policy='fastest'"),
    ({"dispatcher.io/cluster-selector": "region in (us"}, "dispatcher.io/cluster-selector"),
])
def test_invalid_annotations_are_parked(annotations: dict[str, str], words: str) -> None:
    placement = place(given(job(annotations=annotations)))
    assert placement.reason is PendingReason.INVALID_ANNOTATION
    assert placement.queue is QueueStep.PARK and words in placement.decision.summary
    assert not placement.reason.unresolved


def test_unresolvable_and_invalid_templates_are_parked_unresolved() -> None:
    error = TemplateError("must be a string", path="spec.template.spec.containers[0].command[0]",
                          field="podTemplates", name="train", definition="batch-job")
    bad = place(given(job(), resolution=error))
    assert bad.reason is PendingReason.INVALID_TEMPLATE and bad.reason.unresolved
    assert bad.decision.summary.startswith("invalid pod template: spec.template")
    failed = place(given(job(), resolution=WorkloadError("no definition serves Job\nmore")))
    assert failed.reason is PendingReason.RESOLVE_FAILED
    assert failed.decision.summary == "cannot resolve: no definition serves Job"


def test_an_object_over_a_bound_is_parked_quarantined_and_says_so() -> None:
    error = ObjectQuarantined(definition="karta/slow", bound="cpu",
                              detail="more than 2 s of CPU", name="train")
    parked = place(given(job(), resolution=error))
    assert parked.reason is PendingReason.QUARANTINED
    assert parked.reason.unresolved and parked.reason.parked
    assert parked.queue is QueueStep.PARK
    summary = parked.decision.summary
    assert summary.startswith("quarantined: definition karta/slow exceeded its cpu bound "
                              "(more than 2 s of CPU) on this object"), summary
    assert "until the object changes" in summary
    whole = DefinitionQuarantined(definition="karta/slow", bound="cpu", detail="x")
    assert place(given(job(), resolution=whole)).reason is PendingReason.RESOLVE_FAILED


def test_a_copy_already_on_a_member_is_adopted_not_duplicated() -> None:
    placement = place(given(job(), held=("b",)))
    assert placement.decision.chosen == "b" and placement.queue is QueueStep.LEAVE
    assert placement.reservation is None and not placement.decided


def test_the_namespace_gate_holds_after_the_backfill_limit() -> None:
    queue = PendingQueue(backfill_limit=1)
    big = Entry(uid="uid-big", priority=0, created=NOW - 3600, name="team-a/big",
                namespace="team-a")
    queue.add(big)
    queue.placed(Entry(uid="uid-x", priority=0, created=NOW, namespace="team-a"))  # 1 bypass
    placement = place(given(job(), queue=queue))
    assert placement.reason is PendingReason.QUEUED and placement.queue is QueueStep.WAIT
    assert placement.decision.summary.startswith("waiting behind team-a/big")
    other = place(given(job(namespace="team-b"), queue=queue))  # another tenant: not held
    assert other.decision.chosen is not None


def test_an_excluded_member_is_not_chosen_and_says_why() -> None:
    placement = place(given(job(), excluded=("a",)))
    assert placement.decision.chosen is None
    assert placement.reason is PendingReason.UNPLACEABLE  # b refuses team-a anyway
    assert "a: not ready: excluded: an earlier attempt there failed" in \
        placement.decision.summary


def test_restrict_and_alternatives() -> None:
    fleet = members()
    out = {m.name: m for m in restrict(fleet, excluded=("a",))}
    assert not out["a"].ready and "earlier attempt" in out["a"].not_ready_reason
    assert out["b"].ready
    request = request_for(job(namespace="team-b", gpus=1, parallelism=1),
                          CATALOG.resolve(job(namespace="team-b", gpus=1, parallelism=1)),
                          default_policy="most-free")
    assert alternatives(fleet, request, excluded=()) == ("a", "b")
    assert alternatives(fleet, request, excluded=("a",)) == ("b",)
    assert request.exhaustive and request.namespace == "team-b"


def _claiming(workload: dict[str, Any], *, fleet: list[MemberSnapshot], queue: PendingQueue,
              waited: float, claim_after: float = 300.0) -> Placement:
    """``place`` at NOW for ``workload`` created ``waited`` seconds before."""
    meta = {**workload["metadata"], "creationTimestamp": format_time(NOW - waited)}
    return place(replace(given(workload, fleet=fleet, queue=queue), claim_after_s=claim_after,
                         workload={**workload, "metadata": meta}))


def _member(name: str, *used: int) -> MemberSnapshot:
    """A member of 8-GPU nodes, ``used`` GPUs taken on each."""
    return MemberSnapshot(name=name, capacity=cluster(
        *({"name": f"{name}{i}", "gpus": 8, "used": u} for i, u in enumerate(used))))


def test_a_workload_that_waited_long_claims_the_member_nearest_to_fitting_it() -> None:
    """All busy: a 2 x 8-GPU gang that waited past claimAfter claims the member its nodes
    could hold it on with the most GPUs free now ("small" has one node: it never could);
    before that, or with claimAfter 0, it claims nothing."""
    fleet = [_member("x", 7, 8), _member("y", 2, 4), _member("small", 0)]
    gang = job("gang", gpus=8, parallelism=2)
    queue = PendingQueue(backfill_limit=50)
    early = _claiming(gang, fleet=fleet, queue=queue, waited=100)
    assert early.queue is QueueStep.WAIT and early.claim is None
    assert _claiming(gang, fleet=fleet, queue=queue, waited=400, claim_after=0).claim is None
    late = _claiming(gang, fleet=fleet, queue=queue, waited=400)
    assert late.queue is QueueStep.WAIT and late.claim == "y"
    assert "y is held for it" in late.decision.summary


def test_nothing_behind_a_claimant_is_placed_on_its_member_and_what_is_ahead_is() -> None:
    fleet = [_member("y", 4, 8)]
    queue = PendingQueue(backfill_limit=50)
    gang = Entry(uid="uid-gang", priority=0, created=NOW - 900, namespace="team-b",
                 name="team-b/gang")
    queue.add(gang)
    assert queue.claim(gang, "y")
    small = _claiming(job("small", gpus=1, parallelism=1), fleet=fleet, queue=queue,
                      waited=10)  # younger, another namespace
    assert small.queue is QueueStep.WAIT and small.decision.chosen is None
    assert "held for team-b/gang" in small.decision.verdict("y").reason
    older = _claiming(job("older", gpus=1, parallelism=1), fleet=fleet, queue=queue,
                      waited=1000)  # ahead of the claimant
    assert older.queue is QueueStep.PLACED and older.decision.chosen == "y"


def test_a_saturated_workload_claims_a_member_for_its_namespace_and_gates_nothing() -> None:
    """Bypassed backfillLimit times long before claimAfter, the gang claims the member
    nearest to fitting it against its own namespace: its namespace's small jobs go on on
    the other member, never on the claimed one; other namespaces use both."""
    fleet = [_member("x", 7, 8), _member("y", 2, 4)]
    queue = PendingQueue(backfill_limit=1)
    gang = job("gang", gpus=8, parallelism=2)
    first = _claiming(gang, fleet=fleet, queue=queue, waited=10)
    assert first.queue is QueueStep.WAIT and first.claim is None  # not bypassed yet
    queue.add(first.entry)
    queue.placed(Entry(uid="uid-s0", priority=0, created=NOW, namespace="team-a"))
    late = _claiming(gang, fleet=fleet, queue=queue, waited=10)
    assert late.claim == "y" and not late.claim_wide
    assert "nothing behind it in team-a is placed there" in late.decision.summary
    assert queue.claim(late.entry, "y", wide=False)
    small = _claiming(job("small", gpus=1, parallelism=1), fleet=fleet, queue=queue, waited=1)
    assert small.queue is QueueStep.PLACED and small.decision.chosen == "x"  # not gated
    assert "held for team-a/gang" in small.decision.verdict("y").reason
    theirs = _claiming(job("theirs", namespace="team-b", gpus=4, parallelism=1),
                       fleet=fleet, queue=queue, waited=1)
    assert theirs.decision.chosen == "y"  # another namespace: the claim is not theirs
    rival = _claiming(job("rival", namespace="team-b", gpus=8, parallelism=2), fleet=fleet,
                      queue=queue, waited=400)  # waited claimAfter: a member nobody claims
    assert rival.claim == "x" and rival.claim_wide
    queue.add(rival.entry)
    assert queue.claim(rival.entry, "x")
    late = _claiming(job("late", namespace="team-b", gpus=8, parallelism=2), fleet=fleet,
                     queue=queue, waited=390)  # none free of claims: the narrow one behind it
    assert late.claim == "y" and late.claim_wide
    wide = _claiming(gang, fleet=fleet, queue=queue, waited=400)
    assert wide.claim == "y" and wide.claim_wide
    assert _claiming(gang, fleet=fleet, queue=queue, waited=10,
                     claim_after=0).claim is None  # claims off: the gate, as before
