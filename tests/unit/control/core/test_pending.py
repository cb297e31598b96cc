"""control.core.pending: a waiting workload's record is written when what its reason means
changes, its numbers at most every refresh interval; on plain data (real placements over
capacity models, no cluster).

Covered: the why-class of a misfit reason, the meaning key (numbers, reserved GPUs in
flight, member set, why-class, reason kind, queue blocker, parked messages, generation) and
every outcome of ``judge`` (first write, other phase or reason, same message, meaning
changed, refresh not due / due / disabled, a write stamped ahead of the clock, a record of
an older controller without a key).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.control.core.names import PendingReason, Phase
from dispatcher.control.core.pending import (
    PendingWrite,
    generation_of,
    judge,
    meaning_key,
    why_class,
)
from dispatcher.control.core.placing import Placement, QueueStep, place
from dispatcher.control.core.queue import Entry
from dispatcher.control.core.record import DispatchRecord
from dispatcher.placement.model import Decision, MemberSnapshot
from tests.unit.control import placing_builders as pb
from tests.unit.placement.builders import cluster

NOW = 1_000_000.0


def fleet(*, used_a0: int = 4, used_a1: int = 0, reserved: int = 0) -> list[MemberSnapshot]:
    """a: 2 x 8 GPUs with ``used_*`` taken (``reserved`` of a0 held for a dispatch in
    flight); b: 1 x 4 GPUs for team-b only."""
    capacity = cluster({"name": "a0", "gpus": 8, "used": used_a0},
                       {"name": "a1", "gpus": 8, "used": used_a1})
    if reserved:
        capacity.reserve("a0", reserved)
    return [MemberSnapshot(name="a", capacity=capacity),
            MemberSnapshot(name="b", capacity=cluster({"name": "b0", "gpus": 4}),
                           allowed_namespaces=("team-b",))]


def waiting(**kw: int) -> Placement:
    """A 2 x 8-GPU Job that fits nowhere over ``fleet(**kw)``."""
    placement = place(pb.given(pb.job(gpus=8, parallelism=2), fleet=fleet(**kw)))
    assert placement.decision.chosen is None
    assert placement.reason is PendingReason.NO_FEASIBLE_MEMBER
    return placement


def written(placement: Placement, *, at: float, generation: int = 0) -> DispatchRecord:
    """The record as ``_record_pending`` left it after writing ``placement`` at ``at``."""
    assert placement.reason is not None
    return DispatchRecord(name="job-train", namespace="team-a", workload_uid="uid-train",
                          phase=Phase.PENDING, pending_reason=placement.reason,
                          pending_message=placement.decision.summary[:1000],
                          pending_key=meaning_key(placement, generation=generation),
                          pending_written_at=at)


def parked(reason: PendingReason, message: str) -> Placement:
    entry = Entry(uid="u", priority=0, namespace="team-a", created=NOW, name="team-a/x")
    return Placement(entry=entry, queue=QueueStep.PARK, reason=reason, decision=Decision(
        policy="most-free", pods=0, gpus=0, gangs=0, verdicts=(), chosen=None,
        assignment=(), summary=message))


# -- why_class and meaning_key --------------------------------------------------------------

def test_the_why_class_drops_numbers_and_gpus_in_flight_but_keeps_names() -> None:
    assert why_class("12 GPUs free, room for 1 of 2 pods of 8 GPUs (pods job): fits 0 times"
                     " (3 GPUs reserved for dispatches in flight)") == "no room now"
    assert why_class("no nodes with product NVIDIA-H100-80GB-HBM3") \
        == "no nodes with product NVIDIA-H100-80GB-HBM3"
    assert why_class("held for team-b/gang, waiting 312s: nothing behind it is placed here "
                     "until it fits") == ("held for team-b/gang, waiting #s: nothing behind "
                                          "it is placed here until it fits")
    assert why_class("2 nodes are all NotReady or cordoned") == \
        "# nodes are all NotReady or cordoned"


def test_free_gpus_changing_is_not_a_new_meaning() -> None:
    first, later = waiting(used_a0=4), waiting(used_a0=2)
    assert first.decision.summary != later.decision.summary
    assert meaning_key(first) == meaning_key(later)


def test_gpus_reserved_in_flight_are_numbers_too() -> None:
    first, later = waiting(used_a0=4), waiting(used_a0=4, reserved=2)
    assert "reserved for dispatches in flight" in later.decision.summary
    assert "reserved for dispatches in flight" not in first.decision.summary
    assert meaning_key(first) == meaning_key(later)


def test_another_way_of_having_too_few_free_gpus_is_not_a_new_meaning() -> None:
    """Room for too few pods, then no block large enough: both "no room now" (the reason
    flips with every pod that starts or ends on a saturated fleet)."""
    room, block = waiting(used_a0=4), waiting(used_a0=4, used_a1=4)
    assert "room for" in room.decision.summary and "largest free block" in block.decision.summary
    assert meaning_key(room) == meaning_key(block)


def cordoned(placement: Placement) -> Placement:
    """``placement`` with its first member's nodes cordoned."""
    first, *rest = placement.decision.verdicts
    reason = "2 nodes are all NotReady or cordoned"
    return replace(placement, decision=replace(
        placement.decision, verdicts=(replace(first, reason=reason), *rest),
        summary=placement.decision.summary.replace(first.reason, reason)))


