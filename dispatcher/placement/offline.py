"""Member snapshots from a fleet file, for decisions without a live fleet.

``dispatcher explain --fleet`` and ``dispatcher simulate`` decide over these: each member's
nodes go through ``ClusterCapacity`` exactly as a live Node watch would feed them.
"""

from __future__ import annotations

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.fleetfile import FleetSpec, node_manifests
from dispatcher.placement.model import MemberSnapshot

__all__ = ["fleet_snapshots"]


def fleet_snapshots(spec: FleetSpec) -> list[MemberSnapshot]:
    """Members of a fleet file, their nodes fed through ``ClusterCapacity`` like a watch.

    Served kinds are unknown offline (every kind passes); every member is Ready; a member
    runs Kueue only when its ``queueing`` says so (``auto`` is none: nothing is served).
    """
    members = []
    for member in spec.members:
        capacity = ClusterCapacity()
        for node in node_manifests(member):
            capacity.upsert_node(node)
        members.append(MemberSnapshot(name=member.name, capacity=capacity,
                                      labels=dict(member.labels),
                                      topology_levels=member.topology_levels,
                                      queueing=member.queueing.effective(discovered=False)))
    return members
