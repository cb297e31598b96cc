"""What an action may do to the world, and what it tells the loop afterwards.

``control.actions`` executes one ``decide`` action through a ``Writer`` — the writes of the
control loop by what they mean (create the record, create the copy, release the record, ...),
each keeping the caches current — and answers with an ``Outcome``: decide again now, look
again after some seconds, or done for now. The worker (``control.workers``) schedules; the
actions never see the reconciler, the caches or a client. ``control.writes.Writes`` is the
real writer; the unit tests use a recording fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher.control.copies import Rejection
from dispatcher.control.memory import StepMemory
from dispatcher.control.observe import Metrics
from dispatcher.fleet.reservations import Reservation

if TYPE_CHECKING:
    from dispatcher.control.copyplan import CopyPlan
    from dispatcher.control.record import DispatchRecord

__all__ = ["AGAIN", "DONE", "CopyUpdate", "Created", "Outcome", "Writer", "later"]


class Created(StrEnum):
    """What creating a Dispatch found."""

    CREATED = "created"
    EXISTS = "exists"  # ours was there (now cached), or a stale namesake's was deleted
    BLOCKED = "blocked"  # a deleted namesake's record still waits for its copy to go


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """After an action: ``again`` = decide again now; ``after`` = look again in N seconds."""

    again: bool = False
    after: float | None = None


@dataclass(frozen=True, kw_only=True)
class CopyUpdate:
    """What an update of a copy wrote: the hub generation and the top-level spec keys
    changed; ``refused``: why nothing was written (a pod template sets a refused field,
    or the spec cannot be built into a copy)."""

    generation: int
    changed: tuple[str, ...]
    refused: str | None = None


AGAIN = Outcome(again=True)
DONE = Outcome()


def later(seconds: float) -> Outcome:
    """Done for now; look again after ``seconds`` (never less than 50 ms)."""
    return Outcome(after=max(seconds, 0.05))


class Writer(Protocol):
    """The control loop's writes (``control.writes.Writes``)."""

    metrics: Metrics
    memory: StepMemory  # what the snapshot reads of our last steps

    async def create_record(self, uid: str, workload: Mapping[str, Any], *,
                            placed: Mapping[str, Any] | None = None) -> Created:
        """Create its Dispatch, holding our finalizer, with ``placed`` in its spec
        (``record.first_placement``); anything but CREATED means nothing of ``placed``
        was written."""

    async def workload_gone(self, record: DispatchRecord) -> bool:
        """Read the hub: True when no object of the record's workload name and uid is
        there (an uncached one may only be hidden from a filtered watch)."""

    async def patch_record(self, uid: str, status: dict[str, Any]) -> None:
        """Merge-patch the Dispatch status (conditions merged by type)."""

    async def mirror_status(self, uid: str, diff: dict[str, Any]) -> bool:
        """Merge-patch the hub object's status; False when it is gone."""

    async def create_copy(self, plan: CopyPlan) -> bool | Rejection:
        """Send the planned copy. True: it exists; False: look again later; Rejection:
        refused for good."""

    async def update_copy(self, plan: CopyPlan) -> CopyUpdate | None:
        """Write the planned spec to the copy; None when there is nothing to write to."""

    async def delete_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool:
        """Delete the copy if it is ours; True when one was deleted."""

    async def remove_finalizer(self, uid: str, workload: Mapping[str, Any] | None) -> bool:
        """Delete the Dispatch and release its finalizer (and a legacy one on the hub
        object, if it still exists); False on a write conflict (the object re-read)."""

    def demand_patch(self, uid: str) -> dict[str, Any]:
        """``status.demand``/``status.definition`` of the resolved workload, or {}."""

    def release(self, uid: str) -> None:
        """Drop the workload's reservation wherever it is held."""

    def hold(self, reservation: Reservation) -> None:
        """Hold ``reservation`` in its member's book (replacing the workload's own)."""

    def forget(self, uid: str) -> None:
        """The workload leaves: its reservation and its queue entry go."""

    def drop(self, uid: str) -> None:
        """The hub object is gone: forget everything about it (``forget``, the memory,
        its resolution)."""

    def event(self, workload: Mapping[str, Any], *, reason: str, message: str,
              warning: bool = False) -> None:
        """A Kubernetes Event on the hub object (written in the background)."""

    def elapsed(self, since: float) -> float:
        """Seconds on the loop's monotonic clock since ``since``."""
