"""The names the control loop writes on objects: labels, annotations, finalizer, phases.

Kept in one place because three sides read them: the controller (stamps and checks), the
orphan sweep (lists by label) and tests (assert on them). Ownership is never guessed: a
member copy is ours only when it carries our origin label and the hub uid, and its own
kind, group and name are the ones its hub-object stamp names.
"""

from __future__ import annotations

from enum import StrEnum

from dispatcher.workloads.model import GenericStatus

__all__ = [
    "FINALIZER",
    "HUB_GENERATION_ANNOTATION",
    "HUB_OBJECT_ANNOTATION",
    "HUB_UID_ANNOTATION",
    "ORIGIN_LABEL",
    "PREFIX",
    "PendingReason",
    "Phase",
]

PREFIX = "dispatcher.io/"
ORIGIN_LABEL = "dispatcher.io/origin"
# HUB_UID_LABEL (the hub uid on a copy and its pods) lives in fleet.reservations: the
# fleet reads it to attribute pods, and sits below control.
HUB_UID_ANNOTATION = "dispatcher.io/hub-uid"
HUB_GENERATION_ANNOTATION = "dispatcher.io/hub-generation"
# ``Kind.group/name`` of the hub object: a copy is the object whose own kind, group and
# name are these (a child an operator created from it, with inherited stamps, is not)
HUB_OBJECT_ANNOTATION = "dispatcher.io/hub-object"
# On every Dispatch from its create: the record outlives its hub object until the copy is
# gone. Controllers before 2026-12 put it on the hub workload itself (one more write per
# dispatch); such a workload is still released when it is deleted.
FINALIZER = "dispatcher.io/dispatch"


class Phase(StrEnum):
    """``Dispatch.status.phase``: the dispatcher's own states, then the mirrored status.

    Pending (no feasible member yet), Placed (decision and reservation recorded, member not
    touched or not confirmed), Submitted (copy exists on the member, no status yet), then the
    member copy's generic status capitalised (Running, Completed, ...), Unknown (member lost),
    Conflict (a foreign object holds the name on the member), Failed (gave up, with reason).
    """

    PENDING = "Pending"
    PLACED = "Placed"
    SUBMITTED = "Submitted"
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    DEGRADED = "Degraded"
    COMPLETED = "Completed"
    SUSPENDED = "Suspended"
    UNKNOWN = "Unknown"
    CONFLICT = "Conflict"
    FAILED = "Failed"

    @classmethod
    def of_generic(cls, status: str) -> Phase:  # a GenericStatus, or one read from a record
        """The phase shown for a mirrored generic status (``pending`` -> Submitted)."""
        return _GENERIC.get(status, cls.SUBMITTED)


class PendingReason(StrEnum):
    """The ``Placed=False`` condition reason of a Pending Dispatch: why no member yet.

    Parked reasons (``Unplaceable``, ``InvalidAnnotation``, ``InvalidTemplate``,
    ``PodTemplateRefused``, ``ResolveFailed``, ``Quarantined``, ``NotHeld``) hold nothing
    in the queue; ``InvalidTemplate``, ``ResolveFailed`` and ``Quarantined`` are
    ``Resolved=False`` too (a refused pod template resolved: the operator's policy refuses
    it, ``control.core.podpolicy``).
    """

    NO_FEASIBLE_MEMBER = "NoFeasibleMember"  # only needs capacity to free up
    QUEUED = "Queued"  # waiting behind its namespace's gate (bounded backfill)
    UNPLACEABLE = "Unplaceable"  # no member could run it even with every GPU free
    INVALID_ANNOTATION = "InvalidAnnotation"  # fixed by the user
    INVALID_TEMPLATE = "InvalidTemplate"  # a pod template that cannot be a valid Pod
    POD_TEMPLATE_REFUSED = "PodTemplateRefused"  # sets a scheduling field policy refuses
    RESOLVE_FAILED = "ResolveFailed"  # no definition, or it failed on this object
    NOT_HELD = "NotHeld"  # shared hub: not held there, so the hub may run it (never sent)
    # an untrusted definition broke an evaluation bound on this very object: evaluated
    # again only once the object changes (``workloads.quarantine``)
    QUARANTINED = "Quarantined"

    @property
    def parked(self) -> bool:
        """Waits outside the queue's gate (``PendingQueue.park``)."""
        return self not in (PendingReason.NO_FEASIBLE_MEMBER, PendingReason.QUEUED)

    @property
    def unresolved(self) -> bool:
        """The workload could not be resolved (``Resolved=False``)."""
        return self in (PendingReason.INVALID_TEMPLATE, PendingReason.RESOLVE_FAILED,
                        PendingReason.QUARANTINED)


_GENERIC: dict[str, Phase] = {
    GenericStatus.PENDING: Phase.SUBMITTED,
    GenericStatus.INITIALIZING: Phase.INITIALIZING,
    GenericStatus.RUNNING: Phase.RUNNING,
    GenericStatus.DEGRADED: Phase.DEGRADED,
    GenericStatus.COMPLETED: Phase.COMPLETED,
    GenericStatus.FAILED: Phase.FAILED,
    GenericStatus.SUSPENDED: Phase.SUSPENDED,
    GenericStatus.UNKNOWN: Phase.SUBMITTED,
}
