"""Reservations: GPUs promised to dispatched workloads whose pods the member has not bound yet.

Between a decision and the member's pods being bound, the chosen nodes look free; without
reservations two back-to-back decisions would both take them (karmada#1385). Each dispatched
workload reserves the GPUs of its node assignment on one member, keyed by the hub workload's
uid. The member's pod informer feeds ``upsert_pod``/``delete_pod``/``relist_pods`` *after*
``ClusterCapacity`` has counted the same event, so within one synchronous step a bound pod's
GPUs move from "reserved" to "used": at every moment, per member,

    free = allocatable - GPUs of bound pods - outstanding reserved GPUs

and no GPU is counted twice or forgotten between "copy created" and "pods bound". A
reservation also goes away when the controller says so (``release``: the workload finished,
was deleted or moved, the member refused it) or expires (``expire``,
with ``now`` passed in: no clock is read here).

Attribution. A pod belongs to a workload when it carries ``HUB_UID_LABEL`` (the hub uid; the
copy's pod templates are stamped with it and workloads cannot stamp nested templates
themselves). A pod someone else labels on the member can only make us *under*-estimate free
GPUs (its GPUs are used and it shrinks a reservation), never over-commit.

The shrink rule, for a bound pod of workload W holding g GPUs on node N:

1. Each pod (``namespace/name``) is taken off W's reservation at most once, however often
   the watch repeats it; deleting the pod later gives nothing back (its GPUs were the
   workload's, and are free now). A pod that leaves the informer from a node (finished or
   deleted: the member's informer watches bound, unfinished pods only) is taken off then
   if its bound state was never seen: it had its slot. A pod bound before W's reservation
   was added (a controller restart rebuilding reservations from Dispatch records) is taken
   off at ``add``: rebuilt reservations account for pods already bound.
2. g is taken from W's entry on N first, then from W's other entries, largest first (name
   as the tie-break): the scheduler put the pod elsewhere than planned, so one of the
   planned slots will not be used by it. Never more than W still holds (a pod larger than
   the plan just ends the reservation).
3. Swap: if N is now over-subscribed (used + reserved > allocatable), the scheduler gave W
   the slot planned for *another* workload X (the default scheduler ignores our plan and
   places pod by pod). X's reservation on N then moves to the nodes W's pod vacated in
   step 2, as much as the excess: X's pods will find those GPUs free. Totals never change,
   so nothing is counted twice, and the excess is not lost in ``free``'s per-node clamp.
   When W's plan did not cover the pod (a pod larger than planned, or a pod of a workload
   with no reservation left), there is nothing to swap with: that node shows 0 free and
   the other reservation stays where it was until its pods appear or it is released.

When every planned GPU is observed, the reservation ends: what the member's pods do (bound,
running, finished) releases it, never the workload's status word (a JobSet reads running
while one of its pods still waits for a node: that pod's GPUs stay held). Records are plain
data: the controller persists the *planned* reservation on the Dispatch object and
``restore``s it after a restart; rule 1 then shrinks it again by the pods already bound.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.nodes import TERMINAL_PHASES, pod_binding, pod_key
from dispatcher.workloads.podspec import pod_gpus

__all__ = ["HUB_UID_LABEL", "MemberReservations", "Reservation", "pod_owner", "restore"]

HUB_UID_LABEL = "dispatcher.io/hub-uid"
"""Label naming the hub workload uid, on a member copy and on its pods' templates: stamped
by ``control.core.copies.build_copy``, read here to attribute a bound pod's GPUs. Its home is
here, not with the control loop's other names (``control.core.names``), because the fleet reads
it and sits below control."""


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """GPUs held for one workload on one member: ``nodes`` is ((node, gpus), ...)."""

    workload_uid: str
    member: str
    nodes: tuple[tuple[str, int], ...]
    expires_at: float

    @property
    def gpus(self) -> int:
        return sum(gpus for _, gpus in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """The form stored on the Dispatch object (``status.reservation``)."""
        return {"workloadUID": self.workload_uid, "member": self.member,
                "nodes": [{"node": node, "gpus": gpus} for node, gpus in self.nodes],
                "expiresAt": self.expires_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reservation:
        """Inverse of ``to_dict``; raises ValueError naming the bad field."""
        try:
            nodes = tuple((str(item["node"]), int(item["gpus"])) for item in data["nodes"])
            return cls(workload_uid=str(data["workloadUID"]), member=str(data["member"]),
                       nodes=nodes, expires_at=float(data["expiresAt"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid reservation record {dict(data)!r}: {exc!r}") from exc


class MemberReservations:
    """The live reservations of one member, applied to that member's ``ClusterCapacity``.

    Every change is mirrored into the capacity per node, so placement sees free GPUs net of
    reservations without knowing about them. Pod events must reach the capacity first.
    """

    def __init__(self, *, member: str, capacity: ClusterCapacity) -> None:
        self.member = member
        self._capacity = capacity
        self._held: dict[str, Reservation] = {}
        # Bound pods carrying HUB_UID_LABEL: pod key -> (workload uid, node, GPUs).
        self._pods: dict[str, tuple[str, str, int]] = {}
        # ... how many of them each workload has (``bound``: no scan of every pod).
        self._bound: dict[str, int] = {}
        # Finished pods carrying HUB_UID_LABEL that ran on a node: key -> (uid, node, GPUs),
        # so a reservation added after they ended still counts them (rule 1).
        self._finished: dict[str, tuple[str, str, int]] = {}
        # Pod keys already taken off each held reservation (rule 1).
        self._taken: dict[str, set[str]] = {}
        # (namespace, label, value) -> workload uid: pods that cannot carry HUB_UID_LABEL
        # (a copy MultiKueue made: ``attribute``).
        self._aliases: dict[tuple[str, str, str], str] = {}
        # workload uid -> the member's Kueue Workload that takes its quota (``quota_by``)
        self._quota_keys: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, workload_uid: object) -> bool:
        return workload_uid in self._held

    def records(self) -> tuple[Reservation, ...]:
        """Live reservations, by workload uid (what to persist)."""
        return tuple(self._held[uid] for uid in sorted(self._held))

    def get(self, workload_uid: str) -> Reservation | None:
        return self._held.get(workload_uid)

    def bound(self, workload_uid: str) -> int:
        """How many of the workload's pods are bound to a node and not finished now."""
        return self._bound.get(workload_uid, 0)

    def _remember(self, key: str, entry: tuple[str, str, int] | None) -> None:
        """Set (or with None, drop) a bound pod, keeping the per-workload counts."""
        old = self._pods.pop(key, None)
        if old is not None:
            left = self._bound.get(old[0], 0) - 1
            if left > 0:
                self._bound[old[0]] = left
            else:
                self._bound.pop(old[0], None)
        if entry is not None:
            self._pods[key] = entry
            self._bound[entry[0]] = self._bound.get(entry[0], 0) + 1

    def _apply(self, reservation: Reservation, sign: int) -> None:
        for node, gpus in reservation.nodes:
            self._capacity.reserve(node, sign * gpus)

    def add(self, reservation: Reservation) -> None:
        """Hold ``reservation`` (replacing an earlier one for the same workload), less the
        GPUs of the workload's pods already bound (rule 1)."""
        if reservation.member != self.member:
            raise ValueError(f"reservation for member {reservation.member!r} "
                             f"added to member {self.member!r}")
        self.release(reservation.workload_uid)
        merged: dict[str, int] = {}
        for node, gpus in reservation.nodes:
            if gpus > 0:
                merged[node] = merged.get(node, 0) + gpus
        nodes = tuple(sorted(merged.items()))
        if not nodes:
            return
        uid = reservation.workload_uid
        self._held[uid] = replace(reservation, nodes=nodes)
        self._taken[uid] = set()
        self._apply(self._held[uid], 1)
        ran = {**self._finished, **self._pods}
        for key in sorted(k for k, (owner, _, _) in ran.items() if owner == uid):
            _, node, gpus = ran[key]
            self._take(uid, key, node, gpus)

    def attribute(self, *, namespace: str, label: str, value: str, workload_uid: str) -> None:
        """Pods in ``namespace`` labelled ``label=value`` are the workload's: a copy made
        by someone else (MultiKueue clones the hub job, our label is not on its pods) is
        recognised by the label its framework puts on its pods (a Job's job name)."""
        self._aliases[(namespace, label, value)] = workload_uid

    def quota_by(self, workload_uid: str, key: str) -> None:
        """On a Kueue member, the member's Workload ``key`` (``fleet.quota.holder_keys``:
        its ``namespace/name`` or its job's uid) reserves the workload's quota: once it
        does, the GPUs still held here for unbound pods are in the ClusterQueue's numbers,
        not in flight (``in_flight``)."""
        if workload_uid in self._held:
            self._quota_keys[workload_uid] = key

    def in_flight(self, holders: Container[str]) -> int:
        """GPUs held for workloads whose Kueue Workload on the member holds no quota yet
        (``holders``: the keys of those that do): what a Kueue member's quota does not
        count yet. A reservation and the quota its Workload reserved are the same GPUs,
        counted once."""
        return sum(r.gpus for uid, r in self._held.items()
                   if self._quota_keys.get(uid) not in holders)

    def release(self, workload_uid: str) -> Reservation | None:
        """Drop a workload's reservation (its pods are all up, or it was deleted)."""
        reservation = self._held.pop(workload_uid, None)
        self._taken.pop(workload_uid, None)
        self._quota_keys.pop(workload_uid, None)
        for key in [k for k, uid in self._aliases.items() if uid == workload_uid]:
            del self._aliases[key]
        if reservation is not None:
            self._apply(reservation, -1)
        return reservation

    # -- pods (after ClusterCapacity saw the same event) -----------------------------------

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod was added or modified: a bound pod of a reserved workload shrinks it."""
        owner = pod_owner(pod) or (self._aliased(pod) if self._aliases else None)
        binding = pod_binding(pod)
        key = pod_key(pod)
        if owner is None or binding is None:
            self._remember(key, None)  # unbound or finished: nothing to give back (rule 1)
            ran = _ran_on(pod) if owner is not None else None
            if owner is not None and ran is not None:  # finished on a node: it had its slot
                self._finished[key] = (owner, ran[0], ran[1])
                self._take(owner, key, ran[0], ran[1])
            return
        entry = (owner, binding[0], binding[1])
        if self._pods.get(key) == entry:
            return
        self._remember(key, entry)
        self._take(owner, key, binding[0], binding[1])

    def _aliased(self, pod: Mapping[str, Any]) -> str | None:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        for label, value in (meta.get("labels") or {}).items():
            owner = self._aliases.get((namespace, label, str(value)))
            if owner is not None:
                return owner
        return None

    def delete_pod(self, pod: Mapping[str, Any] | str) -> None:
        """A pod was deleted (object or ``ns/name``): forgotten; nothing is given back.

        The member's pod informer watches bound, unfinished pods only (a field selector):
        a pod that finishes leaves it as a deletion whose object is its last state. One
        that ran on a node had its slot (rule 1): taken off now if its bound state was
        never seen (it ran and ended between two events)."""
        key = pod if isinstance(pod, str) else pod_key(pod)
        if not isinstance(pod, str):
            owner = pod_owner(pod) or (self._aliased(pod) if self._aliases else None)
            ran = _ran_on(pod, finished=False) if owner is not None else None
            if owner is not None and ran is not None:
                self._take(owner, key, ran[0], ran[1])
        self._remember(key, None)
        self._finished.pop(key, None)

    def relist_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full pod list: pods missing from it are forgotten, the rest upserted."""
        pods = list(pods)
        present = {pod_key(p) for p in pods}
        for key in [k for k in self._pods if k not in present]:
            self._remember(key, None)
        for key in [k for k in self._finished if k not in present]:
            del self._finished[key]

        for raw in pods:
            self.upsert_pod(raw)

    def _take(self, uid: str, key: str, node: str, gpus: int) -> None:
        """Rules 1-3 of the module docstring for one bound pod."""
        reservation = self._held.get(uid)
        taken = self._taken.get(uid)
        if reservation is None or taken is None or key in taken or gpus <= 0:
            return
        taken.add(key)
        entries = dict(reservation.nodes)
        order = sorted(entries, key=lambda n: (n != node, -entries[n], n))
        vacated: list[tuple[str, int]] = []
        left = gpus
        for name in order:
            amount = min(left, entries[name])
            if amount <= 0:
                break
            self._capacity.reserve(name, -amount)
            entries[name] -= amount
            left -= amount
            if name != node:
                vacated.append((name, amount))
        self._store(reservation, entries)
        if vacated:
            self._swap(node, vacated, owner=uid)

    def _store(self, reservation: Reservation, entries: Mapping[str, int]) -> None:
        uid = reservation.workload_uid
        left = tuple((n, entries[n]) for n in sorted(entries) if entries[n] > 0)
        if left:
            self._held[uid] = replace(reservation, nodes=left)
        else:
            del self._held[uid]
            self._quota_keys.pop(uid, None)
            self._taken.pop(uid, None)

    def _swap(self, node: str, vacated: list[tuple[str, int]], *, owner: str) -> None:
        """Rule 3: move other reservations off an over-subscribed ``node`` onto ``vacated``."""
        state = self._capacity.node(node)
        if state is None:
            return
        excess = state.used + state.reserved - state.allocatable
        slots = list(vacated)
        for uid in sorted(self._held):
            if excess <= 0 or not slots:
                return
            other = self._held[uid]
            entries = dict(other.nodes)
            if uid == owner or not entries.get(node):
                continue
            while excess > 0 and slots and entries.get(node, 0) > 0:
                target, room = slots[0]
                amount = min(excess, room, entries[node])
                entries[node] -= amount
                entries[target] = entries.get(target, 0) + amount
                self._capacity.reserve(node, -amount)
                self._capacity.reserve(target, amount)
                excess -= amount
                slots[0] = (target, room - amount)
                if slots[0][1] == 0:
                    slots.pop(0)
            self._store(other, entries)

    def expire(self, now: float) -> tuple[Reservation, ...]:
        """Release every reservation whose ``expires_at`` is at or before ``now``."""
        due = [uid for uid, r in self._held.items() if r.expires_at <= now]
        return tuple(r for uid in sorted(due) if (r := self.release(uid)) is not None)


