"""Executing one ``decide`` action: the writes, log lines, metrics and Events of each step.

Called by ``Reconciler.reconcile`` with a ``Writer`` (``control.writer``): each function
writes what its action needs and answers with an ``Outcome`` (decide again now, look again
later, or done). Log lines carry stable event names (``observe.EVENTS``); the workload's
names are bound to every line by the reconciler.
"""

from __future__ import annotations

from typing import Any

import structlog

from dispatcher.control import pending
from dispatcher.control import record as records
from dispatcher.control.copies import Rejection
from dispatcher.control.decide import Action, ActionKind, Snapshot
from dispatcher.control.names import PendingReason, Phase
from dispatcher.control.placing import Placement
from dispatcher.control.writer import AGAIN, DONE, CopyUpdate, Created, Outcome, Writer, later
from dispatcher.kube.errors import KubeError
from dispatcher.kube.patches import merge_diff
from dispatcher.workloads.model import GenericStatus
from dispatcher.workloads.trace import EVENT_DELETED, EVENT_FINISHED

__all__ = ["execute"]

log = structlog.get_logger("dispatcher")

# Generic statuses that mean all the workload's pods are on nodes (or have finished): the
# backstop that drops what is left of its reservation. Bound pods shrink a reservation as the
# member's pod informer sees them (fleet.reservations), so what is left here is pods never
# seen bound. Not "degraded": some pods are missing, and their GPUs stay reserved until they
# bind or the reservation expires (releasing them would forget GPUs a pending pod will take).
_PODS_UP = frozenset({GenericStatus.RUNNING, GenericStatus.COMPLETED, GenericStatus.FAILED})
_FINISHED = frozenset({GenericStatus.COMPLETED, GenericStatus.FAILED})
# Once seen in one of these, the copy got going: stuck detection no longer applies.
_UP = _PODS_UP | {GenericStatus.DEGRADED}


