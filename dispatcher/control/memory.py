"""What the control loop saw on its last steps and the hub does not say (yet).

``decide`` reads a snapshot; part of it is nowhere on the hub: which copy resourceVersion
the hub status was last mirrored from, that a foreign object held a workload's name on a
member a moment ago, that a member refused a workload's copy, that a read found an
uncached workload gone from the hub. The writers note these here
and ``Reconciler.snapshot`` reads them, so nothing the decision depends on hides inside a
writer. In memory only: after a restart each is found again the way it was found first
(a re-mirror, a conflict on create, a refusal on the next submit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.control.core.copies import Rejection

__all__ = ["StepMemory"]

FOREIGN_RECHECK_S = 30.0
"""How long a foreign object on a member is believed without looking again."""


@dataclass
class StepMemory:
    """Per workload uid: the last mirrored copy version, foreign sightings per member,
    the member's refusal of the copy (until the retreat from that member is written)."""

    clock: Callable[[], float]
    _mirrored: dict[str, str] = field(default_factory=dict)
    _foreign: dict[tuple[str, str], float] = field(default_factory=dict)
    _refusals: dict[str, Rejection] = field(default_factory=dict)
    _gone: set[str] = field(default_factory=set)
    _outside: dict[str, str] = field(default_factory=dict)

    def mirrored(self, uid: str, copy_resource_version: str) -> None:
        """The hub status now equals the copy's at that resourceVersion."""
        self._mirrored[uid] = copy_resource_version

    def last_mirrored(self, uid: str) -> str | None:
        """The copy resourceVersion whose status the hub object now has."""
        return self._mirrored.get(uid)

    def saw_foreign(self, cluster: str, uid: str) -> None:
        """A foreign object holds the workload's name on ``cluster``."""
        self._foreign[(cluster, uid)] = self.clock()

    def foreign(self, cluster: str, uid: str) -> bool:
        """A foreign object held the name on ``cluster`` less than ``FOREIGN_RECHECK_S``
        ago (older sightings are dropped: the next submit looks again)."""
        seen = self._foreign.get((cluster, uid))
        if seen is None:
            return False
        if self.clock() - seen < FOREIGN_RECHECK_S:
            return True
        del self._foreign[(cluster, uid)]
        return False

    def refused(self, uid: str, rejection: Rejection) -> None:
        """The member refused the copy for good (``decide`` answers requeue or fail)."""
        self._refusals[uid] = rejection

    def refusal(self, uid: str) -> Rejection | None:
        """The refusal not yet answered by a retreat from that member."""
        return self._refusals.get(uid)

    def answered(self, uid: str) -> None:
        """The retreat from the refusing member is written."""
        self._refusals.pop(uid, None)

    def found_gone(self, uid: str) -> None:
        """A read of the hub found no object of the workload's name and uid."""
        self._gone.add(uid)

    def gone(self, uid: str) -> bool:
        """The hub said the workload is gone (``found_gone``)."""
        return uid in self._gone

    def found_outside(self, uid: str, reason: str | None) -> None:
        """A read of the hub found the uncached workload alive and out of the watched
        scope (``reason``), or back in it (None)."""
        if reason is None:
            self._outside.pop(uid, None)
        else:
            self._outside[uid] = reason

    def outside(self, uid: str) -> str | None:
        """Why the live hub object is out of the watched scope (``found_outside``)."""
        return self._outside.get(uid)

    def forget(self, uid: str) -> None:
        """The hub object is gone: drop everything about it."""
        self._mirrored.pop(uid, None)
        self._refusals.pop(uid, None)
        self._gone.discard(uid)
        self._outside.pop(uid, None)
        for key in [k for k in self._foreign if k[1] == uid]:
            del self._foreign[key]
