"""What the hub says about a member: ``MemberSpec`` from a MemberCluster or a static member.

Pure. The runtime compares specs to decide whether a change needs a new connection
(credentials source changed) or only new metadata (labels, cordon, allowed namespaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dispatcher.fleet.kubeconfigs import DEFAULT_KEY
from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.queueing import parse as parse_queueing
from dispatcher.fleet.settings import DEFAULT_SECRET_NAMESPACE, StaticMember
from dispatcher.fleet.topology import TopologyLevel, parse_levels
from dispatcher.kube.gangapis import AUTO, SETTINGS

__all__ = ["MEMBER_LABEL", "MemberSpec", "SecretRef", "from_member_cluster", "from_static"]

# Stamped on Secrets that `dispatcher clusters add` creates, so `remove` deletes only those.
MEMBER_LABEL = "dispatcher.io/member"

_NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretRef:
    """Where a member's kubeconfig lives on the hub."""

    namespace: str
    name: str
    key: str = DEFAULT_KEY


@dataclass(frozen=True, kw_only=True)
class MemberSpec:
    """One member as declared: a MemberCluster (``secret`` set) or static (``path`` set)."""

    name: str
    secret: SecretRef | None = None
    path: str | None = None
    context: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    cordoned: bool = False
    allowed_namespaces: tuple[str, ...] = ()
    static: bool = False
    topology_levels: tuple[TopologyLevel, ...] = ()
    gang_scheduling: str = AUTO
    """``spec.gangScheduling``: a mechanism of ``kube.gangapis``, or ``auto`` (as the
    member's served APIs say)."""
    queueing: Queueing = field(default_factory=Queueing)
    """``spec.queueing``: how the member queues batch work (``fleet.queueing``)."""

    def same_source(self, other: MemberSpec) -> bool:
        """Whether ``other`` connects the same way (no new connection needed)."""
        return (self.secret, self.path, self.context) == (other.secret, other.path,
                                                          other.context)


def from_member_cluster(obj: Mapping[str, Any], *,
                        default_namespace: str = DEFAULT_SECRET_NAMESPACE) -> MemberSpec:
    """The spec of a MemberCluster dict; ValueError names a missing field."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError("MemberCluster without metadata.name")
    spec = obj.get("spec") or {}
    ref = spec.get("kubeconfigSecretRef") or {}
    if not isinstance(ref, Mapping) or not ref.get("name"):
        raise ValueError(f"MemberCluster {name}: spec.kubeconfigSecretRef.name is required")
    namespace = str(ref.get("namespace") or default_namespace)
    if namespace != default_namespace:
        raise ValueError(f"MemberCluster {name}: spec.kubeconfigSecretRef.namespace "
                         f"{namespace!r} is not the fleet's secret namespace "
                         f"{default_namespace!r} (fleet.secretNamespace)")
    labels = meta.get("labels") or {}
    levels = parse_levels(spec.get("topologyLevels"),
                          where=f"MemberCluster {name}: spec.topologyLevels")
    gang = spec.get("gangScheduling") or AUTO
    if gang not in SETTINGS:
        raise ValueError(f"MemberCluster {name}: spec.gangScheduling {gang!r} is not one of "
                         f"{', '.join(SETTINGS)}")
    return MemberSpec(
        name=str(name),
        secret=SecretRef(namespace=namespace,
                         name=str(ref["name"]), key=str(ref.get("key") or DEFAULT_KEY)),
        context=spec.get("context") or None,
        labels=MappingProxyType({str(k): str(v) for k, v in labels.items()}),
        cordoned=bool(spec.get("cordoned")),
        allowed_namespaces=tuple(str(n) for n in spec.get("allowedNamespaces") or ()),
        topology_levels=levels,
        gang_scheduling=str(gang),
        queueing=parse_queueing(spec.get("queueing"),
                                where=f"MemberCluster {name}: spec.queueing"),
    )


def from_static(member: StaticMember) -> MemberSpec:
    """The spec of a member from the config file."""
    return MemberSpec(name=member.name, path=member.kubeconfig, context=member.context,
                      labels=MappingProxyType(dict(member.labels)), cordoned=member.cordoned,
                      allowed_namespaces=member.allowed_namespaces, static=True,
                      topology_levels=member.topology_levels,
                      gang_scheduling=member.gang_scheduling, queueing=member.queueing)