async def execute(w: Writer, *, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """Run ``action`` for workload ``uid``."""
    kind = action.kind
    if kind is ActionKind.DELETE_COPY:  # the hub object may be gone already
        assert action.member is not None
        deleted = await w.delete_copy(uid, cluster=action.member,
                                      workload=snap.workload or {})
        log.info("copy.deleted", uid=uid, member=action.member, deleted=deleted)
        return later(0.5)
    if kind is ActionKind.RELEASE_FINALIZER:
        return await _release_finalizer(w, uid, snap)
    assert snap.workload is not None
    if kind is ActionKind.CREATE_RECORD:
        assert action.placement is not None
        return await _create_record(w, uid, snap, action.placement)
    if kind is ActionKind.RECORD_PLACEMENT:
        assert action.placement is not None
        return await _record_placement(w, uid, snap, action.placement)
    if kind is ActionKind.RECORD_PENDING:
        assert action.placement is not None
        return await _record_pending(w, uid, snap, action.placement)
    if kind is ActionKind.SUBMIT:
        return await _submit(w, uid, snap, action)
    if kind is ActionKind.ADOPT:
        return await _adopt(w, uid, snap, action)
    if kind is ActionKind.MIRROR:
        return await _mirror(w, uid, snap, action)
    if kind is ActionKind.UPDATE_COPY:
        return await _update_copy(w, uid, snap, action)
    if kind is ActionKind.REPORT_CONFLICT:
        return await _report_conflict(w, uid, snap, action)
    if kind is ActionKind.MARK_UNKNOWN:
        return await _mark_unknown(w, uid, snap, action)
    if kind in (ActionKind.REPORT_STALL, ActionKind.CLEAR_STALL):
        return await _gang_stall(w, uid, snap, action)
    if kind is ActionKind.REPORT_NOT_HELD:
        return await _not_held(w, uid, snap, action)
    if kind in (ActionKind.REQUEUE, ActionKind.FAIL):
        if action.rejection is not None:
            return await _rejected(w, uid, snap, action, action.rejection)
        return await _requeue(w, uid, snap, action)
    raise AssertionError(f"unhandled action {kind}")


async def _create_record(w: Writer, uid: str, snap: Snapshot, placement: Placement
                         ) -> Outcome:
    """The Dispatch, created with the first decision and its reservation when one member
    was chosen (one write: the record exists before the member is touched), else created
    and then marked Pending."""
    decision = placement.decision
    placed = None
    if decision.chosen is not None:
        placed = records.first_placement(decision=decision, reservation=placement.reservation,
                                         now=snap.now, demand=w.demand_patch(uid))
    try:
        created = await w.create_record(uid, snap.workload or {}, placed=placed)
    except BaseException:
        if placed is not None:
            w.release(uid)
        raise
    if created is not Created.CREATED:
        w.release(uid)  # nothing of the decision was written: decide again on what is
        if created is Created.BLOCKED:  # a deleted namesake's copy is still going
            log.info("workload.blocked", uid=uid, reason="a deleted namesake's record waits "
                                                       "for its copy to go")
            return later(1.0)
        return AGAIN
    if placed is not None:
        return AGAIN
    return await _record_pending(w, uid, snap, placement)


async def _record_placement(w: Writer, uid: str, snap: Snapshot, placement: Placement
                            ) -> Outcome:
    """The decision and its reservation, written before the member is touched (a
    restarted controller finds it and never places twice)."""
    record = snap.record
    assert record is not None
    try:
        await w.patch_record(uid, {**w.demand_patch(uid), **records.placed_status(
            decision=placement.decision, reservation=placement.reservation,
            attempt=record.attempt + 1, now=snap.now)})
    except BaseException:
        w.release(uid)
        raise
    # No Event here: the Submitted one right after carries the decision summary too (one
    # Event per dispatch instead of two halves the Event writes under a burst).
    return AGAIN


async def _record_pending(w: Writer, uid: str, snap: Snapshot, placement: Placement
                          ) -> Outcome:
    """The Pending status with the reason's meaning key and the time of this write; the
    warning Event only when the meaning changed (``control.pending``), not when a refresh
    only rewrites its numbers."""
    reason, message = placement.reason, placement.decision.summary
    assert reason is not None
    judged = pending.judge(snap.record, placement, now=snap.now,
                           refresh_s=snap.rules.pending_refresh_s,
                           generation=pending.generation_of(snap.workload))
    await w.patch_record(uid, {**w.demand_patch(uid), **records.pending_status(
        message=message, reason=reason, now=snap.now, key=judged.key,
        attempt=snap.record.attempt if snap.record is not None else 0)})
    changed = judged.write is pending.PendingWrite.CHANGED
    log.info("workload.pending", uid=uid, reason=reason.value, message=message,
             refresh=not changed)
    if changed:
        w.event(snap.workload or {}, reason="Pending", message=message, warning=True)
    return DONE


async def _submit(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    assert action.member is not None and snap.workload is not None
    if snap.record is not None and snap.record.reservation is not None:
        # The record's reservation is the one in force (it may not be in the book: a
        # record found on a create conflict, a create whose answer was lost).
        w.hold(snap.record.reservation)
    plan = action.plan
    assert plan is not None, "SUBMIT is planned by the shell (control.planner)"
    outcome = plan if isinstance(plan, Rejection) else await w.create_copy(plan)
    if isinstance(outcome, Rejection):
        # Refused for good: the reservation goes at once; the next ``decide`` answers
        # requeue or fail from the snapshot (the refusal is in it).
        w.release(uid)
        w.memory.refused(uid, outcome)
        return AGAIN
    return AGAIN if outcome else later(2.0)  # not connected, or a foreign object


async def _report_conflict(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    await w.patch_record(uid, {"phase": Phase.CONFLICT.value, "conditions": [
        records.condition(type_="Submitted", status=False, reason="Conflict",
                          message=action.reason, now=snap.now)]})
    log.warning("workload.conflict", uid=uid, member=action.member, reason=action.reason)
    w.event(snap.workload or {}, reason="Conflict", message=action.reason, warning=True)
    return later(30.0)


async def _gang_stall(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """``GangStalled`` True (a warning Event too) or False again once pods bind."""
    stalled = action.kind is ActionKind.REPORT_STALL
    await w.patch_record(uid, {"conditions": [records.condition(
        type_="GangStalled", status=stalled, reason="NoPodBound" if stalled else "PodsBound",
        message=action.reason, now=snap.now)]})
    if stalled:
        log.warning("gang.stalled", uid=uid, member=action.member, reason=action.reason)
        w.event(snap.workload or {}, reason="GangStalled", message=action.reason, warning=True)
    else:
        log.info("gang.moving", uid=uid, member=action.member, reason=action.reason)
    return AGAIN


async def _not_held(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """``Held=False``: the hub object stopped being held and its copy runs on (policy)."""
    await w.patch_record(uid, {"conditions": [records.condition(
        type_="Held", status=False, reason="NotHeld", message=action.reason, now=snap.now)]})
    log.warning("workload.not_held", uid=uid, member=action.member, reason=action.reason)
    w.event(snap.workload or {}, reason="NotHeld", message=action.reason, warning=True)
    return AGAIN


async def _adopt(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
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
    if copy.generic in _UP:
        status["remote"]["startedAt"] = records.format_time(snap.now)
    status["remote"]["gangMechanism"] = copy.gang_mechanism  # what the copy was joined to
    await w.patch_record(uid, status)
    created = records.parse_time(workload.get("metadata", {}).get("creationTimestamp"))
    latency = max(snap.now - created, 0.0) if created else None
    if latency is not None and not adopted:
        w.metrics.dispatch_latency.observe(latency)
    w.metrics.dispatches.labels(member=action.member,
                                result="adopted" if adopted else "submitted").inc()
    log.info("workload.submitted", uid=uid, member=action.member, adopted=adopted,
             attempt=record.attempt, latency_s=latency)
    w.event(workload, reason="Submitted",
            message=f"copy {'adopted' if adopted else 'created'} on {action.member}: "
                    f"{record.summary}")
    return AGAIN


async def _update_copy(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    """The hub object's spec changed: write it to the copy. Placement is not re-run: a
    resize that no longer fits shows up as a stuck copy."""
    assert action.member is not None and snap.workload is not None
    plan = action.plan
    if isinstance(plan, Rejection):  # nothing to write: said on the record, not retried
        update: CopyUpdate | None = CopyUpdate(
            generation=int(snap.workload["metadata"].get("generation") or 0), changed=(),
            refused=plan.message)
    else:
        update = None if plan is None else await w.update_copy(plan)
    if update is None:
        return DONE
    if update.refused is not None:
        # Not written: the copy runs on as it was. The generation counts as handled (the
        # next spec change is checked again), so mirroring goes on meanwhile.
        await w.patch_record(uid, {"remote": {"hubGeneration": update.generation},
                                   "conditions": [records.condition(
                                       type_="Updated", status=False,
                                       reason=PendingReason.POD_TEMPLATE_REFUSED,
                                       message=update.refused, now=snap.now)]})
        log.warning("workload.update_refused", uid=uid, member=action.member,
                    generation=update.generation, message=update.refused)
        w.event(snap.workload, reason="UpdateRefused", warning=True,
                message=f"spec (generation {update.generation}) not written to the copy "
                        f"on {action.member}: {update.refused}")
        return AGAIN
    await w.patch_record(uid, {"remote": {"hubGeneration": update.generation},
                               "conditions": [records.condition(
                                   type_="Updated", status=True, reason="Written",
                                   message=f"generation {update.generation} written to the "
                                           f"copy on {action.member}", now=snap.now)]})
    log.info("workload.updated", uid=uid, member=action.member,
             generation=update.generation, changed=list(update.changed))
    w.event(snap.workload, reason="Updated",
            message=f"spec (generation {update.generation}) written to the copy on "
                    f"{action.member}")
    return AGAIN


async def _mirror(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    record, copy, workload = snap.record, snap.copy, snap.workload
    assert action.member is not None and record is not None and workload is not None
    diff = merge_diff(dict(workload.get("status") or {}), dict(copy.status or {}))
    refused: KubeError | None = None
    if diff:
        try:
            if not await w.mirror_status(uid, diff):
                return DONE
        except KubeError as exc:
            if not exc.permanent:
                raise
            refused = exc  # as final as a member's 4xx: said once, not retried
    w.memory.mirrored(uid, copy.resource_version)
    generic = copy.generic
    phase = Phase.of_generic(generic).value
    mirrored = _mirrored_condition(refused, record.mirror_refused, now=snap.now,
                                   member=action.member)
    if generic != record.generic_status or phase != record.phase or mirrored:
        patch: dict[str, Any] = {
            "phase": phase, "genericStatus": generic, "statuses": list(copy.statuses),
            "remote": {"lastSeen": records.format_time(snap.now)}}
        if mirrored:
            patch["conditions"] = mirrored
        if generic in _UP and record.started_at is None:
            patch["remote"]["startedAt"] = records.format_time(snap.now)
        if generic in _PODS_UP and record.reservation is not None:
            # Its pods hold the GPUs now (the member's capacity counts them); any part of
            # the reservation their pod events did not take off would count twice.
            w.release(uid)
            patch["decision"] = {"reservation": None}
        await w.patch_record(uid, patch)
        if phase != record.phase:
            w.event(workload, reason=phase, message=f"{generic} on {action.member}",
                    warning=generic == GenericStatus.FAILED)
        if generic in _FINISHED and generic != record.generic_status:
            log.info(EVENT_FINISHED, uid=uid, status=generic, member=action.member)
    lag = w.elapsed(copy.seen_at)
    w.metrics.mirror_lag.observe(max(lag, 0.0))
    log.info("status.mirrored", uid=uid, member=action.member, status=generic,
             lag_ms=round(lag * 1000, 1))
    return DONE


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


async def _mark_unknown(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    lost = snap.health.lost_since or snap.now
    await w.patch_record(uid, {
        "phase": Phase.UNKNOWN.value,
        "remote": {"lastSeen": records.format_time(lost)},
        "conditions": [records.condition(type_="MemberReachable", status=False,
                                         reason="MemberLost", message=action.reason,
                                         now=snap.now)]})
    log.warning("member.lost", uid=uid, member=action.member,
                last_seen=records.format_time(lost), policy=snap.rules.policy)
    w.event(snap.workload or {}, reason="Unknown", message=action.reason, warning=True)
    return DONE if action.recheck_after is None else later(action.recheck_after)


async def _rejected(w: Writer, uid: str, snap: Snapshot, action: Action,
                    rejection: Rejection) -> Outcome:
    """The member refused the copy (``decide`` chose requeue or fail): the workload goes
    back to Pending without that member, or fails when no member is left."""
    record = snap.record
    assert record is not None
    rejected = records.condition(type_="Submitted", status=False, reason="Rejected",
                                 message=f"{rejection.member}: {rejection.describe()}",
                                 now=snap.now)
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(w, uid, snap, action, outcome="rejected", extra=[rejected])
    w.metrics.rejections.labels(member=rejection.member, code=str(rejection.status)).inc()
    log.warning("workload.rejected", member=rejection.member, status_code=rejection.status,
                reason=rejection.reason, message=rejection.message,
                outcome="failed" if fail else "requeued", attempt=record.attempt)
    w.event(snap.workload or {}, reason="Rejected", message=action.reason, warning=True)
    return DONE if fail else AGAIN


async def _write_retreat(w: Writer, uid: str, snap: Snapshot, action: Action, *,
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
    await w.patch_record(uid, status)
    w.memory.answered(uid)  # whatever made it retreat, a refusal from that member is moot
    w.metrics.dispatches.labels(member=action.member or "",
                                result="failed" if fail else outcome).inc()


async def _requeue(w: Writer, uid: str, snap: Snapshot, action: Action) -> Outcome:
    record = snap.record
    assert record is not None
    w.release(uid)
    member = action.member
    if member is not None and snap.health.reachable:
        await w.delete_copy(uid, cluster=member, workload=snap.workload or {})
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(w, uid, snap, action, outcome="requeued")
    log.warning("workload.failed" if fail else "workload.requeued", uid=uid, member=member,
                reason=action.reason, attempt=record.attempt)
    w.event(snap.workload or {}, reason="Failed" if fail else "Requeued",
            message=action.reason, warning=True)
    return DONE if fail else AGAIN


async def _release_finalizer(w: Writer, uid: str, snap: Snapshot) -> Outcome:
    w.forget(uid)
    # The end of the workload's life here (its copy, if any, is gone): one line, in the
    # trace format ``dispatcher simulate --trace`` replays.
    if snap.workload is not None:
        meta = snap.workload["metadata"]
        namespace, name = meta.get("namespace"), meta.get("name")
    else:
        assert snap.record is not None
        namespace, name = snap.record.namespace, snap.record.workload_ref[2]
    log.info(EVENT_DELETED, uid=uid, namespace=namespace, name=name)
    return DONE if await w.remove_finalizer(uid, snap.workload) else AGAIN
