"""Member snapshots from a fleet file, for decisions without a live fleet.

``dispatcher explain --fleet`` and ``dispatcher simulate`` decide over these: each member's
nodes go through ``ClusterCapacity`` exactly as a live Node watch would feed them.
"""

from __future__ import annotations

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.fleetfile import FleetSpec, MemberSpec, node_manifests
from dispatcher.fleet.quota import MemberQuota, build
from dispatcher.placement.model import MemberSnapshot

__all__ = ["fleet_snapshots", "quota_of"]


def quota_of(member: MemberSpec) -> MemberQuota | None:
    """The quota of a fleet file member's ``kueue`` objects (None when it lists none)."""
    if not member.kueue:
        return None
    by_kind = {kind: [o for o in member.kueue if o.get("kind") == kind]
               for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor")}
    return build(by_kind["ClusterQueue"], by_kind["LocalQueue"], by_kind["ResourceFlavor"])


def fleet_snapshots(spec: FleetSpec) -> list[MemberSnapshot]:
    """Members of a fleet file, their nodes fed through ``ClusterCapacity`` like a watch.

    Served kinds are unknown offline (every kind passes); every member is Ready; a member
    runs Kueue when its ``queueing`` says so or it lists ``kueue`` objects (``auto`` is none
    otherwise: nothing is served), with their quota (none listed: quota does not bound it).
    """
    members = []
    for member in spec.members:
        capacity = ClusterCapacity()
        for node in node_manifests(member):
            capacity.upsert_node(node)
        queueing = member.queueing.effective(discovered=bool(member.kueue))
        members.append(MemberSnapshot(name=member.name, capacity=capacity,
                                      labels=dict(member.labels),
                                      topology_levels=member.topology_levels,
                                      queueing=queueing, quota=quota_of(member)))
    return members
