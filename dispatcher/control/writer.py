"""The two ports an action writes through, and what it tells the loop afterwards.

``control.actions`` executes one ``decide`` action through ``Ports``: the hub's writes
(``HubWriter``: the Dispatch record, the mirror, the finalizer, Events; ``control.writes``)
and the members' (``MemberWriter``: send a copy plan, update a copy, delete one if ours;
``control.submit``). Each write keeps the caches current. It answers with an ``Outcome``:
decide again now, look again after some seconds, or done for now, and the local effects the
reconciler applies in its synchronous step (a reservation released, the workload forgotten,
what the step saw that the hub does not say). The actions never see the reconciler, the
caches, the queue or a client; the unit tests use one recording fake per port.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher.control.core.copies import Rejection
from dispatcher.control.observe import Metrics

if TYPE_CHECKING:
    from dispatcher.control.core.copyplan import CopyPlan
    from dispatcher.control.core.record import DispatchRecord

__all__ = ["AGAIN", "DONE", "CopyUpdate", "Created", "HubWriter", "MemberWriter", "Outcome",
           "Ports", "Sent", "later"]


class Created(StrEnum):
    """What creating a Dispatch found."""

    CREATED = "created"
    EXISTS = "exists"  # ours was there (now cached), or a stale namesake's was deleted
    BLOCKED = "blocked"  # a deleted namesake's record still waits for its copy to go


class Sent(StrEnum):
    """What sending a copy plan found (a refusal for good is a ``Rejection`` instead)."""

    EXISTS = "exists"  # created, or ours was there (now cached)
    NOT_CONNECTED = "not-connected"  # no client for the member now: look again later
    FOREIGN = "foreign"  # an object that is not ours holds the name: never overwritten


@dataclass(frozen=True)
class HubRead:
    """What a read of an uncached workload found: ``gone``, or the live object (None
    when the hub could not say)."""

    gone: bool
    found: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """After an action: ``again`` = decide again now; ``after`` = look again in N seconds.

    The local effects, applied by the reconciler before the next snapshot: ``release`` the
    workload's reservation wherever it is held; ``forget`` it (reservation and queue
    entry: it leaves); ``refused`` the member's refusal to remember (the next ``decide``
    answers it); ``mirrored`` the copy's resource version whose status is on the hub now;
    ``answered``: a remembered refusal is moot (the workload retreated); ``foreign`` the
    member where a foreign object holds the name."""

    again: bool = False
    after: float | None = None
    release: bool = False
    forget: bool = False
    refused: Rejection | None = None
    mirrored: str | None = None
    answered: bool = False
    foreign: str | None = None


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


class HubWriter(Protocol):
    """The control loop's writes to the hub (``control.writes.HubWrites``)."""

    async def create_record(self, uid: str, workload: Mapping[str, Any], *,
                            placed: Mapping[str, Any] | None = None) -> Created:
        """Create its Dispatch, holding our finalizer, with ``placed`` in its spec
        (``record.first_placement``); anything but CREATED means nothing of ``placed``
        was written."""

    async def read_workload(self, record: DispatchRecord) -> HubRead:
        """Read the hub for an uncached workload: gone when no object of the record's
        workload name and uid is there, else the object when it could be read (a filtered
        watch hides one that left ``watch.labelSelector``)."""

    async def patch_record(self, uid: str, status: dict[str, Any]) -> None:
        """Merge-patch the Dispatch status (conditions merged by type)."""

    async def mirror_status(self, uid: str, diff: dict[str, Any]) -> bool:
        """Merge-patch the hub object's status; False when it is gone."""

    async def remove_finalizer(self, uid: str, workload: Mapping[str, Any] | None) -> bool:
        """Delete the Dispatch and release its finalizer (and a legacy one on the hub
        object, if it still exists); False on a write conflict (the object re-read)."""

    def event(self, workload: Mapping[str, Any], *, reason: str, message: str,
              warning: bool = False) -> None:
        """A Kubernetes Event on the hub object (written in the background)."""


class MemberWriter(Protocol):
    """The control loop's writes to the members (``control.submit.MemberWrites``): they
    send what was decided and map the answers, deciding nothing."""

    async def create_copy(self, plan: CopyPlan) -> Sent | Rejection:
        """Send the planned copy; a Rejection when the member refused it for good."""

    async def update_copy(self, plan: CopyPlan) -> CopyUpdate | None:
        """Write the planned spec to the copy; None when there is nothing to write to."""

    async def delete_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool:
        """Delete the copy if it is ours; True when one was deleted."""


@dataclass(frozen=True, kw_only=True)
class Ports:
    """What the actions act through: the two writers, the metrics, the loop's monotonic
    clock (mirror lag)."""

    hub: HubWriter
    members: MemberWriter
    metrics: Metrics
    monotonic: Callable[[], float]
