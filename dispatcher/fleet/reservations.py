"""Reservations: GPUs promised to dispatched workloads whose pods the member has not shown yet.

Between a decision and the member's pods appearing in the watch, the chosen nodes look free;
without reservations two back-to-back decisions would both take them (karmada#1385). Each
dispatched workload reserves the GPUs of its node assignment on one member, keyed by the hub
workload's uid. A reservation shrinks as the workload's pods are seen (``observe_pod``), goes
away when the controller says so (``release``), or expires (``expire``, with ``now`` passed
in: no clock is read here). Records are plain data so the controller can persist them on the
Dispatch object and ``rebuild`` them after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity

__all__ = ["MemberReservations", "Reservation"]


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
    reservations without knowing about them.
    """

    def __init__(self, *, member: str, capacity: ClusterCapacity) -> None:
        self.member = member
        self._capacity = capacity
        self._held: dict[str, Reservation] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, workload_uid: object) -> bool:
        return workload_uid in self._held

    def records(self) -> tuple[Reservation, ...]:
        """Live reservations, by workload uid (what to persist)."""
        return tuple(self._held[uid] for uid in sorted(self._held))

    def get(self, workload_uid: str) -> Reservation | None:
        return self._held.get(workload_uid)

    def _apply(self, reservation: Reservation, sign: int) -> None:
        for node, gpus in reservation.nodes:
            self._capacity.reserve(node, sign * gpus)

    def add(self, reservation: Reservation) -> None:
        """Hold ``reservation`` (replacing an earlier one for the same workload)."""
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
        reservation = replace(reservation, nodes=nodes)
        self._held[reservation.workload_uid] = reservation
        self._apply(reservation, 1)

    def release(self, workload_uid: str) -> Reservation | None:
        """Drop a workload's reservation (its pods are all visible, or it was deleted)."""
        reservation = self._held.pop(workload_uid, None)
        if reservation is not None:
            self._apply(reservation, -1)
        return reservation

    def observe_pod(self, *, workload_uid: str, node: str, gpus: int) -> None:
        """One of the workload's pods now holds ``gpus`` on ``node``: shrink the reservation.

        The member's scheduler may not follow our assignment, so a pod on an unplanned node
        releases from the largest remaining entry instead; the reservation ends at zero.
        """
        reservation = self._held.get(workload_uid)
        if reservation is None or gpus <= 0:
            return
        entries = dict(reservation.nodes)
        target = node if node in entries else max(entries, key=lambda n: (entries[n], n))
        released = min(gpus, entries[target])
        self._capacity.reserve(target, -released)
        entries[target] -= released
        left = tuple((n, entries[n]) for n, _ in reservation.nodes if entries[n] > 0)
        if left:
            self._held[workload_uid] = replace(reservation, nodes=left)
        else:
            del self._held[workload_uid]

    def expire(self, now: float) -> tuple[Reservation, ...]:
        """Release every reservation whose ``expires_at`` is at or before ``now``."""
        due = [uid for uid, r in self._held.items() if r.expires_at <= now]
        return tuple(r for uid in sorted(due) if (r := self.release(uid)) is not None)

    def rebuild(self, records: Iterable[Reservation], *, now: float) -> None:
        """Replace everything with ``records`` (from Dispatch objects), skipping expired ones."""
        for uid in list(self._held):
            self.release(uid)
        for record in records:
            if record.member == self.member and record.expires_at > now:
                self.add(record)
