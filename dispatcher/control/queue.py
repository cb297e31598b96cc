"""The pending queue: which waiting workload is tried first, and bounded backfill per namespace.

Fed by the shell when a placement finds no feasible member (``add``), finds that no member
could ever take the workload or that its request is invalid (``park``), or succeeds
(``placed``); read when fleet capacity or health changes (``ordered``, ``parked``) and
before each placement (``gate``). Pure: no I/O, no clock.

**The queue key is the namespace.** The hub is shared by teams, one namespace each, and a
namespace is what an operator already grants (RBAC, ``allowedNamespaces``, the priority
cap), so it is the unit of fairness; a separate queue object would be one more thing to
create and keep in sync for no gain yet.

**Backfill is bounded within a namespace only.** A workload placed while an older or
higher-priority one *of its own namespace* is still waiting counts as one bypass of each
such waiting workload; once a waiting workload has been bypassed ``backfill_limit`` times,
nothing behind it *in its namespace* is placed until it is. So a team's large gang is not
starved by that team's own stream of small ones, and one team's waiting (or impossible)
workload never holds another team's back. The price: a large gang has no protection against
*other* namespaces' streams (that needs quotas or reservations, not a gate).

**Parked workloads hold nothing.** A workload no member could ever run as the fleet is now
(``Unplaceable``), or whose request is invalid (``InvalidAnnotation``, unresolvable), is
parked: it is never in the gate, is not counted as bypassed, and is retried when the fleet
changes (a member added may make it placeable; a fixed annotation kicks it by its watch).

**Order across namespaces is priority, then turns.** ``ordered`` sorts by priority (which
the operator caps per namespace, so it may dominate), then by the workload's rank among the
waiting ones of its namespace and priority, then age: namespaces of equal priority take
turns, so a burst of 2,000 from one team puts another team's first waiting workload second,
not 2,001st. Oldest-first across namespaces would let any burst delay everyone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Entry", "PendingQueue"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One waiting workload: higher ``priority`` first, then smaller ``created`` (older).

    ``namespace`` is its queue key (see the module docstring); ``name`` is for messages."""

    uid: str
    priority: int
    created: float
    name: str = ""
    namespace: str = ""

    @property
    def order(self) -> tuple[int, float, str]:
        """Order within the namespace."""
        return (-self.priority, self.created, self.uid)


class PendingQueue:
    """Waiting and parked workloads, and bypass counts (see the module docstring)."""

    def __init__(self, *, backfill_limit: int) -> None:
        self.backfill_limit = backfill_limit
        self._entries: dict[str, Entry] = {}
        self._by_namespace: dict[str, dict[str, Entry]] = {}
        self._bypassed: dict[str, int] = {}
        self._saturated: dict[str, set[str]] = {}  # namespace -> uids at the limit
        self._parked: dict[str, tuple[Entry, str]] = {}
        self._order: list[Entry] | None = None

    def __len__(self) -> int:
        """Pending workloads: waiting plus parked."""
        return len(self._entries) + len(self._parked)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries or uid in self._parked

    @property
    def waiting(self) -> int:
        """Workloads waiting for capacity (the ones that may hold a gate)."""
        return len(self._entries)

    def add(self, entry: Entry) -> None:
        """``entry`` could not be placed now (keeps its bypass count if already waiting)."""
        self._parked.pop(entry.uid, None)
        if entry.uid in self._entries:
            self._drop(entry.uid)
            count = self._bypassed.get(entry.uid, 0)
        else:
            count = 0
        self._entries[entry.uid] = entry
        self._by_namespace.setdefault(entry.namespace, {})[entry.uid] = entry
        self._set_bypassed(entry, count)
        self._order = None

    def park(self, entry: Entry, reason: str) -> None:
        """``entry`` cannot be placed whatever capacity frees (``reason`` says why): it
        leaves the gate and forgets its bypasses."""
        self.remove(entry.uid)
        self._parked[entry.uid] = (entry, reason)

    def remove(self, uid: str) -> None:
        """Forget ``uid`` (deleted, or placed: see ``placed``)."""
        self._parked.pop(uid, None)
        if uid in self._entries:
            self._drop(uid)
            del self._entries[uid]
            self._bypassed.pop(uid, None)
            self._order = None

    def _drop(self, uid: str) -> None:
        old = self._entries[uid]
        members = self._by_namespace.get(old.namespace, {})
        members.pop(uid, None)
        if not members:
            self._by_namespace.pop(old.namespace, None)
        saturated = self._saturated.get(old.namespace)
        if saturated is not None:
            saturated.discard(uid)
            if not saturated:
                del self._saturated[old.namespace]

    def _set_bypassed(self, entry: Entry, count: int) -> None:
        self._bypassed[entry.uid] = count
        if count >= self.backfill_limit:
            self._saturated.setdefault(entry.namespace, set()).add(entry.uid)

    def ordered(self) -> list[Entry]:
        """Waiting workloads, the one to try first first (priority, then turns across
        namespaces, then age)."""
        if self._order is None:
            keyed: list[tuple[tuple[int, int, float, str], Entry]] = []
            for members in self._by_namespace.values():
                rank: dict[int, int] = {}
                for entry in sorted(members.values(), key=lambda e: e.order):
                    turn = rank.get(entry.priority, 0)
                    rank[entry.priority] = turn + 1
                    keyed.append(((-entry.priority, turn, entry.created, entry.uid), entry))
            keyed.sort(key=lambda item: item[0])
            self._order = [entry for _, entry in keyed]
        return list(self._order)

    def parked(self) -> list[tuple[Entry, str]]:
        """Parked workloads and why, oldest first."""
        return sorted(self._parked.values(), key=lambda item: item[0].order)

    def bypasses(self, uid: str) -> int:
        return self._bypassed.get(uid, 0)

    def gate(self, entry: Entry) -> Entry | None:
        """The waiting workload of ``entry``'s namespace that ``entry`` may not pass (its
        backfill limit reached), or None. Other namespaces never gate it."""
        saturated = self._saturated.get(entry.namespace, ())
        return min((ahead for uid in saturated if uid != entry.uid
                    and (ahead := self._entries[uid]).order < entry.order),
                   key=lambda e: e.order, default=None)

    def placed(self, entry: Entry) -> None:
        """``entry`` was placed: it leaves the queue; every waiting one of its namespace
        ahead of it was bypassed once more."""
        self.remove(entry.uid)
        for ahead in list(self._by_namespace.get(entry.namespace, {}).values()):
            if ahead.order < entry.order:
                self._set_bypassed(ahead, self._bypassed.get(ahead.uid, 0) + 1)
