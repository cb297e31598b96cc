"""The pending queue: which waiting workload is tried first, and bounded backfill.

Fed by the shell when a placement finds no feasible member (``add``) or succeeds
(``placed``); read when fleet capacity or health changes (``ordered``: priority, then age)
and before each placement (``gate``). Backfill is bounded: a workload placed while an
older or higher-priority one is still waiting counts as one bypass of each such waiting
workload; once a waiting workload has been bypassed ``backfill_limit`` times, nothing
behind it is placed until it is (so a large gang is not starved by a stream of small
ones, and small ones still use the room a large one cannot use, up to the bound).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRIORITY_ANNOTATION", "Entry", "PendingQueue", "priority_of"]

PRIORITY_ANNOTATION = "dispatcher.io/priority"


def priority_of(annotations: dict[str, str] | None) -> int:
    """The ``dispatcher.io/priority`` annotation as an int (0 when absent or not a number)."""
    try:
        return int((annotations or {}).get(PRIORITY_ANNOTATION, 0))
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One waiting workload: higher ``priority`` first, then smaller ``created`` (older)."""

    uid: str
    priority: int
    created: float
    name: str = ""

    @property
    def order(self) -> tuple[int, float, str]:
        return (-self.priority, self.created, self.uid)


class PendingQueue:
    """Waiting workloads and their bypass counts (see the module docstring)."""

    def __init__(self, *, backfill_limit: int) -> None:
        self.backfill_limit = backfill_limit
        self._entries: dict[str, Entry] = {}
        self._bypassed: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def add(self, entry: Entry) -> None:
        """``entry`` could not be placed now (keeps its bypass count if already waiting)."""
        self._entries[entry.uid] = entry
        self._bypassed.setdefault(entry.uid, 0)

    def remove(self, uid: str) -> None:
        """Forget ``uid`` (deleted, or placed: see ``placed``)."""
        self._entries.pop(uid, None)
        self._bypassed.pop(uid, None)

    def ordered(self) -> list[Entry]:
        """Waiting workloads, the one to try first first."""
        return sorted(self._entries.values(), key=lambda e: e.order)

    def bypasses(self, uid: str) -> int:
        return self._bypassed.get(uid, 0)

    def gate(self, entry: Entry) -> Entry | None:
        """The waiting workload that ``entry`` may not pass (limit reached), or None."""
        return min((ahead for ahead in self._entries.values()
                    if ahead.order < entry.order
                    and self._bypassed.get(ahead.uid, 0) >= self.backfill_limit),
                   key=lambda e: e.order, default=None)

    def placed(self, entry: Entry) -> None:
        """``entry`` was placed: it leaves the queue; every waiting one ahead of it was
        bypassed once more."""
        self.remove(entry.uid)
        for ahead in self._entries.values():
            if ahead.order < entry.order:
                self._bypassed[ahead.uid] = self._bypassed.get(ahead.uid, 0) + 1
