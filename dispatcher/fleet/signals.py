"""Who in the fleet changed, and how: one pulse per member and category.

A Pod event on one member must not cost the other members anything: the loops that follow
one member (its copy watches, for instance) wait on that member's pulses only, and a
capacity change (a Node or Pod event, the bulk of all events) does not wake loops that only
care whether the member is connected, healthy or serves a kind. ``any`` still moves on
every change, for the few fleet-wide readers (the queue's retry rounds, MemberCluster
status writes), which coalesce bursts themselves.
"""

from __future__ import annotations

import enum

from dispatcher.aiotasks import Pulse

__all__ = ["Change", "FleetSignals"]


class Change(enum.Flag):
    """What changed about one member."""

    CAPACITY = enum.auto()
    """Nodes, bound pods or reservations: free GPUs moved."""
    STATE = enum.auto()
    """Connection (client), health, served kinds, version, labels/cordon: what the member
    is, not how full it is."""


class FleetSignals:
    """The fleet's change pulses: per member and category, the member set, and any."""

    def __init__(self) -> None:
        self.any = Pulse()
        """Every change of every member, and of the member set."""
        self.members = Pulse()
        """Members added or removed."""
        self._state: dict[str, Pulse] = {}
        self._capacity: dict[str, Pulse] = {}

    def state(self, member: str) -> Pulse:
        """Bumped when ``member``'s connection, health, served kinds or spec change."""
        return self._state.setdefault(member, Pulse())

    def capacity(self, member: str) -> Pulse:
        """Bumped when ``member``'s nodes, bound pods or reservations change."""
        return self._capacity.setdefault(member, Pulse())

    def changed(self, member: str, change: Change) -> None:
        """``member`` changed: O(1), whatever the number of members."""
        if Change.STATE in change:
            self.state(member).bump()
        if Change.CAPACITY in change:
            self.capacity(member).bump()
        self.any.bump()

    def joined_or_left(self, member: str) -> None:
        """``member`` was added or removed: its waiters wake and look. Its pulses are kept
        (a few bytes per name ever seen), so a waiter's last-seen version stays valid when
        a name comes back."""
        self.members.bump()
        self.changed(member, Change.STATE | Change.CAPACITY)
