"""The per-workload decision: one frozen snapshot in, one small action out.

The shell (``control.reconcile``) reads a ``Snapshot`` (hub object, its Dispatch record, the
member copy if known, that member's health, and — when ``placing_needed`` says the rows it
falls in read it — the ``PlacementInput``: the resolved workload, the queue and the member
views), calls ``decide`` once and executes the returned ``Action``; then it reads a fresh
snapshot and asks again, until the answer is ``NOTHING`` or a wait. Placement is part of
the decision (``control.core.placing``): the action carries the ``Placement`` (queue step,
reservation) the shell applies before its first write. Nothing here does I/O or reads a
clock, so every branch is a table row in the unit tests.

The finalizer is the record's (``names.FINALIZER``, set on its create): the hub object is
never written to hold it, so its delete returns at once and the record waits for the copy
to go. A record being deleted while its workload lives (a user, a namespace emptying) stays
in use until the workload goes, as a PVC in use does.

Branch order (first match wins):

==  =============================================  ==========================================
#   when                                           action
==  =============================================  ==========================================
1a  shared hub: not cached, placed, the hub has   as row 10a (``unheld``: out of scope)
    it out of the watched scope (``unheld``)
1   hub object not cached, no record, or the hub   NOTHING (a watch's label selector may
    has not said it is gone (``workload_gone``)    hide a live one: never guessed)
2   gone or being deleted, copy ours on a          DELETE_COPY
    reachable member
3   gone or being deleted, member unreachable,     WAIT (recheck when it may count as lost)
    not lost long enough
4   gone or being deleted, otherwise               RELEASE_FINALIZER (the record's, and a
                                                   legacy one on the hub object), else NOTHING
5   no record, a controller owns it                NOTHING (its owner's pod, Job, ...: never ours,
                                                   whatever finalizer it carries)
6   no Dispatch record                             CREATE_RECORD (with the Placement: its
                                                   decision rides on the create; Pending
                                                   is written right after when none fits)
7   dispatcher gave up (record.failure)            NOTHING (terminal)
9   no member chosen, ``place`` chose one          RECORD_PLACEMENT (with the Placement)
10  no member chosen, nothing feasible             RECORD_PENDING when what the reason means
                                                   changed (kind, members, why-class), or
                                                   only its numbers and the last write is
                                                   ``pendingRefresh`` old; else NOTHING
                                                   (looked at again when the refresh is due)
                                                   (``control.core.pending``)
10a shared hub: the placed hub object is no      FAIL (its copy deleted) when failover.policy
    longer held (unheld), not finished            allows removing the copy, else
                                                  REPORT_NOT_HELD (Held=False, once) and on
11  member unreachable, the workload finished     NOTHING (its result is known: never re-run)
11a member unreachable, lost >= memberLostAfter,   REQUEUE (or FAIL when attempts are used up)
    failover policy allows
12  member unreachable, otherwise                  MARK_UNKNOWN (once), else WAIT
13  copy state not known yet (watch not synced)    WAIT
14  a foreign object holds the name                REPORT_CONFLICT (once)
15  copy absent, the workload finished             NOTHING (removed after it finished)
15a copy absent, the member refused it             REQUEUE (the member excluded) or FAIL
                                                   when no other member could take it
                                                   (``after_rejection``, over the input)
15b copy absent                                    SUBMIT
16  copy ours, record not yet Submitted            ADOPT
16a copy evicted by its member's Kueue, not        REQUEUE (the member excluded; or FAIL when
    finished, failover.policy not never           attempts are used up)
16b copy never admitted by its member's Kueue      REQUEUE (or FAIL when attempts are used up)
    unadmittedAfter after submission
17  copy ours, never up yet (pending/initializing) REQUEUE (or FAIL when attempts are used up)
    past stuckAfter after submission
18  copy ours, hub spec changed since written      UPDATE_COPY (the hub object is the truth)
19  copy ours, status (or its Kueue admission,     MIRROR (MemberAdmitted)
    MemberAdmitted) differs from the hub's
19a copy joined to a member gang, never got       REPORT_STALL (GangStalled=True, once)
    going (``got_going``: also running with no
    GPU pod bound) gangStalledAfter after
    submission, the member has room for it
19b GangStalled reported, pods bound since         CLEAR_STALL (GangStalled=False)
20  otherwise                                      NOTHING (or WAIT until the stuck or the
                                                   stall deadline)
==  =============================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from dispatcher.control.core.hubhold import controller_owner
from dispatcher.control.core.names import FINALIZER, Phase
from dispatcher.control.core.pending import DEFAULT_REFRESH_S, PendingWrite, generation_of, judge
from dispatcher.control.core.placing import Placement, PlacementInput, alternatives_for, place
from dispatcher.control.core.record import DispatchRecord
from dispatcher.fleet.admission import EVICTED, FINISHED, PENDING, Admission
from dispatcher.fleet.reservations import Reservation
from dispatcher.workloads.model import GenericStatus

if TYPE_CHECKING:
    from dispatcher.control.core.copies import Rejection  # copies reads CopyState from here
    from dispatcher.control.core.copyplan import CopyPlan

__all__ = [
    "STUCK",
    "Action",
    "ActionKind",
    "Copy",
    "CopyState",
    "FailoverPolicy",
    "MemberHealth",
    "PlacingMissing",
    "Rules",
    "Snapshot",
    "after_rejection",
    "decide",
    "got_going",
    "not_started",
    "placing_needed",
]

FailoverPolicy = Literal["never", "if-not-started", "always"]

_NOT_STARTED = frozenset({"", GenericStatus.PENDING, GenericStatus.UNKNOWN,
                          GenericStatus.SUSPENDED})
STUCK = frozenset({"", GenericStatus.PENDING, GenericStatus.UNKNOWN,
                   GenericStatus.INITIALIZING})
"""Never got going (pods unschedulable) or a gang only partly up (still initializing):
what may be stuck, or a stalled gang."""
# Up, or done: what a copy is once it got going whatever its pods say (``got_going``).
_WENT = frozenset({GenericStatus.DEGRADED, GenericStatus.COMPLETED, GenericStatus.FAILED})
# Finished: its result is known; whatever happens to the member or the copy now, it is
# never run again (failover, a copy the member's TTL controller removed).
_FINISHED = frozenset({GenericStatus.COMPLETED, GenericStatus.FAILED})


class ActionKind(StrEnum):
    """What the shell does next (see the table in the module docstring)."""

    NOTHING = "nothing"
    WAIT = "wait"
    DELETE_COPY = "delete-copy"
    RELEASE_FINALIZER = "release-finalizer"
    CREATE_RECORD = "create-record"
    RECORD_PLACEMENT = "record-placement"
    RECORD_PENDING = "record-pending"
    REQUEUE = "requeue"
    FAIL = "fail"
    MARK_UNKNOWN = "mark-unknown"
    REPORT_CONFLICT = "report-conflict"
    REPORT_STALL = "report-stall"
    REPORT_NOT_HELD = "report-not-held"
    CLEAR_STALL = "clear-stall"
    SUBMIT = "submit"
    ADOPT = "adopt"
    UPDATE_COPY = "update-copy"
    MIRROR = "mirror"


class CopyState(StrEnum):
    """What the chosen member holds under the workload's name."""

    UNKNOWN = "unknown"  # member unreachable, or its copy watch has not listed yet
    ABSENT = "absent"
    OURS = "ours"  # carries our origin label and this workload's hub uid
    FOREIGN = "foreign"  # someone else's object: never overwritten


