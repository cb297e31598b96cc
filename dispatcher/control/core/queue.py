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

**A workload that waited long holds one member.** Bounded backfill does not protect a
large gang against *other* namespaces' streams: each GPU that frees is taken by a small
workload behind it, and the gang, which needs a whole member's worth at once, never fits.
So once a workload has waited ``claimAfter`` (``control.core.placing`` decides when, and
which member: the one its nodes could hold it on that has the most free now), it *claims*
that member: nothing behind it in the cross-namespace order (lower priority, or the same
priority and younger) is placed there until it is placed, parked or gone; elsewhere
backfill goes on. One claim per member, kept by its claimant. The price is the GPUs that
free on the claimed member while it drains, the bound is the gang's wait: ``claimAfter``
plus the longest run of what holds that member.

**A saturated workload holds one member of its namespace, not all of them.** Once its
backfill limit is reached, a workload claims a member the same way, but *within its
namespace* only (``wide=False``): its own namespace stays off that member, other
namespaces are untouched (as by the gate), and its namespace goes on everywhere else. The
gate held the namespace off every member, idling their GPUs without bringing its start
closer on the one it needs; so a claimant gates nothing, and the gate holds only behind a
saturated workload that could claim no member (every member it could use is claimed by
another, or claims are off: ``claimAfter`` 0) or when ``backfill_limit`` is 0 (strict order
within the namespace, as configured). Narrow and wide claims share the one claim per member:
a saturated workload that finds every member it could use claimed (by anyone) gates its own
namespace as before. Waiting ``claimAfter`` widens the claim; a wide claim takes a member
from a narrow one behind it only when no member is free of claims (never the reverse), so
one tenant's saturated workloads cannot leave another tenant's starving gang no member.

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

