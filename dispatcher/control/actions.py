"""Executing one ``decide`` action: the writes, log lines, metrics and Events of each step.

Called by ``Reconciler.reconcile`` with the ``Ports`` (``control.writer``): each function
writes what its action needs through them and answers with an ``Outcome`` (decide again
now, look again later, or done, and the local effects the reconciler applies). Log lines
carry stable event names (``observe.EVENTS``); the workload's names are bound to every line
by the reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import structlog

from dispatcher.control.core import pending
from dispatcher.control.core import record as records
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.decide import (
    Action,
    ActionKind,
    Snapshot,
    admission_said,
    got_going,
)
from dispatcher.control.core.names import PendingReason, Phase
from dispatcher.control.core.placing import Placement
from dispatcher.control.writer import AGAIN, DONE, CopyUpdate, Created, Outcome, Ports, Sent, later
from dispatcher.fleet.admission import EVICTED
from dispatcher.kube.errors import KubeError
from dispatcher.kube.patches import merge_diff
from dispatcher.workloads.model import GenericStatus
from dispatcher.workloads.resolve import Resolution
from dispatcher.workloads.trace import EVENT_DELETED, EVENT_FINISHED

__all__ = ["execute"]

log = structlog.get_logger("dispatcher")

# A reservation follows the member's pods, never a status word (issue 41): each pod bound or
# finished takes its GPUs off (fleet.reservations), so it empties itself once every planned
# pod is there. A status says what the workload *is* (a JobSet reads running while some of its
# pods still wait for a node), not which GPUs are still promised. Only a finished workload
# drops what is left at once: its result is known and no pod of it will bind any more.
_FINISHED = frozenset({GenericStatus.COMPLETED, GenericStatus.FAILED})


def _demand(snap: Snapshot) -> dict[str, Any]:
    """``status.demand``/``status.definition`` of the resolution placing read, or {}."""
    resolution = snap.placing.resolution if snap.placing is not None else None
    if not isinstance(resolution, Resolution):
        return {}
    return records.demand_status(demand=resolution.demand,
                                 definition=resolution.definition_name)


async def execute(p: Ports, *, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """Run ``action`` for workload ``uid``."""
    kind = action.kind
    if kind is ActionKind.DELETE_COPY:  # the hub object may be gone already
        assert action.member is not None
        deleted = await p.members.delete_copy(uid, cluster=action.member,
                                      workload=snap.workload or {})
        log.info("copy.deleted", uid=uid, member=action.member, deleted=deleted)
        return later(0.5)
    if kind is ActionKind.RELEASE_FINALIZER:
        return await _release_finalizer(p, uid, snap)
    # these may be about an uncached hub object (row 1a: out of the watched scope)
    if kind is ActionKind.REPORT_NOT_HELD:
        return await _not_held(p, uid, snap, action)
    if kind in (ActionKind.REQUEUE, ActionKind.FAIL):
        if action.rejection is not None:
            return await _rejected(p, uid, snap, action, action.rejection)
        return await _requeue(p, uid, snap, action)
    assert snap.workload is not None
    if kind is ActionKind.CREATE_RECORD:
        assert action.placement is not None
        return await _create_record(p, uid, snap, action.placement)
    if kind is ActionKind.RECORD_PLACEMENT:
        assert action.placement is not None
        return await _record_placement(p, uid, snap, action.placement)
    if kind is ActionKind.RECORD_PENDING:
        assert action.placement is not None
        return await _record_pending(p, uid, snap, action.placement)
    if kind is ActionKind.SUBMIT:
        return await _submit(p, uid, snap, action)
    if kind is ActionKind.ADOPT:
        return await _adopt(p, uid, snap, action)
    if kind is ActionKind.MIRROR:
        return await _mirror(p, uid, snap, action)
    if kind is ActionKind.UPDATE_COPY:
        return await _update_copy(p, uid, snap, action)
    if kind is ActionKind.REPORT_CONFLICT:
        return await _report_conflict(p, uid, snap, action)
    if kind is ActionKind.MARK_UNKNOWN:
        return await _mark_unknown(p, uid, snap, action)
    if kind in (ActionKind.REPORT_STALL, ActionKind.CLEAR_STALL):
        return await _gang_stall(p, uid, snap, action)
    raise AssertionError(f"unhandled action {kind}")


async def _create_record(p: Ports, uid: str, snap: Snapshot, placement: Placement
                         ) -> Outcome:
    """The Dispatch, created with the first decision and its reservation when one member
    was chosen (one write: the record exists before the member is touched), else created
    and then marked Pending."""
    decision = placement.decision
    placed = None
    if decision.chosen is not None:
        placed = records.first_placement(decision=decision, reservation=placement.reservation,
                                         now=snap.now, demand=_demand(snap))
    # a write that raises undoes the placement (``Reconciler``: its reservation released)
    created = await p.hub.create_record(uid, snap.workload or {}, placed=placed)
    if created is not Created.CREATED:
        # nothing of the decision was written: decide again on what is
        if created is Created.BLOCKED:  # a deleted namesake's copy is still going
            log.info("workload.blocked", uid=uid, reason="a deleted namesake's record waits "
                                                       "for its copy to go")
            return replace(later(1.0), release=True)
        return replace(AGAIN, release=True)
    if placed is not None:
        return AGAIN
    return await _record_pending(p, uid, snap, placement)


async def _record_placement(p: Ports, uid: str, snap: Snapshot, placement: Placement
                            ) -> Outcome:
    """The decision and its reservation, written before the member is touched (a
    restarted controller finds it and never places twice)."""
    record = snap.record
    assert record is not None
    await p.hub.patch_record(uid, {**_demand(snap), **records.placed_status(
        decision=placement.decision, reservation=placement.reservation,
        attempt=record.attempt + 1, now=snap.now)})  # raising undoes the placement
    # No Event here: the Submitted one right after carries the decision summary too (one
    # Event per dispatch instead of two halves the Event writes under a burst).
    return AGAIN


async def _record_pending(p: Ports, uid: str, snap: Snapshot, placement: Placement
                          ) -> Outcome:
    """The Pending status with the reason's meaning key and the time of this write; the
    warning Event only when the meaning changed (``control.core.pending``), not when a refresh
    only rewrites its numbers."""
    reason, message = placement.reason, placement.decision.summary
    assert reason is not None
    judged = pending.judge(snap.record, placement, now=snap.now,
                           refresh_s=snap.rules.pending_refresh_s,
                           generation=pending.generation_of(snap.workload))
    await p.hub.patch_record(uid, {**_demand(snap), **records.pending_status(
        message=message, reason=reason, now=snap.now, key=judged.key,
        attempt=snap.record.attempt if snap.record is not None else 0)})
    changed = judged.write is pending.PendingWrite.CHANGED
    log.info("workload.pending", uid=uid, reason=reason.value, message=message,
             refresh=not changed)
    if changed:
        p.hub.event(snap.workload or {}, reason="Pending", message=message, warning=True)
    return DONE


async def _submit(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """The planned copy sent (the record's reservation is held first: ``Action.hold``)."""
    assert action.member is not None and snap.workload is not None
    plan = action.plan
    assert plan is not None, "SUBMIT is planned by the shell (control.planner)"
    sent = plan if isinstance(plan, Rejection) else await p.members.create_copy(plan)
    if isinstance(sent, Rejection):
        # Refused for good: the reservation goes at once; the next ``decide`` answers
        # requeue or fail from the snapshot (the refusal is in it).
        return replace(AGAIN, release=True, refused=sent)
    if sent is Sent.FOREIGN:
        return replace(later(2.0), foreign=action.member)
    return AGAIN if sent is Sent.EXISTS else later(2.0)  # not connected


async def _report_conflict(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    await p.hub.patch_record(uid, {"phase": Phase.CONFLICT.value, "conditions": [
        records.condition(type_="Submitted", status=False, reason="Conflict",
                          message=action.reason, now=snap.now)]})
    log.warning("workload.conflict", uid=uid, member=action.member, reason=action.reason)
    p.hub.event(snap.workload or {}, reason="Conflict", message=action.reason, warning=True)
    return later(30.0)


async def _gang_stall(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """``GangStalled`` True (a warning Event too) or False again once pods bind."""
    stalled = action.kind is ActionKind.REPORT_STALL
    await p.hub.patch_record(uid, {"conditions": [records.condition(
        type_="GangStalled", status=stalled, reason="NoPodBound" if stalled else "PodsBound",
        message=action.reason, now=snap.now)]})
    if stalled:
        log.warning("gang.stalled", uid=uid, member=action.member, reason=action.reason)
        p.hub.event(snap.workload or {}, reason="GangStalled", message=action.reason, warning=True)
    else:
        log.info("gang.moving", uid=uid, member=action.member, reason=action.reason)
    return AGAIN


async def _not_held(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """``Held=False``: the hub object stopped being held and its copy runs on (policy)."""
    await p.hub.patch_record(uid, {"conditions": [records.condition(
        type_="Held", status=False, reason="NotHeld", message=action.reason, now=snap.now)]})
    log.warning("workload.not_held", uid=uid, member=action.member, reason=action.reason)
    p.hub.event(_about(snap), reason="NotHeld", message=action.reason, warning=True)
    return AGAIN


async def _adopt(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    record, copy = snap.record, snap.copy
    assert action.member is not None and record is not None
    adopted = record.phase not in ("", Phase.PLACED)
    workload = snap.workload or {}
    generation = copy.written_generation or int(
        workload.get("metadata", {}).get("generation") or 0)
    status = records.submitted_status(cluster=action.member, remote_uid=copy.uid,
                                      now=snap.now, adopted=adopted, generation=generation)
    # the first decision, if it is only in spec yet (made at create: the same write)
    settled = records.settled_status(record, snap.now)
    status["conditions"] = [*settled.pop("conditions", []), *status["conditions"]]
    status.update(settled)
    # the generic status in the same write (saves a mirror step)
    status.update({"phase": Phase.of_generic(copy.generic).value,
                   "genericStatus": copy.generic, "statuses": list(copy.statuses)})
    if got_going(copy):
        status["remote"]["startedAt"] = records.format_time(snap.now)
    status["remote"]["gangMechanism"] = copy.gang_mechanism  # what the copy was joined to
    await p.hub.patch_record(uid, status)
    created = records.parse_time(workload.get("metadata", {}).get("creationTimestamp"))
    latency = max(snap.now - created, 0.0) if created else None
    if latency is not None and not adopted:
        p.metrics.dispatch_latency.observe(latency)
    p.metrics.dispatches.labels(member=action.member,
                                result="adopted" if adopted else "submitted").inc()
    log.info("workload.submitted", uid=uid, member=action.member, adopted=adopted,
             attempt=record.attempt, latency_s=latency)
    p.hub.event(workload, reason="Submitted",
            message=f"copy {'adopted' if adopted else 'created'} on {action.member}: "
                    f"{record.summary}")
    return AGAIN


async def _update_copy(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """The hub object's spec changed: write it to the copy. Placement is not re-run: a
    resize that no longer fits shows up as a stuck copy."""
    assert action.member is not None and snap.workload is not None
    plan = action.plan
    if isinstance(plan, Rejection):  # nothing to write: said on the record, not retried
        update: CopyUpdate | None = CopyUpdate(
            generation=int(snap.workload["metadata"].get("generation") or 0), changed=(),
            refused=plan.message)
    else:
        update = None if plan is None else await p.members.update_copy(plan)
    if update is None:
        return DONE
    if update.refused is not None:
        # Not written: the copy runs on as it was. The generation counts as handled (the
        # next spec change is checked again), so mirroring goes on meanwhile.
        await p.hub.patch_record(uid, {"remote": {"hubGeneration": update.generation},
                                   "conditions": [records.condition(
                                       type_="Updated", status=False,
                                       reason=PendingReason.POD_TEMPLATE_REFUSED,
                                       message=update.refused, now=snap.now)]})
        log.warning("workload.update_refused", uid=uid, member=action.member,
                    generation=update.generation, message=update.refused)
        p.hub.event(snap.workload, reason="UpdateRefused", warning=True,
                message=f"spec (generation {update.generation}) not written to the copy "
                        f"on {action.member}: {update.refused}")
        return AGAIN
    await p.hub.patch_record(uid, {"remote": {"hubGeneration": update.generation},
                               "conditions": [records.condition(
                                   type_="Updated", status=True, reason="Written",
                                   message=f"generation {update.generation} written to the "
                                           f"copy on {action.member}", now=snap.now)]})
    log.info("workload.updated", uid=uid, member=action.member,
             generation=update.generation, changed=list(update.changed))
    p.hub.event(snap.workload, reason="Updated",
            message=f"spec (generation {update.generation}) written to the copy on "
                    f"{action.member}")
    return AGAIN


async def _mirror(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    record, copy, workload = snap.record, snap.copy, snap.workload
    assert action.member is not None and record is not None and workload is not None
    diff = merge_diff(dict(workload.get("status") or {}), dict(copy.status or {}))
    refused: KubeError | None = None
    if diff:
        try:
            if not await p.hub.mirror_status(uid, diff):
                return DONE
        except KubeError as exc:
            if not exc.permanent:
                raise
            refused = exc  # as final as a member's 4xx: said once, not retried
    mirrored_at = copy.resource_version  # the hub holds this version's status now
    release = False
    generic = copy.generic
    phase = Phase.of_generic(generic).value
    mirrored = _mirrored_condition(refused, record.mirror_refused, now=snap.now,
                                   member=action.member)
    said = admission_said(copy, action.member)
    if said is not None and said != record.admission:
        assert copy.admission is not None
        mirrored = [*mirrored, records.condition(
            type_="MemberAdmitted", status=copy.admission.admitted, reason=said[0],
            message=said[1], now=snap.now)]
        p.hub.event(workload, reason=f"Member{said[0]}", message=said[1],
                    warning=said[0] == EVICTED)
    if generic != record.generic_status or phase != record.phase or mirrored:
        patch: dict[str, Any] = {
            "phase": phase, "genericStatus": generic, "statuses": list(copy.statuses),
            "remote": {"lastSeen": records.format_time(snap.now)}}
        if mirrored:
            patch["conditions"] = mirrored
        if record.started_at is None and got_going(copy):
            patch["remote"]["startedAt"] = records.format_time(snap.now)
        if generic in _FINISHED and record.reservation is not None:
            # Finished: no pod of it binds any more; a pod never seen bound (one that ran
            # and ended between two pod events) would keep its GPUs promised until expiry.
            release = True
            patch["decision"] = {"reservation": None}
        await p.hub.patch_record(uid, patch)
        if phase != record.phase:
            p.hub.event(workload, reason=phase, message=f"{generic} on {action.member}",
                        warning=generic == GenericStatus.FAILED)
        if generic in _FINISHED and generic != record.generic_status:
            log.info(EVENT_FINISHED, uid=uid, status=generic, member=action.member)
    lag = p.monotonic() - copy.seen_at
    p.metrics.mirror_lag.observe(max(lag, 0.0))
    log.info("status.mirrored", uid=uid, member=action.member, status=generic,
             lag_ms=round(lag * 1000, 1))
    return replace(DONE, mirrored=mirrored_at, release=release)


def _mirrored_condition(refused: KubeError | None, was_refused: bool, *, now: float,
                        member: str) -> list[dict[str, Any]]:
    """The ``StatusMirrored`` condition to write: False with the hub's message when the
    hub refused the status, True again once a mirror passes after a refusal."""
    if refused is not None:
        log.warning("status.refused", member=member, status_code=refused.status,
                    message=refused.detail[:500])
        return [records.condition(
            type_="StatusMirrored", status=False, reason="HubRefused",
            message=f"the hub refused the status from {member} (HTTP {refused.status}): "
                    f"{refused.detail}; the generic status here stays current, and the "
                    f"status is written again when the copy's changes", now=now)]
    if was_refused:
        return [records.condition(type_="StatusMirrored", status=True, reason="Mirrored",
                                  message=f"status from {member} mirrored", now=now)]
    return []


async def _mark_unknown(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    lost = snap.health.lost_since or snap.now
    await p.hub.patch_record(uid, {
        "phase": Phase.UNKNOWN.value,
        "remote": {"lastSeen": records.format_time(lost)},
        "conditions": [records.condition(type_="MemberReachable", status=False,
                                         reason="MemberLost", message=action.reason,
                                         now=snap.now)]})
    log.warning("member.lost", uid=uid, member=action.member,
                last_seen=records.format_time(lost), policy=snap.rules.policy)
    p.hub.event(snap.workload or {}, reason="Unknown", message=action.reason, warning=True)
    return DONE if action.recheck_after is None else later(action.recheck_after)


async def _rejected(p: Ports, uid: str, snap: Snapshot, action: Action,
                    rejection: Rejection) -> Outcome:
    """The member refused the copy (``decide`` chose requeue or fail): the workload goes
    back to Pending without that member, or fails when no member is left."""
    record = snap.record
    assert record is not None
    rejected = records.condition(type_="Submitted", status=False, reason="Rejected",
                                 message=f"{rejection.member}: {rejection.describe()}",
                                 now=snap.now)
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(p, uid, snap, action, outcome="rejected", extra=[rejected])
    p.metrics.rejections.labels(member=rejection.member, code=str(rejection.status)).inc()
    log.warning("workload.rejected", member=rejection.member, status_code=rejection.status,
                reason=rejection.reason, message=rejection.message,
                outcome="failed" if fail else "requeued", attempt=record.attempt)
    p.hub.event(snap.workload or {}, reason="Rejected", message=action.reason, warning=True)
    return replace(DONE if fail else AGAIN, answered=True)


async def _write_retreat(p: Ports, uid: str, snap: Snapshot, action: Action, *,
                         outcome: str, extra: list[dict[str, Any]] | None = None) -> None:
    """Write the record of giving up on the current member: requeued (back to Pending,
    member excluded) or failed (terminal), with the attempt in the history."""
    record = snap.record
    assert record is not None
    fail = action.kind is ActionKind.FAIL
    status = (records.failed_status(record=record, reason=action.reason, now=snap.now) if fail
              else records.requeued_status(record=record, reason=action.reason,
                                           outcome=outcome, now=snap.now))
    if extra:
        status["conditions"] = [*status["conditions"], *extra]
    await p.hub.patch_record(uid, status)  # (answered: a refusal from that member is moot)
    p.metrics.dispatches.labels(member=action.member or "",
                                result="failed" if fail else outcome).inc()


async def _requeue(p: Ports, uid: str, snap: Snapshot, action: Action) -> Outcome:
    record = snap.record
    assert record is not None
    member = action.member
    if member is not None and snap.health.reachable:
        await p.members.delete_copy(uid, cluster=member, workload=snap.workload or {})
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(p, uid, snap, action, outcome="requeued")
    log.warning("workload.failed" if fail else "workload.requeued", uid=uid, member=member,
                reason=action.reason, attempt=record.attempt)
    p.hub.event(_about(snap), reason="Failed" if fail else "Requeued",
                message=action.reason, warning=True)
    return replace(DONE if fail else AGAIN, release=True, answered=True)


def _about(snap: Snapshot) -> Mapping[str, Any]:
    """The hub object an Event is about: the cached one, else what its record names (an
    uncached one out of the watched scope)."""
    if snap.workload is not None or snap.record is None:
        return snap.workload or {}
    api_version, kind, name = snap.record.workload_ref
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": snap.record.namespace,
                         "uid": snap.record.workload_uid}}


async def _release_finalizer(p: Ports, uid: str, snap: Snapshot) -> Outcome:
    # The end of the workload's life here (its copy, if any, is gone): one line, in the
    # trace format ``dispatcher simulate --trace`` replays.
    if snap.workload is not None:
        meta = snap.workload["metadata"]
        namespace, name = meta.get("namespace"), meta.get("name")
    else:
        assert snap.record is not None
        namespace, name = snap.record.namespace, snap.record.workload_ref[2]
    log.info(EVENT_DELETED, uid=uid, namespace=namespace, name=name)
    released = await p.hub.remove_finalizer(uid, snap.workload)
    return replace(DONE if released else AGAIN, forget=True)