@dataclass(frozen=True, kw_only=True)
class Copy:
    """The member copy as last seen by its watch: ``generic`` and ``statuses`` are its
    resolved status; ``written_generation`` the hub generation it was written from;
    ``seen_at`` when its watch saw it (the loop's monotonic clock)."""

    state: CopyState
    uid: str = ""
    status: Mapping[str, Any] | None = None
    generic: str = ""
    statuses: tuple[str, ...] = ()
    resource_version: str = ""
    written_generation: int = 0
    seen_at: float = 0.0
    gang_mechanism: str = "none"
    """The member gang mechanism its gangs were joined to (``control.core.gangsched``)."""
    bound_pods: int = 0
    """Of a copy not known to have got going (``got_going``): its GPU pods bound to a node
    and not finished."""
    held_gpus: int = 0
    """Of such a copy: the GPUs still reserved for its pods not seen bound (or finished)."""
    room_gpus: int | None = None
    """Of a copy joined to a gang: the member's free GPUs plus those still reserved for
    it (None: not known)."""
    admission: Admission | None = None
    """On a Kueue member: what its Kueue says of the copy (``fleet.admission``)."""


@dataclass(frozen=True, kw_only=True)
class MemberHealth:
    """Reachability of the chosen member; ``lost_since`` is the *first* failure time."""

    reachable: bool
    lost_since: float | None = None


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The configured failover and stuck rules (``failover.*`` in the config file), and
    how often a pending reason's numbers are rewritten (``queue.pendingRefresh``).

    ``stuck_after`` <= 0 disables stuck detection; ``max_attempts`` bounds placements of
    one workload (the last failed attempt makes it Failed). ``gang_stall_after`` (<= 0:
    off) is how long a copy joined to a member gang may have no pod bound, while the
    member has room for it, before its Dispatch says ``GangStalled``.
    ``unadmitted_after`` (<= 0: off) is how long a copy on a Kueue member may wait for its
    first admission before it is moved (placement counted the member's quota as free, so a
    long wait means the member's queue ordered it behind others).
    """

    policy: FailoverPolicy = "if-not-started"
    member_lost_after: float = 300.0
    stuck_after: float = 0.0
    gang_stall_after: float = 120.0
    unadmitted_after: float = 300.0
    max_attempts: int = 3
    pending_refresh_s: float = DEFAULT_REFRESH_S


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Everything ``decide`` looks at for one hub workload, read at ``now`` (Unix seconds)."""

    now: float
    workload: Mapping[str, Any] | None
    record: DispatchRecord | None
    copy: Copy = Copy(state=CopyState.UNKNOWN)
    health: MemberHealth = MemberHealth(reachable=True)
    placing: PlacementInput | None = None  # what placing reads (``placing_needed``)
    rules: Rules = Rules()
    refusal: Rejection | None = None  # the member refused the copy (``StepMemory``)
    workload_gone: bool = False
    """The hub says the (uncached) workload is gone: its record is being deleted, or a read
    found no object of its name and uid. An uncached one is never taken for gone else."""
    unheld: str | None = None
    """Shared hub: why the hub object is not held there (``hubhold.unheld_reason``), so the
    hub's own controllers may run it; None: held, or a dedicated hub."""


@dataclass(frozen=True, kw_only=True)
class Action:
    """The next step. ``reason`` says why in words (logs, conditions, events); ``member`` is
    the member concerned; ``recheck_after`` (seconds) asks the shell to look again later;
    ``placement`` is the placement made in this step (its queue step and reservation are
    the shell's to apply, whatever the action); ``rejection`` the member's refusal a
    REQUEUE or FAIL answers; ``plan`` the copy a SUBMIT or UPDATE_COPY writes (the shell
    plans it after deciding: ``control.planner``), or why none may be written."""

    kind: ActionKind
    reason: str = ""
    member: str | None = None
    recheck_after: float | None = None
    placement: Placement | None = None
    rejection: Rejection | None = None  # REQUEUE/FAIL answering this refusal
    plan: CopyPlan | Rejection | None = None
    hold: Reservation | None = None
    """A reservation the shell holds before the write (SUBMIT: the record's, the one in
    force; it may not be in the book after a create conflict or a lost answer)."""


class PlacingMissing(ValueError):
    """``decide`` was asked without the placement input its row reads: the shell did not
    follow ``placing_needed`` (a bug, not a state of the world)."""


def placing_needed(snap: Snapshot) -> bool:
    """Whether ``decide``'s row for ``snap`` may read the placement input (rows 6, 9-10,
    15a): the shell reads it first (resolving the workload may await), so ``decide`` is
    asked once per step. Never False where a row reads it; it may be True where the row
    turns out not to (a refused copy whose member is unreachable): one read for nothing."""
    workload, record = snap.workload, snap.record
    if workload is None or (workload.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if record is None:
        return controller_owner(workload) is None
    if record.failure:
        return False
    if record.cluster is None:
        return True
    return snap.refusal is not None and snap.refusal.member == record.cluster


def _placing(snap: Snapshot) -> PlacementInput:
    if snap.placing is None:
        raise PlacingMissing("decide needs the placement input here (placing_needed)")
    return snap.placing


def got_going(copy: Copy) -> bool:
    """Whether the copy has got going on its member, by its pods where its status word
    cannot tell: ``DispatchRecord.started_at`` keeps the first time, and the GangStalled
    rows stop once it has.

    Degraded, completed and failed copies have. A running one has once a pod of it is
    bound, or when nothing is reserved for it any more (every planned pod seen, a copy
    without GPU pods, or the reservation expired): a status word says what the workload is
    (a JobSet whose Jobs are active reads running while every pod waits for a node), the
    member's pods say whether it started. Everything else (pending, initializing, unknown,
    suspended) has not."""
    if copy.generic in _WENT:
        return True
    return copy.generic == GenericStatus.RUNNING and (copy.bound_pods > 0
                                                      or copy.held_gpus <= 0)


def not_started(generic: str | None) -> bool:
    """True when the copy cannot have started work (what ``if-not-started`` allows)."""
    return (generic or "") in _NOT_STARTED


def _deleting(snap: Snapshot, workload: Mapping[str, Any] | None) -> Action:
    """The hub object is gone (``workload`` None) or being deleted: its copy goes, then the
    finalizers it held (the record's; a legacy one on the hub object)."""
    record = snap.record
    cluster = record.cluster if record else None
    if cluster and snap.copy.state is CopyState.OURS and snap.health.reachable:
        return Action(kind=ActionKind.DELETE_COPY, member=cluster,
                      reason=f"hub object deleted; deleting the copy on {cluster}")
    if cluster and not snap.health.reachable:
        waited = snap.now - (snap.health.lost_since or snap.now)
        left = snap.rules.member_lost_after - waited
        if left > 0:
            return Action(kind=ActionKind.WAIT, member=cluster, recheck_after=left,
                          reason=f"member {cluster} unreachable; the copy is deleted when "
                                 f"it returns (or by the orphan sweep)")
    if cluster and snap.copy.state is CopyState.UNKNOWN and snap.health.reachable:
        return Action(kind=ActionKind.WAIT, member=cluster,
                      reason=f"copy on {cluster} not listed yet")
    legacy = workload is not None and FINALIZER in (
        (workload.get("metadata") or {}).get("finalizers") or ())
    if record is not None or legacy:
        return Action(kind=ActionKind.RELEASE_FINALIZER, member=cluster,
                      reason="no copy left on a reachable member")
    return Action(kind=ActionKind.NOTHING, reason="deleted")


def _give_up_or_requeue(record: DispatchRecord, rules: Rules, reason: str) -> Action:
    if record.attempt >= rules.max_attempts:
        return Action(kind=ActionKind.FAIL, member=record.cluster,
                      reason=f"{reason}; gave up after {record.attempt} attempt(s)")
    return Action(kind=ActionKind.REQUEUE, member=record.cluster, reason=reason)


def after_rejection(record: DispatchRecord, rules: Rules, *, member: str, message: str,
                    alternatives: tuple[str, ...]) -> Action:
    """The member refused the copy (a permanent 4xx): never retried there. REQUEUE (the
    member joins ``excluded``) when another member could take the workload and attempts
    remain, else FAIL. ``alternatives`` are the members left once it is excluded."""
    reason = f"{member} rejected the copy: {message}"
    if not alternatives:
        return Action(kind=ActionKind.FAIL, member=member,
                      reason=f"{reason}; no other member could take it")
    return _give_up_or_requeue(record, rules,
                               f"{reason}; trying the others ({', '.join(alternatives)})")


def _refused(snap: Snapshot, record: DispatchRecord, refusal: Rejection) -> Action:
    """The member refused the copy: who else could take it decides requeue or fail (the
    placement input answers; it is asked for first)."""
    left = alternatives_for(_placing(snap), without=refusal.member)
    action = after_rejection(record, snap.rules, member=refusal.member,
                             message=refusal.describe(), alternatives=left)
    return replace(action, rejection=refusal)


def _unplaced(snap: Snapshot, record: DispatchRecord) -> Action:
    placement = place(_placing(snap))
    decision = placement.decision
    if decision.chosen is not None:
        return Action(kind=ActionKind.RECORD_PLACEMENT, member=decision.chosen,
                      reason=decision.summary, placement=placement)
    judged = judge(record, placement, now=snap.now, refresh_s=snap.rules.pending_refresh_s,
                   generation=generation_of(snap.workload))
    if judged.write in (PendingWrite.NONE, PendingWrite.WAIT):
        return Action(kind=ActionKind.NOTHING, reason=decision.summary, placement=placement,
                      recheck_after=judged.recheck_after)
    return Action(kind=ActionKind.RECORD_PENDING, reason=decision.summary,
                  placement=placement)


def _member_lost(snap: Snapshot, record: DispatchRecord, cluster: str) -> Action:
    rules = snap.rules
    lost_for = snap.now - (snap.health.lost_since or snap.now)
    if record.generic_status in _FINISHED:
        return Action(kind=ActionKind.NOTHING, member=cluster,
                      reason=f"{record.generic_status} on {cluster} before it was lost: "
                             f"not run again")
    allowed = (rules.policy == "always"
               or (rules.policy == "if-not-started" and not_started(record.generic_status)))
    if allowed and lost_for >= rules.member_lost_after:
        return _give_up_or_requeue(record, rules, f"member {cluster} lost for "
                                                  f"{lost_for:.0f}s (failover {rules.policy})")
    recheck = rules.member_lost_after - lost_for if allowed else None
    if record.phase != Phase.UNKNOWN:
        return Action(kind=ActionKind.MARK_UNKNOWN, member=cluster, recheck_after=recheck,
                      reason=f"member {cluster} unreachable")
    return Action(kind=ActionKind.WAIT, member=cluster, recheck_after=recheck,
                  reason=f"member {cluster} unreachable for {lost_for:.0f}s")


def _not_held(snap: Snapshot, record: DispatchRecord, cluster: str) -> Action | None:
    """Row 10a: a placed workload whose hub object stopped being held (a webhook that was
    bypassed, a hold removed): the hub's controllers may run it too. Its copy goes when the
    failover policy allows moving it (``always``; ``if-not-started`` before it started),
    and the dispatcher gives up (terminal); otherwise the copy stays and the Dispatch says
    both may run (``Held=False``). Never both running silently."""
    copy, policy = snap.copy, snap.rules.policy
    if record.generic_status in _FINISHED or copy.generic in _FINISHED:
        return None
    reason = f"the hub object is no longer held: {snap.unheld}"
    if policy == "always" or (policy == "if-not-started"
                              and not_started(copy.generic or record.generic_status)):
        return Action(kind=ActionKind.FAIL, member=cluster,
                      reason=f"{reason}; its copy on {cluster} is removed so it never runs "
                             f"twice (failover.policy {policy})")
    if record.not_held:
        return None
    return Action(kind=ActionKind.REPORT_NOT_HELD, member=cluster,
                  reason=f"{reason}; its copy on {cluster} has started and failover.policy "
                         f"{policy} keeps it: it may run on the hub as well")


def _outside(snap: Snapshot, record: DispatchRecord, cluster: str) -> Action:
    """Row 1a: shared hub, a placed workload the hub still has but out of the watched
    scope (a label removed while the webhook was bypassed): not held as far as we know,
    so row 10a's rule, once its copy can be seen."""
    if not snap.health.reachable or snap.copy.state is not CopyState.OURS:
        return Action(kind=ActionKind.NOTHING, member=cluster,
                      reason=f"out of the watched scope; no copy of ours seen on {cluster}")
    return _not_held(snap, record, cluster) or Action(
        kind=ActionKind.NOTHING, member=cluster, reason="out of the watched scope (said)")


def _placed(snap: Snapshot, record: DispatchRecord, workload: Mapping[str, Any],
            cluster: str) -> Action:
    copy, rules = snap.copy, snap.rules
    if not snap.health.reachable:
        return _member_lost(snap, record, cluster)
    if copy.state is CopyState.UNKNOWN:
        return Action(kind=ActionKind.WAIT, member=cluster, reason="copy not listed yet")
    if snap.unheld is not None and copy.state is not CopyState.FOREIGN:
        unheld = _not_held(snap, record, cluster)
        if unheld is not None:
            return unheld
    if copy.state is CopyState.FOREIGN:
        if record.phase == Phase.CONFLICT:
            return Action(kind=ActionKind.NOTHING, member=cluster, reason="conflict reported")
        return Action(kind=ActionKind.REPORT_CONFLICT, member=cluster,
                      reason=f"{cluster} already has an object with this name that this "
                             f"hub did not create; not overwriting it")
    if copy.state is CopyState.ABSENT:
        if record.generic_status in _FINISHED:
            return Action(kind=ActionKind.NOTHING, member=cluster,
                          reason=f"{record.generic_status}; its copy was removed from "
                                 f"{cluster} since (not run again)")
        if snap.refusal is not None and snap.refusal.member == cluster:
            return _refused(snap, record, snap.refusal)
        return Action(kind=ActionKind.SUBMIT, member=cluster, reason="no copy on the member",
                      hold=record.reservation)
    if record.phase in ("", Phase.PENDING, Phase.PLACED, Phase.UNKNOWN, Phase.CONFLICT):
        return Action(kind=ActionKind.ADOPT, member=cluster, reason="copy found on the member")
    queued, queued_at = _queued(snap, record, cluster)
    if queued is not None:
        return queued
    # Stuck is about getting going: a copy that was once up (running, degraded, finished)
    # and dips back to initializing (a restart, a scale-up) is not stuck. A copy whose
    # operator says running is never requeued as stuck (its status is the workload's,
    # issue 41); while none of its pods is bound it may still be a stalled gang (its pods,
    # ``got_going``, say so), which is reported, not acted on.
    stuck = copy.generic in STUCK and record.started_at is None
    stalling = record.started_at is None and not got_going(copy) \
        and copy.generic in STUCK | {GenericStatus.RUNNING}
    if rules.stuck_after > 0 and stuck and record.submitted_at:
        waited = snap.now - record.submitted_at
        if waited >= rules.stuck_after:
            return _give_up_or_requeue(record, rules,
                                       f"not started on {cluster} after {waited:.0f}s")
    generation = int((workload.get("metadata") or {}).get("generation") or 0)
    if record.synced_generation and generation > record.synced_generation:
        return Action(kind=ActionKind.UPDATE_COPY, member=cluster,
                      reason=f"hub generation {generation} > {record.synced_generation}")
    if (dict(copy.status or {}) != dict(workload.get("status") or {})
            or (copy.generic or None) != record.generic_status
            or admission_said(copy, cluster) not in (None, record.admission)):
        return Action(kind=ActionKind.MIRROR, member=cluster, reason=copy.generic)
    stall, stall_at = _gang_stall(snap, record, cluster, stuck=stalling)
    if stall is not None:
        return stall
    stuck_at = record.submitted_at + rules.stuck_after \
        if rules.stuck_after > 0 and stuck and record.submitted_at else None
    deadlines = [at for at in (stall_at, stuck_at, queued_at) if at is not None]
    if deadlines:
        return Action(kind=ActionKind.WAIT, member=cluster, reason="not started yet",
                      recheck_after=min(deadlines) - snap.now)
    return Action(kind=ActionKind.NOTHING, member=cluster, reason="in sync")


def admission_said(copy: Copy, member: str) -> tuple[str, str] | None:
    """What the ``MemberAdmitted`` condition says of the copy's admission (reason,
    message); None off Kueue."""
    found = copy.admission
    return None if found is None else (found.state, found.describe(member))


def _queued(snap: Snapshot, record: DispatchRecord, cluster: str
            ) -> tuple[Action | None, float | None]:
    """Rows 16a/16b: a copy its member's Kueue evicted, or never admitted within
    ``unadmittedAfter``, moves (policy permitting; finished work never runs again); else
    the deadline at which a waiting copy is looked at again."""
    found, rules = snap.copy.admission, snap.rules
    if found is None or record.generic_status in _FINISHED or found.state == FINISHED:
        return None, None
    if found.state == EVICTED and rules.policy != "never":
        return _give_up_or_requeue(record, rules, f"{found.describe(cluster)}; moving it "
                                                  f"(failover.policy {rules.policy})"), None
    if found.admitted or record.started_at is not None or found.state != PENDING \
            or rules.unadmitted_after <= 0 or not record.submitted_at:
        return None, None
    due = record.submitted_at + rules.unadmitted_after
    if snap.now >= due:
        return _give_up_or_requeue(record, rules, f"not admitted by {cluster}'s Kueue after "
                                                  f"{snap.now - record.submitted_at:.0f}s: "
                                                  f"{found.describe(cluster)}"), None
    return None, due


def _gang_stall(snap: Snapshot, record: DispatchRecord, cluster: str, *, stuck: bool
                ) -> tuple[Action | None, float | None]:
    """Rows 19a/19b: a copy whose member gang holds every pod while the member has room
    (a gang its operator never completes: pods created in stages the definition did not
    declare) is said on the Dispatch, and unsaid once pods bind. Also the time to look
    again when it may become one."""
    copy, after = snap.copy, snap.rules.gang_stall_after
    if record.gang_stalled:
        if copy.bound_pods > 0 or not stuck:
            return Action(kind=ActionKind.CLEAR_STALL, member=cluster,
                          reason=f"{copy.bound_pods} pod(s) bound on {cluster}"), None
        return None, None
    if (after <= 0 or copy.gang_mechanism == "none" or not stuck or copy.bound_pods > 0
            or not record.submitted_at or not record.gpus or copy.room_gpus is None
            or copy.room_gpus < record.gpus):
        return None, None  # CPU-only (its pods are not seen) or waiting for room
    waited = snap.now - record.submitted_at
    if waited < after:
        return None, record.submitted_at + after
    return Action(kind=ActionKind.REPORT_STALL, member=cluster, reason=(
        f"no pod of the copy bound on {cluster} {waited:.0f}s after submission, with "
        f"{copy.room_gpus} GPUs there for its {record.gpus}: its gangs are held by "
        f"{copy.gang_mechanism} and its operator may never create the rest of a gang "
        f"(pods created in stages its definition does not declare)")), None


def decide(snap: Snapshot) -> Action:
    """The next action for one hub workload (branch table in the module docstring)."""
    workload, record = snap.workload, snap.record
    if workload is None:
        if record is not None and record.cluster is not None and snap.unheld is not None \
                and not snap.workload_gone and not record.failure:
            return _outside(snap, record, record.cluster)
        if record is None or not snap.workload_gone:
            return Action(kind=ActionKind.NOTHING, reason="hub object not cached")
        return _deleting(snap, None)
    meta = workload.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return _deleting(snap, workload)
    if record is None:
        owner = controller_owner(workload)
        if owner is not None:  # never taken: its owner's, not ours (only a record says
            return Action(kind=ActionKind.NOTHING,  # it was taken before: not a finalizer
                          reason=f"owned by {owner}: part of its owner's workload")
        placement = place(_placing(snap))
        return Action(kind=ActionKind.CREATE_RECORD, member=placement.decision.chosen,
                      reason=placement.decision.summary, placement=placement)
    if record.failure:
        return Action(kind=ActionKind.NOTHING, reason=record.failure)
    if record.cluster is None:
        return _unplaced(snap, record)
    return _placed(snap, record, workload, record.cluster)