def test_another_kind_of_reason_on_a_member_is_a_new_meaning() -> None:
    room = waiting(used_a0=4)
    assert meaning_key(room) != meaning_key(cordoned(room))


def test_a_member_held_for_it_is_a_new_meaning() -> None:
    placement = waiting(used_a0=4)
    narrow = replace(placement, claim="a")
    assert meaning_key(placement) != meaning_key(narrow) != meaning_key(
        replace(narrow, claim_wide=True))
    assert meaning_key(narrow) == meaning_key(replace(waiting(used_a0=2), claim="a"))


def test_another_member_set_is_a_new_meaning() -> None:
    both = waiting(used_a0=4)
    only_a = replace(both, decision=replace(both.decision,
                                            verdicts=both.decision.verdicts[:1]))
    assert meaning_key(both) != meaning_key(only_a)


def test_the_reason_kind_and_the_generation_are_part_of_the_meaning() -> None:
    placement = waiting()
    assert meaning_key(placement) != meaning_key(
        replace(placement, reason=PendingReason.UNPLACEABLE))
    assert meaning_key(placement, generation=1) != meaning_key(placement, generation=2)


def test_queued_waits_behind_its_gate_whoever_is_ahead() -> None:
    ahead_x = parked(PendingReason.QUEUED, "waiting behind team-a/x (bypassed 2 times; "
                                           "backfill limit 2 in namespace team-a)")
    ahead_y = parked(PendingReason.QUEUED, "waiting behind team-a/y (bypassed 3 times; "
                                           "backfill limit 2 in namespace team-a)")
    assert meaning_key(ahead_x) == meaning_key(ahead_y)


def test_a_parked_reason_means_its_whole_message() -> None:
    low = parked(PendingReason.INVALID_ANNOTATION, "invalid annotation dispatcher.io/priority"
                                                   "=5000: above the cap 100")
    high = parked(PendingReason.INVALID_ANNOTATION, "invalid annotation dispatcher.io/priority"
                                                    "=6000: above the cap 100")
    assert meaning_key(low) != meaning_key(high)


def test_the_generation_of_a_workload() -> None:
    assert generation_of({"metadata": {"generation": 3}}) == 3
    assert generation_of({"metadata": {"generation": "junk"}}) == 0
    assert generation_of(None) == 0


# -- judge ------------------------------------------------------------------------------

