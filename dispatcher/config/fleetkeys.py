"""The ``fleet`` section of the config file: static members, topology, the scalar settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dispatcher.config.reader import ConfigError, Reader, config_path
from dispatcher.fleet.queueing import parse as queueing_of
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.fleet.topology import TopologyLevel, parse_levels
from dispatcher.kube.gangapis import AUTO, SETTINGS

__all__ = ["fleet_settings"]


def _static_members(r: Reader, base: Path) -> tuple[StaticMember, ...]:
    r.used.add("staticMembers")
    items = r.data.get("staticMembers") or []
    if not isinstance(items, list):
        raise r.error("staticMembers", "must be a list")
    members = []
    for i, item in enumerate(items):
        m = Reader(item, path=r.key(f"staticMembers[{i}]"), source=r.source)
        name = m.get("name", str, "")
        kubeconfig = m.get("kubeconfig", str, "")
        if not name:
            raise m.error("name", "is required")
        if not kubeconfig:
            raise m.error("kubeconfig", "is required (path of the member's kubeconfig)")
        gang = m.get("gangScheduling", str, AUTO)
        if gang not in SETTINGS:
            raise m.error("gangScheduling", f"must be one of {', '.join(SETTINGS)}, "
                                            f"not {gang!r}")
        try:
            queueing = queueing_of(m.get("queueing", dict, None), where="queueing")
        except ValueError as error:
            raise m.error("", str(error)) from None
        members.append(StaticMember(
            name=name, kubeconfig=config_path(kubeconfig, base) or kubeconfig,
            context=m.get("context", str, None), labels=m.string_map("labels"),
            cordoned=m.get("cordoned", bool, False),
            allowed_namespaces=m.strings("allowedNamespaces"),
            topology_levels=_levels(m), gang_scheduling=gang, queueing=queueing))
        m.done()
    return tuple(members)


# camelCase key -> FleetSettings field, for the scalar fleet settings
_FLEET_SCALARS: dict[str, tuple[str, type]] = {
    "watchMemberClusters": ("watch_member_clusters", bool),
    "secretNamespace": ("secret_namespace", str),
    "probeInterval": ("probe_interval_s", float),
    "unreachableAfter": ("unreachable_after_s", float),
    "requestTimeout": ("request_timeout_s", float),
    "reconnectInitial": ("reconnect_initial_s", float),
    "reconnectMax": ("reconnect_max_s", float),
    "statusMinInterval": ("status_min_interval_s", float),
    "statusHeartbeat": ("status_heartbeat_s", float),
    "discoveryInterval": ("discovery_interval_s", float),
    "resyncPeriod": ("resync_period_s", float),
    "watchTimeout": ("watch_timeout_s", int),
    "allowInsecureTLS": ("allow_insecure_tls", bool),
}


def _levels(r: Reader) -> tuple[TopologyLevel, ...]:
    """``topologyLevels: [{name, nodeLabel}]`` (``fleet.topology``)."""
    raw = r.get("topologyLevels", list, [])
    try:
        return parse_levels(raw, where=r.key("topologyLevels"))
    except ValueError as exc:
        raise ConfigError(f"{r.source}: {exc}") from None


def fleet_settings(r: Reader, base: Path) -> FleetSettings:
    """The ``fleet`` section."""
    defaults = FleetSettings()
    values: dict[str, Any] = {"static_members": _static_members(r, base),
                              "topology_levels": _levels(r)}
    for key, (attr, kind) in _FLEET_SCALARS.items():
        default = getattr(defaults, attr)
        if kind is float:
            values[attr] = r.number(key, default, strict=True)
        elif kind is int:
            values[attr] = r.integer(key, default, minimum=1)
        else:
            values[attr] = r.get(key, kind, default)
    r.done()
    try:
        return FleetSettings(**values)
    except ValueError as exc:
        raise r.error("", str(exc)) from None
