"""Executing one ``decide`` action: the writes, log lines, metrics and Events of each step.

Called by ``Reconciler.reconcile``; each function writes what its action needs (through the
reconciler's helpers, which update the caches) and returns whether the loop should decide
again at once. Log lines carry stable event names (``observe.EVENTS``) and the workload uid.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from dispatcher.control import parking
from dispatcher.control import record as records
from dispatcher.control.copies import Rejection, written_generation
from dispatcher.control.decide import Action, ActionKind, Snapshot, after_rejection
from dispatcher.control.names import FINALIZER, HUB_GENERATION_ANNOTATION, Phase
from dispatcher.kube.client import JSON_MERGE_PATCH
from dispatcher.kube.errors import Conflict, NotFound
from dispatcher.kube.patches import merge_diff
from dispatcher.kube.resources import DISPATCHES
from dispatcher.placement.model import Decision
from dispatcher.workloads.trace import EVENT_DELETED, EVENT_FINISHED

if TYPE_CHECKING:
    from dispatcher.control.reconcile import Reconciler

__all__ = ["execute"]

log = structlog.get_logger("dispatcher")

# Generic statuses that mean all the workload's pods are on nodes (or have finished): the
# backstop that drops what is left of its reservation. Bound pods shrink a reservation as the
# member's pod informer sees them (fleet.reservations), so what is left here is pods never
# seen bound. Not "degraded": some pods are missing, and their GPUs stay reserved until they
# bind or the reservation expires (releasing them would forget GPUs a pending pod will take).
_PODS_UP = frozenset({"running", "completed", "failed"})


async def execute(rec: Reconciler, *, uid: str, snap: Snapshot, action: Action,
                  decision: Decision | None) -> bool:
    """Run ``action`` for workload ``uid``; True to decide again right away."""
    workload = snap.workload
    assert workload is not None
    kind = action.kind
    if kind is ActionKind.ADD_FINALIZER:
        return await _add_finalizer(rec, uid, workload)
    if kind is ActionKind.CREATE_RECORD:
        return await _create_record(rec, uid, workload)
    if kind is ActionKind.RECORD_PLACEMENT:
        assert decision is not None
        return await _record_placement(rec, uid, snap, decision)
    if kind is ActionKind.RECORD_PENDING:
        return await _record_pending(rec, uid, snap, action)
    if kind is ActionKind.SUBMIT:
        assert action.member is not None
        outcome = await rec.create_copy(uid, cluster=action.member, workload=workload)
        if isinstance(outcome, Rejection):
            return await _rejected(rec, uid, snap, outcome)
        if outcome:
            return True
        if rec.workers is not None:  # not connected, or a foreign object: look again
            rec.workers.later(uid, 2.0)
        return False
    if kind is ActionKind.ADOPT:
        return await _adopt(rec, uid, snap, action)
    if kind is ActionKind.MIRROR:
        return await _mirror(rec, uid, snap, action)
    if kind is ActionKind.UPDATE_COPY:
        return await _update_copy(rec, uid, snap, action)
    if kind is ActionKind.REPORT_CONFLICT:
        await rec.patch_record(uid, {"phase": Phase.CONFLICT.value, "conditions": [
            records.condition(type_="Submitted", status=False, reason="Conflict",
                              message=action.reason, now=snap.now)]})
        log.warning("workload.conflict", uid=uid, member=action.member, reason=action.reason)
        rec.event(workload, reason="Conflict", message=action.reason, warning=True)
        if rec.workers is not None:
            rec.workers.later(uid, 30.0)
        return False
    if kind is ActionKind.MARK_UNKNOWN:
        return await _mark_unknown(rec, uid, snap, action)
    if kind in (ActionKind.REQUEUE, ActionKind.FAIL):
        return await _requeue(rec, uid, snap, action)
    if kind is ActionKind.DELETE_COPY:
        assert action.member is not None
        deleted = await rec.delete_copy(uid, cluster=action.member, workload=workload)
        log.info("copy.deleted", uid=uid, member=action.member, deleted=deleted)
        if rec.workers is not None:
            rec.workers.later(uid, 0.5)
        return False
    if kind is ActionKind.RELEASE_FINALIZER:
        return await _release_finalizer(rec, uid, workload)
    raise AssertionError(f"unhandled action {kind}")


async def _add_finalizer(rec: Reconciler, uid: str, workload: Mapping[str, Any]) -> bool:
    item = rec.cache.workload(uid)
    assert item is not None
    meta = workload["metadata"]
    finalizers = [*(meta.get("finalizers") or ()), FINALIZER]
    try:
        await rec.patch_workload(item, {"metadata": {
            "finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}})
    except Conflict:
        fresh = await rec.hub.request("GET", item.ref.item(meta["name"], meta.get("namespace")))
        rec.cache.put(item.ref, fresh, force=True)
    return True


async def _create_record(rec: Reconciler, uid: str, workload: Mapping[str, Any]) -> bool:
    name = records.dispatch_name(workload)
    namespace = str(workload["metadata"].get("namespace") or "default")
    body = records.dispatch_body(workload=workload, name=name)
    try:
        created = await rec.hub.request("POST", DISPATCHES.collection(namespace), body=body)
    except Conflict:
        existing = await rec.hub.request("GET", DISPATCHES.item(name, namespace))
        owner = ((existing.get("spec") or {}).get("workload") or {}).get("uid")
        if owner == uid:
            rec.cache.put_record(existing, force=True)
            return True
        # A record of an earlier object with the same name: its owner is gone.
        with contextlib.suppress(NotFound, Conflict):
            await rec.hub.request("DELETE", DISPATCHES.item(name, namespace), body={
                "apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": existing["metadata"]["uid"]}})
        return True
    rec.cache.put_record(created, force=True)
    return True


async def _record_placement(rec: Reconciler, uid: str, snap: Snapshot,
                            decision: Decision) -> bool:
    record = snap.record
    assert record is not None and decision.chosen is not None
    reservations = rec.fleet.reservations(decision.chosen)
    reservation = reservations.get(uid) if reservations is not None else None
    try:
        await rec.patch_record(uid, {**rec.demand_patch(uid), **records.placed_status(
            decision=decision, reservation=reservation, attempt=record.attempt + 1,
            now=snap.now)})
    except BaseException:
        rec.release(uid)
        raise
    # No Event here: the Submitted one right after carries the decision summary too (one
    # Event per dispatch instead of two halves the Event writes under a burst).
    return True


async def _record_pending(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    reason = parking.pending_reason(action.reason)
    await rec.patch_record(uid, {**rec.demand_patch(uid), **records.pending_status(
        message=action.reason, reason=reason, now=snap.now)})
    rec.metrics.pending.set(len(rec.queue))
    log.info("workload.pending", uid=uid, reason=reason, message=action.reason)
    rec.event(snap.workload or {}, reason="Pending", message=action.reason, warning=True)
    return False


async def _adopt(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    assert action.member is not None and snap.record is not None
    adopted = snap.record.phase not in ("", Phase.PLACED)
    found = rec.copies.get(action.member, uid)
    generation = (written_generation(found.obj) if found is not None else 0) or int(
        (snap.workload or {}).get("metadata", {}).get("generation") or 0)
    status = records.submitted_status(cluster=action.member, remote_uid=snap.copy.uid,
                                      now=snap.now, adopted=adopted, generation=generation)
    if found is not None:  # the generic status in the same write (saves a mirror step)
        status.update({"phase": rec.phase_for(found.generic), "genericStatus": found.generic,
                       "statuses": list(found.statuses)})
    await rec.patch_record(uid, status)
    workload = snap.workload or {}
    created = records.parse_time(workload.get("metadata", {}).get("creationTimestamp"))
    latency = max(snap.now - created, 0.0) if created else None
    if latency is not None and not adopted:
        rec.metrics.dispatch_latency.observe(latency)
    rec.metrics.dispatches.labels(member=action.member,
                                  result="adopted" if adopted else "submitted").inc()
    log.info("workload.submitted", uid=uid, member=action.member, adopted=adopted,
             attempt=snap.record.attempt, latency_s=latency)
    summary = ((rec.cache.record(uid) or {}).get("status") or {}).get("decision", {})
    rec.event(workload, reason="Submitted",
              message=f"copy {'adopted' if adopted else 'created'} on {action.member}: "
                      f"{(summary or {}).get('summary', '')}")
    return True


async def _update_copy(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    """The hub object's spec changed: write it to the copy (spec only; the member's own
    metadata and status stay). Placement is not re-run: a resize that no longer fits shows
    up as a stuck copy."""
    assert action.member is not None and snap.workload is not None
    found = rec.copies.get(action.member, uid)
    client = rec.fleet.client(action.member)
    if found is None or client is None:
        return False
    wanted = await rec.copy_body(snap.workload)
    patch: dict[str, Any] = {}
    spec = merge_diff(dict(found.obj.get("spec") or {}), dict(wanted.get("spec") or {}))
    if spec:
        patch["spec"] = spec
    generation = written_generation(wanted)
    patch["metadata"] = {"annotations": {HUB_GENERATION_ANNOTATION: str(generation)}}
    meta = found.obj["metadata"]
    ref = await client.discovery.resource(str(found.obj["apiVersion"]),
                                          str(found.obj["kind"]))
    if ref is None:
        return False
    updated = await client.request("PATCH", ref.item(meta["name"], meta.get("namespace")),
                                   body=patch, content_type=JSON_MERGE_PATCH)
    rec.copies.put(action.member, uid, await rec.cached_copy(updated))
    await rec.patch_record(uid, {"remote": {"hubGeneration": generation}})
    log.info("workload.updated", uid=uid, member=action.member, generation=generation,
             changed=sorted(spec))
    rec.event(snap.workload, reason="Updated",
              message=f"spec (generation {generation}) written to the copy on {action.member}")
    return True


async def _mirror(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    assert action.member is not None and snap.record is not None
    item = rec.cache.workload(uid)
    found = rec.copies.get(action.member, uid)
    if item is None or found is None:
        return False
    copy_status = dict(snap.copy.status or {})
    diff = merge_diff(dict(item.obj.get("status") or {}), copy_status)
    if diff:
        try:
            await rec.patch_workload(item, {"status": diff}, subresource="status")
        except NotFound:
            return False
    rec.remember_mirrored(uid, str(found.obj["metadata"].get("resourceVersion", "")))
    generic = found.generic
    phase = rec.phase_for(generic)
    if generic != snap.record.generic_status or phase != snap.record.phase:
        patch: dict[str, Any] = {
            "phase": phase, "genericStatus": generic, "statuses": list(found.statuses),
            "remote": {"lastSeen": records.format_time(snap.now)}}
        if generic in _PODS_UP and snap.record.reservation is not None:
            # Its pods hold the GPUs now (the member's capacity counts them); any part of
            # the reservation their pod events did not take off would count twice.
            rec.release(uid)
            patch["decision"] = {"reservation": None}
        await rec.patch_record(uid, patch)
        if phase != snap.record.phase:
            rec.event(item.obj, reason=phase, message=f"{generic} on {action.member}",
                      warning=generic == "failed")
        if generic in ("completed", "failed") and generic != snap.record.generic_status:
            log.info(EVENT_FINISHED, uid=uid, status=generic, member=action.member)
    lag = rec.monotonic() - found.seen_at
    rec.metrics.mirror_lag.observe(max(lag, 0.0))
    log.info("status.mirrored", uid=uid, member=action.member, status=generic,
             lag_ms=round(lag * 1000, 1))
    return False


async def _mark_unknown(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    lost = snap.health.lost_since or snap.now
    await rec.patch_record(uid, {
        "phase": Phase.UNKNOWN.value,
        "remote": {"lastSeen": records.format_time(lost)},
        "conditions": [records.condition(type_="MemberReachable", status=False,
                                         reason="MemberLost", message=action.reason,
                                         now=snap.now)]})
    log.warning("member.lost", uid=uid, member=action.member,
                last_seen=records.format_time(lost),
                policy=rec.settings.rules.policy)
    rec.event(snap.workload or {}, reason="Unknown", message=action.reason, warning=True)
    if action.recheck_after is not None and rec.workers is not None:
        rec.workers.later(uid, max(action.recheck_after, 0.05))
    return False


async def _rejected(rec: Reconciler, uid: str, snap: Snapshot, rejection: Rejection) -> bool:
    """The member refused the copy: no retry there. The reservation goes at once; the
    workload goes back to Pending without that member, or fails when no member is left."""
    record = snap.record
    assert record is not None
    rec.release(uid)
    action = after_rejection(record, rec.settings.rules, member=rejection.member,
                             message=rejection.describe(),
                             alternatives=await rec.alternatives(
                                 uid, snap, without=rejection.member))
    rejected = records.condition(type_="Submitted", status=False, reason="Rejected",
                                 message=f"{rejection.member}: {rejection.describe()}",
                                 now=snap.now)
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(rec, uid, snap, action, outcome="rejected", extra=[rejected])
    rec.metrics.rejections.labels(member=rejection.member, code=str(rejection.status)).inc()
    log.warning("workload.rejected", member=rejection.member, status_code=rejection.status,
                reason=rejection.reason, message=rejection.message,
                outcome="failed" if fail else "requeued", attempt=record.attempt)
    rec.event(snap.workload or {}, reason="Rejected", message=action.reason, warning=True)
    return not fail


async def _write_retreat(rec: Reconciler, uid: str, snap: Snapshot, action: Action, *,
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
    await rec.patch_record(uid, status)
    rec.metrics.dispatches.labels(member=action.member or "",
                                  result="failed" if fail else outcome).inc()


async def _requeue(rec: Reconciler, uid: str, snap: Snapshot, action: Action) -> bool:
    record = snap.record
    assert record is not None
    rec.release(uid)
    member = action.member
    if member is not None and rec.fleet.health(member).reachable:
        await rec.delete_copy(uid, cluster=member, workload=snap.workload or {})
    fail = action.kind is ActionKind.FAIL
    await _write_retreat(rec, uid, snap, action, outcome="requeued")
    log.warning("workload.failed" if fail else "workload.requeued", uid=uid, member=member,
                reason=action.reason, attempt=record.attempt)
    rec.event(snap.workload or {}, reason="Failed" if fail else "Requeued",
              message=action.reason, warning=True)
    return not fail


async def _release_finalizer(rec: Reconciler, uid: str, workload: Mapping[str, Any]) -> bool:
    item = rec.cache.workload(uid)
    rec.release(uid)
    rec.queue.remove(uid)
    if item is None:
        return False
    # The end of the workload's life here (its copy, if any, is gone): one line, in the
    # trace format ``dispatcher simulate --trace`` replays.
    log.info(EVENT_DELETED, uid=uid, namespace=workload["metadata"].get("namespace"),
             name=workload["metadata"].get("name"))
    try:
        await rec.patch_workload(item, {"metadata": {
            "finalizers": rec.finalizers_without_ours(workload),
            "resourceVersion": workload["metadata"]["resourceVersion"]}})
    except NotFound:
        rec.cache.drop(uid)
    except Conflict:
        return True
    raw = rec.cache.record(uid)
    if raw is not None:  # owned by the workload, so GC would do it; do not wait for it
        meta = raw["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await rec.hub.request("DELETE", DISPATCHES.item(meta["name"], meta["namespace"]),
                                  body={"apiVersion": "v1", "kind": "DeleteOptions",
                                        "preconditions": {"uid": meta["uid"]}})
        rec.cache.drop_record(raw)
    return False
