"""One member as placement sees it: a frozen view over its live capacity and metadata.

Built by the fleet runtime (``Fleet.snapshots``) from live state, or by ``dispatcher
explain`` from a fleet file; placement (``placement.model`` re-exports it) reads nothing
else, so both paths decide identically. It lives in ``fleet`` so the fleet never imports
placement (the layers go ``control`` -> ``placement`` -> ``fleet`` -> ``workloads``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.quota import MemberQuota
from dispatcher.fleet.topology import TopologyLevel
from dispatcher.kube.gangapis import NONE, Mechanism
from dispatcher.kube.resources import GroupVersionKind

__all__ = ["MemberSnapshot"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class MemberSnapshot:
    """One member as placement sees it.

    ``served_kinds`` holds the kinds the member serves; None means not known (offline fleet
    files), which filters nothing. ``capacity`` is read
    synchronously during a decision and must already have reservations applied (see
    ``fleet.reservations``). ``allowed_namespaces`` is the operator's allow-list
    (MemberCluster ``spec.allowedNamespaces``): when not empty, only workloads of those
    namespaces may be placed there, so a hub user cannot reach kube-system or another
    tenant's namespace on the member. ``topology_levels`` are the member's topology levels
    (``fleet.topology``: its own, else the fleet-wide default), which a gang's topology
    request is resolved against. ``gang_mechanism`` is the gang admission its scheduler
    honours (``kube.gangapis``: spec or discovered), which the copy is built for.
    """

    name: str
    capacity: ClusterCapacity
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    ready: bool = True
    not_ready_reason: str = ""
    cordoned: bool = False
    served_kinds: frozenset[GroupVersionKind] | None = None
    allowed_namespaces: tuple[str, ...] = ()
    topology_levels: tuple[TopologyLevel, ...] = ()
    gang_mechanism: Mechanism = NONE
    queueing: Queueing = field(default_factory=Queueing)
    """How the member queues batch work (``fleet.queueing``: spec, system resolved)."""
    quota: MemberQuota | None = None
    """A Kueue member's queues as last read (``fleet.quota``); None: not known, so quota
    does not bound placement there."""
    kubernetes_version: str | None = None
    """The member's ``/version`` (None: not known, e.g. offline): what pod fields a copy may
    carry there (``control.core.skew``)."""
    quota_in_flight: int | None = None
    """Of the GPUs reserved here, those whose Kueue Workload holds no quota yet
    (``MemberReservations.in_flight``): what the quota does not count yet. None: every
    reserved GPU (``capacity.reserved``)."""

    @property
    def in_flight(self) -> int:
        """GPUs reserved here that the member's quota does not count yet."""
        return self.capacity.reserved if self.quota_in_flight is None \
            else self.quota_in_flight