JUDGED: list[tuple[str, DispatchRecord | None, Placement, float, PendingWrite]] = [
    ("first write (no record yet)", None, waiting(), 30.0, PendingWrite.CHANGED),
    ("record not pending (requeued, placed)",
     replace(written(waiting(), at=NOW - 1), phase=Phase.PLACED), waiting(), 30.0,
     PendingWrite.CHANGED),
    ("another reason kind", replace(written(waiting(), at=NOW - 1),
                                    pending_reason=PendingReason.QUEUED),
     waiting(), 30.0, PendingWrite.CHANGED),
    ("the message written", written(waiting(), at=NOW - 1000), waiting(), 30.0,
     PendingWrite.NONE),
    ("another why-class", written(waiting(), at=NOW - 1), cordoned(waiting()), 30.0,
     PendingWrite.CHANGED),
    ("another way of no room, written 1 s ago", written(waiting(), at=NOW - 1),
     waiting(used_a1=4), 30.0, PendingWrite.WAIT),
    ("numbers only, written 10 s ago", written(waiting(), at=NOW - 10), waiting(used_a0=2),
     30.0, PendingWrite.WAIT),
    ("numbers only, written 30 s ago", written(waiting(), at=NOW - 30), waiting(used_a0=2),
     30.0, PendingWrite.REFRESH),
    ("numbers only, refresh 0: at every change", written(waiting(), at=NOW),
     waiting(used_a0=2), 0.0, PendingWrite.REFRESH),
    ("numbers only, no write time", replace(written(waiting(), at=NOW),
                                            pending_written_at=None),
     waiting(used_a0=2), 30.0, PendingWrite.REFRESH),
    ("an older controller's record (no key)", replace(written(waiting(), at=NOW - 1),
                                                      pending_key=""),
     waiting(used_a0=2), 30.0, PendingWrite.CHANGED),
]


@pytest.mark.parametrize(("name", "record", "placement", "refresh", "expected"), JUDGED,
                         ids=[row[0] for row in JUDGED])
def test_judge(name: str, record: DispatchRecord | None, placement: Placement,
               refresh: float, expected: PendingWrite) -> None:
    judged = judge(record, placement, now=NOW, refresh_s=refresh)
    assert judged.write is expected, name
    assert judged.key == meaning_key(placement)
    assert (judged.recheck_after is not None) == (expected is PendingWrite.WAIT)


def test_numbers_only_are_looked_at_again_when_the_refresh_is_due() -> None:
    judged = judge(written(waiting(), at=NOW - 10), waiting(used_a0=2), now=NOW,
                   refresh_s=30.0)
    assert judged.write is PendingWrite.WAIT and judged.recheck_after == pytest.approx(20.0)


def test_a_write_stamped_ahead_of_this_clock_waits_one_interval_at_most() -> None:
    judged = judge(written(waiting(), at=NOW + 3600), waiting(used_a0=2), now=NOW,
                   refresh_s=30.0)
    assert judged.write is PendingWrite.WAIT and judged.recheck_after == pytest.approx(30.0)


def test_an_edited_spec_is_a_new_meaning() -> None:
    record = written(waiting(), at=NOW - 1, generation=1)
    assert judge(record, waiting(used_a0=2), now=NOW, generation=1).write is PendingWrite.WAIT
    assert judge(record, waiting(used_a0=2), now=NOW,
                 generation=2).write is PendingWrite.CHANGED


def test_n_number_changes_cost_one_write_plus_one_refresh_per_interval() -> None:
    """60 changes of free GPUs, one a second, with a 30 s refresh: the first write, then a
    refresh at 30 s and at 60 s; every other step writes nothing."""
    record = None
    writes = []
    for second in range(61):
        placement = waiting(used_a0=1 + second % 4)
        judged = judge(record, placement, now=NOW + second, refresh_s=30.0)
        if judged.write in (PendingWrite.CHANGED, PendingWrite.REFRESH):
            writes.append((second, judged.write))
            record = written(placement, at=NOW + second)
    assert writes == [(0, PendingWrite.CHANGED), (30, PendingWrite.REFRESH),
                      (60, PendingWrite.REFRESH)]
