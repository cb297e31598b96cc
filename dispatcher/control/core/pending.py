"""When a waiting workload's Dispatch is written again: when what its reason *means* changes.

A workload that fits nowhere waits with a ``Placed=False`` condition whose message is the
placement summary, numbers included ("member-1: 0 GPUs free, largest free block on one
node is 0, a pod needs 1: fits 0 times (3 GPUs reserved for dispatches in flight)"). Those
numbers move with every dispatch and every pod that ends anywhere in the fleet: written at
each change, a burst of 200 one-GPU Jobs on a 72-GPU fleet cost about 25 status patches and
24 Events per workload (``docs/comparison.md``). So the record keeps, next to the message,
a key of what the message means and when it was written (``status.pending``), and:

- the meaning changed (another reason kind, another member set or why-class, a spec edit,
  or the workload was not Pending): written now, with its Event (``CHANGED``);
- only numbers changed: written again at most every ``refresh_s`` seconds after the last
  write, without an Event (``REFRESH``); until then nothing is written, and the shell looks
  again when the refresh is due (``WAIT``), so no number is older than ``refresh_s`` while
  it is wrong;
- the message is the one written: nothing (``NONE``).

What a reason means (``meaning_key``):

- its kind (``PendingReason``) and the workload's generation (an edited spec is new input);
- ``NoFeasibleMember``: the demand (pods, GPUs, gangs) and, per member, whether it was
  feasible and its reason with every number taken out and the reserved-in-flight clause
  dropped: which members say what (too few free GPUs, no node with the product, taints,
  cordoned, ...), not how many GPUs they have free. Every way of having too few free GPUs
  (a block too small, room for too few pods: ``placement.misfit.NO_ROOM_NOW``) is one
  meaning, *no room now*: on a saturated fleet a waiting workload's reason flips between
  them with every pod that starts or ends (on the 80-workload ``benchmarks/peers.py
  --big`` stream, 640 meaning changes, an Event and a status patch each, against 151);
- ``NoFeasibleMember`` with a claim: the member held for it and against whom (narrow or
  wide), so the Dispatch says at once that a member is held for it;
- ``Queued``: that its namespace's gate holds it (which workload it waits behind and how
  often that one was bypassed are numbers of the moment too);
- every other reason (the parked ones: its template, its annotations, what the bare fleet
  could ever run): its whole message, as before; they do not move with the free GPUs.

Pure: times are passed in (``now``, the record's ``pending_written_at``), no clock is read.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dispatcher.control.core.names import PendingReason, Phase
from dispatcher.control.core.placing import Placement
from dispatcher.control.core.record import DispatchRecord
from dispatcher.placement.misfit import IN_FLIGHT, NO_ROOM_NOW

__all__ = ["DEFAULT_REFRESH_S", "Judgement", "PendingWrite", "generation_of", "judge",
           "meaning_key", "why_class"]

DEFAULT_REFRESH_S = 30.0
"""``queue.pendingRefresh``: numbers of an unchanged pending reason are rewritten at most
this often (seconds)."""

_NUMBER = re.compile(r"\b\d+(?:\.\d+)?(?=s?\b)")  # "312s" too: a claimant's wait
_before, _after = IN_FLIGHT.split("{}")
_IN_FLIGHT = re.compile(re.escape(_before) + r"\d+" + re.escape(_after))


class PendingWrite(StrEnum):
    """What to do with a pending workload's record (see the module docstring)."""

    NONE = "none"  # the message written is the current one
    WAIT = "wait"  # only numbers changed; their refresh is not due yet
    REFRESH = "refresh"  # only numbers changed, and the refresh is due: write, no Event
    CHANGED = "changed"  # what the reason means changed: write, with an Event


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """``write`` to do; ``key`` the meaning key the write records; ``recheck_after``
    (``WAIT``): seconds until the refresh is due."""

    write: PendingWrite
    key: str
    recheck_after: float | None = None


def why_class(reason: str) -> str:
    """A member's misfit reason without its numbers: every number is ``#`` and the
    reserved-in-flight clause is dropped (names such as ``H100`` or ``80GB`` stay); any
    shortage of free GPUs is ``no room now``."""
    if NO_ROOM_NOW in reason:
        return "no room now"
    return _NUMBER.sub("#", _IN_FLIGHT.sub("", reason))


def meaning_key(placement: Placement, *, generation: int = 0) -> str:
    """A short digest of what the placement's pending reason means (module docstring)."""
    reason = placement.reason
    decision = placement.decision
    parts = [str(reason or ""), str(generation)]
    if reason is PendingReason.NO_FEASIBLE_MEMBER:
        parts.append(f"{decision.pods}/{decision.gpus}/{decision.gangs}")
        if placement.claim is not None:  # a member held for it: news, not a number
            parts.append(f"claim\x1f{placement.claim}\x1f{placement.claim_wide}")
        parts += sorted(f"{v.member}\x1f{v.feasible}\x1f{why_class(v.reason)}"
                        for v in decision.verdicts)
    elif reason is not PendingReason.QUEUED:
        parts.append(decision.summary[:1000])
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()[:16]


def generation_of(workload: Mapping[str, Any] | None) -> int:
    """The workload's ``metadata.generation`` (0 when absent or junk)."""
    try:
        return int(((workload or {}).get("metadata") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def judge(record: DispatchRecord | None, placement: Placement, *, now: float,
          refresh_s: float = DEFAULT_REFRESH_S, generation: int = 0) -> Judgement:
    """What to write for a workload that ``placement`` leaves waiting, given its
    ``record`` (None: not created yet) at ``now`` (module docstring)."""
    key = meaning_key(placement, generation=generation)
    if (record is None or record.phase != Phase.PENDING
            or record.pending_reason != placement.reason):
        return Judgement(write=PendingWrite.CHANGED, key=key)
    if record.pending_message == placement.decision.summary[:1000]:
        return Judgement(write=PendingWrite.NONE, key=key)
    if record.pending_key != key:
        return Judgement(write=PendingWrite.CHANGED, key=key)
    written = record.pending_written_at
    # a write stamped ahead of this clock (another replica's) waits refresh_s at most
    due = -math.inf if written is None else min(written, now) + refresh_s
    if now >= due:
        return Judgement(write=PendingWrite.REFRESH, key=key)
    return Judgement(write=PendingWrite.WAIT, key=key, recheck_after=due - now)