def restore(held: Iterable[tuple[Reservation, str]],
            book: Callable[[str], MemberReservations | None], *, now: float) -> int:
    """Re-add the reservations Dispatch records still hold; returns how many were added.

    The one lifecycle rule for persisted reservations, shared by the controller after a
    restart and by ``dispatcher explain``'s live view (so both see the same free GPUs):
    ``held`` gives each record's reservation with the member its decision names now. A
    reservation counts only while that decision still names the reserved member (a
    re-dispatch elsewhere voids it) and until it expires; ``book(member)`` is that
    member's reservations (None: not a member any more). Pods already bound are taken off
    again (rule 1), so a restart never counts them twice.
    """
    added = 0
    for reservation, cluster in held:
        if cluster != reservation.member or reservation.expires_at <= now:
            continue
        target = book(reservation.member)
        if target is not None:
            target.add(reservation)
            added += 1
    return added


def _ran_on(pod: Mapping[str, Any], *, finished: bool = True) -> tuple[str, int] | None:
    """(node, GPUs) of a pod with GPUs that ran on a node (and, with ``finished``, has
    finished), else None."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or not isinstance(node, str):
        return None
    if finished and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
        return None
    gpus = pod_gpus(spec)
    return (node, gpus) if gpus > 0 else None


def pod_owner(pod: Mapping[str, Any]) -> str | None:
    """The hub workload uid a member pod was stamped with (``HUB_UID_LABEL``), else None."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    owner = labels.get(HUB_UID_LABEL)
    return str(owner) if owner else None
