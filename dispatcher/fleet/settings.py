"""Fleet settings: who the members are and how hard the controller watches them.

The controller's config loader (``dispatcher.config``) parses the ``fleet:`` section of the
config file into ``FleetSettings``; every field has a safe default, so an empty section
works. Field names are snake_case and values simple types (str, float, bool, tuples), so the
loader maps keys one to one. TLS follows each member's kubeconfig; one that would reach its
member unverified (``insecure-skip-tls-verify``, an ``http://`` server) is refused unless
``allow_insecure_tls`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.topology import TopologyLevel

__all__ = ["DEFAULT_SECRET_NAMESPACE", "FleetSettings", "StaticMember"]

DEFAULT_SECRET_NAMESPACE = "dispatcher-system"

_NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class StaticMember:
    """A member declared in the config file instead of a MemberCluster object.

    For small set-ups and the dev fleet. Its status is not written anywhere (there is no
    object to write it to); ``Fleet.members()`` reports it like any other member.
    """

    name: str
    """Member name, as placement and Dispatch objects refer to it."""
    kubeconfig: str
    """Path of a kubeconfig file readable by the controller."""
    context: str | None = None
    """Context in that kubeconfig (default: its current-context)."""
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    """Labels that cluster selectors match, as on a MemberCluster's metadata."""
    cordoned: bool = False
    """No new dispatches to this member."""
    allowed_namespaces: tuple[str, ...] = ()
    """Namespaces hub workloads may be placed in (empty: any)."""
    topology_levels: tuple[TopologyLevel, ...] = ()
    """Its topology levels (``fleet.topology``; empty: the fleet's ``topology_levels``)."""
    gang_scheduling: str = "auto"
    """The gang mechanism of its scheduler (``kube.gangapis.SETTINGS``; auto: discovered)."""
    queueing: Queueing = field(default_factory=Queueing)
    """How it queues batch work (``fleet.queueing``; system auto: discovered)."""


@dataclass(frozen=True, kw_only=True)
class FleetSettings:
    """How the fleet runtime finds, watches and reports member clusters (all durations in s)."""

    static_members: tuple[StaticMember, ...] = ()
    """Members from the config file, in addition to MemberCluster objects on the hub."""
    topology_levels: tuple[TopologyLevel, ...] = ()
    """The topology levels of every member that declares none of its own (MemberCluster
    ``spec.topologyLevels``): node labels naming racks, blocks, NVLink cliques."""
    watch_member_clusters: bool = True
    """Watch MemberCluster objects on the hub (off: static members only)."""
    secret_namespace: str = DEFAULT_SECRET_NAMESPACE
    """Namespace of kubeconfig Secrets; watched, so credential changes apply at once."""
    probe_interval_s: float = 10.0
    """How often a connected member is asked ``/version`` (liveness and lastSeen)."""
    unreachable_after_s: float = 30.0
    """A member that has not answered for this long is ``Reachable=False``; shorter blips
    only turn it ``Ready=False`` (no new dispatches while its picture is not live)."""
    request_timeout_s: float = 5.0
    """Timeout of one probe, version or discovery request."""
    reconnect_initial_s: float = 1.0
    """First delay before reconnecting a lost member (doubles, with jitter)."""
    reconnect_max_s: float = 60.0
    """Longest delay between reconnect attempts."""
    status_min_interval_s: float = 5.0
    """At most one MemberCluster status write per member in this interval."""
    status_heartbeat_s: float = 60.0
    """Write ``lastSeen`` at least this often even when nothing else changed."""
    discovery_interval_s: float = 300.0
    """How often the served workload kinds (CRDs) of a member are discovered again."""
    resync_period_s: float = 600.0
    """Re-list Nodes and Pods this often (repairs any drift a missed event could cause)."""
    watch_timeout_s: int = 300
    """Server-side timeout of one watch request (the informer resumes from its version)."""
    allow_insecure_tls: bool = False
    """Whether a member kubeconfig may set ``insecure-skip-tls-verify`` or an ``http://``
    server (off: such a member is refused with KubeconfigInvalid before any request; on: it
    connects, warned at each connect and marked ``TLSVerified=False`` on its
    MemberCluster)."""

    def __post_init__(self) -> None:
        for name in ("probe_interval_s", "unreachable_after_s", "request_timeout_s",
                     "reconnect_initial_s", "reconnect_max_s", "status_min_interval_s",
                     "status_heartbeat_s", "discovery_interval_s", "resync_period_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"fleet.{name} must be > 0, got {getattr(self, name)!r}")
        if self.watch_timeout_s <= 0:
            raise ValueError(f"fleet.watch_timeout_s must be > 0, got {self.watch_timeout_s}")
        names = [m.name for m in self.static_members]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"fleet.static_members: duplicate names {duplicates}")
