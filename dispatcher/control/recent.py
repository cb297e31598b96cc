"""The last placement decisions, kept in memory for the fleet view (``shell.fleetpage``).

One entry per workload (its latest ``placement.decided`` decision), the most recently
decided last, at most ``limit``: a waiting workload is decided again on every fleet change,
and a ring of raw decisions would soon hold nothing but its repeats. Bounded, so memory does
not grow with the hub; pure (the caller passes the time).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dispatcher.placement.model import Decision

__all__ = ["Decided", "RecentDecisions"]


@dataclass(frozen=True, kw_only=True)
class Decided:
    """One workload's latest decision: when, which workload (``workload``: namespace, name,
    kind, uid, as in the log lines) and every member's verdict."""

    at: float
    workload: Mapping[str, str]
    decision: Decision


class RecentDecisions:
    """The latest decision of each of the last ``limit`` workloads decided."""

    def __init__(self, limit: int = 50) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self._items: OrderedDict[str, Decided] = OrderedDict()

    def add(self, *, at: float, workload: Mapping[str, str], decision: Decision) -> None:
        uid = workload.get("uid", "")
        self._items.pop(uid, None)
        self._items[uid] = Decided(at=at, workload=MappingProxyType(dict(workload)),
                                   decision=decision)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def newest_first(self) -> list[Decided]:
        return list(reversed(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)