import bisect
import heapq
from collections.abc import Collection, Iterator
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
        self._sorted: dict[str, list[tuple[tuple[int, float, str], Entry]]] = {}
        self._bypassed: dict[str, int] = {}
        self._saturated: dict[str, set[str]] = {}  # namespace -> uids at the limit
        self._parked: dict[str, tuple[Entry, str]] = {}
        self._claims: dict[str, str] = {}  # member -> the waiting uid that claims it
        self._claimed: dict[str, str] = {}  # uid -> the member it claims
        self._wide: set[str] = set()  # claimants that bar every namespace, not only theirs

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
        bisect.insort(self._sorted.setdefault(entry.namespace, []), (entry.order, entry),
                      key=lambda item: item[0])
        self._set_bypassed(entry, count)

    def park(self, entry: Entry, reason: str) -> None:
        """``entry`` cannot be placed whatever capacity frees (``reason`` says why): it
        leaves the gate and forgets its bypasses."""
        self.remove(entry.uid)
        self._parked[entry.uid] = (entry, reason)

    def remove(self, uid: str) -> None:
        """Forget ``uid`` (deleted, or placed: see ``placed``); its claim goes with it."""
        self._parked.pop(uid, None)
        member = self._claimed.pop(uid, None)
        if member is not None:
            del self._claims[member]
            self._wide.discard(uid)
        if uid in self._entries:
            self._drop(uid)
            del self._entries[uid]
            self._bypassed.pop(uid, None)

    def _drop(self, uid: str) -> None:
        old = self._entries[uid]
        members = self._by_namespace.get(old.namespace, {})
        members.pop(uid, None)
        ordered = self._sorted[old.namespace]
        del ordered[bisect.bisect_left(ordered, old.order, key=lambda item: item[0])]
        if not members:
            self._by_namespace.pop(old.namespace, None)
            self._sorted.pop(old.namespace, None)
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
        return list(self.in_order())

    def in_order(self) -> Iterator[Entry]:
        """``ordered`` lazily, over a copy (the queue may change while it is read): a
        caller that stops early pays only for what it read."""
        lanes = [self._turns(list(items)) for items in self._sorted.values()]
        for _, entry in heapq.merge(*lanes, key=lambda item: item[0]):
            yield entry

    @staticmethod
    def _turns(items: list[tuple[tuple[int, float, str], Entry]]
               ) -> Iterator[tuple[tuple[int, int, float, str], Entry]]:
        """One namespace's entries keyed by (-priority, turn, created, uid), where turn
        counts the entries of the same namespace and priority ahead of it."""
        turn, priority = 0, None
        for _, entry in items:
            turn = turn + 1 if entry.priority == priority else 0
            priority = entry.priority
            yield (-entry.priority, turn, entry.created, entry.uid), entry

    def parked(self) -> list[tuple[Entry, str]]:
        """Parked workloads and why, oldest first."""
        return sorted(self._parked.values(), key=lambda item: item[0].order)

    def bypasses(self, uid: str) -> int:
        return self._bypassed.get(uid, 0)

    def saturated(self, uid: str) -> bool:
        """Whether ``uid`` was bypassed ``backfill_limit`` times (it would gate)."""
        return self._bypassed.get(uid, 0) >= self.backfill_limit

    def gate(self, entry: Entry) -> Entry | None:
        """The waiting workload of ``entry``'s namespace that ``entry`` may not pass (its
        backfill limit reached and no member claimed), or None. Other namespaces never
        gate it."""
        saturated = self._saturated.get(entry.namespace)
        if not saturated:  # the common case, asked before every placement
            return None
        mine, found, first = entry.order, None, None
        for uid in saturated:
            if uid in self._claimed:  # its claim protects it (module docstring)
                continue
            ahead = self._entries[uid]
            order = ahead.order
            if uid != entry.uid and order < mine and (first is None or order < first):
                found, first = ahead, order
        return found

    def claim(self, entry: Entry, member: str, *, wide: bool = True) -> bool:
        """``entry`` (waiting) claims ``member``, against every namespace (``wide``) or its
        own only; False when ``entry`` is not waiting or another holds the member (a wide
        claim takes it from a narrow one behind it in the order: a tenant's saturated
        workloads must not keep another tenant's gang from every member; placing asks for
        a member nobody claims first). A claim is kept until its claimant leaves or gives
        way, and once wide stays wide."""
        holder = self._claims.get(member, entry.uid)
        if entry.uid not in self._entries or (holder != entry.uid and (
                not wide or holder in self._wide
                or self._entries[holder].order < entry.order)):  # only one behind gives way
            return False
        if holder != entry.uid:  # gives way: it gates its namespace again, or claims anew
            del self._claimed[holder]
        old = self._claimed.get(entry.uid)
        if old is not None and old != member:
            del self._claims[old]
        self._claims[member] = entry.uid
        self._claimed[entry.uid] = member
        if wide:
            self._wide.add(entry.uid)
        return True

    def take_claim(self, entry: Entry, member: str, *, wide: bool) -> bool:
        """``claim``, and whether it changed anything (a claim new, moved, widened or taken
        from another): what the shells log and start a round for."""
        before = (self._claimed.get(entry.uid), entry.uid in self._wide)
        return self.claim(entry, member, wide=wide) \
            and before != (self._claimed.get(entry.uid), entry.uid in self._wide)

    def claims_widely(self, uid: str) -> bool:
        """Whether ``uid``'s claim bars every namespace (it waited ``claimAfter``)."""
        return uid in self._wide

    def claimed_by(self, uid: str) -> str | None:
        """The member ``uid`` claims, if any."""
        return self._claimed.get(uid)

    def claims(self) -> dict[str, Entry]:
        """Every claim: member -> its claimant."""
        return {member: self._entries[uid] for member, uid in self._claims.items()}

    def keep_claims(self, members: Collection[str]) -> None:
        """Drop the claims on members not in ``members`` (they left the fleet): their
        claimants claim again at their next try."""
        for member in [m for m in self._claims if m not in members]:
            uid = self._claims.pop(member)
            del self._claimed[uid]
            self._wide.discard(uid)

    def claims_against(self, entry: Entry) -> dict[str, Entry]:
        """The members ``entry`` may not be placed on: claimed by a waiting workload ahead
        of it (higher priority, or the same and older), of any namespace when the claim
        is wide, else of ``entry``'s own."""
        if not self._claims:  # the common case, asked before every placement
            return {}
        mine, wide = entry.order, self._wide
        return {member: claimant for member, uid in self._claims.items()
                if uid != entry.uid and (claimant := self._entries[uid]).order < mine
                and (uid in wide or claimant.namespace == entry.namespace)}

    def placed(self, entry: Entry) -> list[Entry]:
        """``entry`` was placed: it leaves the queue; every waiting one of its namespace
        ahead of it was bypassed once more. Returns those that reached the backfill limit
        with it (they should be tried again soon: they claim a member or gate)."""
        self.remove(entry.uid)
        reached: list[Entry] = []
        for ahead in list(self._by_namespace.get(entry.namespace, {}).values()):
            if ahead.order < entry.order:
                count = self._bypassed.get(ahead.uid, 0) + 1
                self._set_bypassed(ahead, count)
                if count == self.backfill_limit:
                    reached.append(ahead)
        return reached
