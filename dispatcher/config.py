"""The controller's configuration file: one YAML file, validated, with flag overrides.

``load(path, overrides=...)`` reads the file, applies ``key.path=value`` overrides (from
command-line flags), validates every key and returns a ``Config``. Every key has a safe
default (an empty file is valid); unknown keys, wrong types and bad values are errors
that name the file and the key (``config/local.yaml: failover.policy: must be one of
never, if-not-started, always; got 'sometimes'``). Keys are camelCase; durations are
seconds. ``config/default.yaml`` lists every key with its default and what it does.
Relative kubeconfig paths are read relative to the config file; ``~`` is expanded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from dispatcher.control.copies import PodMutations
from dispatcher.control.decide import Rules
from dispatcher.control.pending import DEFAULT_REFRESH_S
from dispatcher.control.podpolicy import Allowed, PodFieldPolicy
from dispatcher.control.priority import PRIORITY_LIMIT, PriorityPolicy
from dispatcher.control.settings import (
    HUB_MODES,
    ControlSettings,
    LeaderSettings,
    ServerSettings,
    WebhookSettings,
)
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.fleet.topology import TopologyLevel, parse_levels
from dispatcher.kube.gangapis import AUTO, SETTINGS
from dispatcher.kube.podsecurity import LEVELS

__all__ = ["Config", "ConfigError", "load", "parse"]

POLICIES = ("never", "if-not-started", "always")
PLACEMENT_POLICIES = ("most-free", "best-fit")
LOG_LEVELS = ("debug", "info", "warning", "error")
WEAKER_NAMESPACES = ("refuse", "allow")


class ConfigError(ValueError):
    """The configuration is invalid; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``dispatcher run`` needs, validated."""

    source: str
    """Where the configuration came from (file path, or ``<defaults>``)."""
    hub_kubeconfig: str | None = None
    """Kubeconfig of the hub (None: $KUBECONFIG or ~/.kube/config)."""
    hub_context: str | None = None
    """Context in the hub kubeconfig (None: its current-context)."""
    definitions: tuple[str, ...] = ()
    """Extra workload definition files or directories, merged over the built-in catalog."""
    control: ControlSettings = field(default_factory=ControlSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)


class _Reader:
    """Typed access to one mapping, remembering which keys were read (the rest are errors)."""

    def __init__(self, data: Any, *, path: str, source: str) -> None:
        self.source = source
        self.path = path
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise self.error("", f"must be a mapping, got {type(data).__name__}")
        self.data = data
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, problem: str) -> ConfigError:
        where = self.key(name) if name else (self.path or "(top level)")
        return ConfigError(f"{self.source}: {where}: {problem}")

    def get(self, name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(name)
        value = self.data.get(name, default)
        if value is None:
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(name, f"must be {_names(kinds)}, got a boolean")
        if not isinstance(value, kinds):
            raise self.error(name, f"must be {_names(kinds)}, got {type(value).__name__} "
                                   f"{value!r}")
        return value

    def number(self, name: str, default: float, *, minimum: float = 0.0,
               strict: bool = False) -> float:
        value = float(self.get(name, (int, float), default))
        if value < minimum or (strict and value == minimum):
            raise self.error(name, f"must be {'>' if strict else '>='} {minimum:g}, "
                                   f"got {value:g}")
        return value

    def integer(self, name: str, default: int, *, minimum: int = 0) -> int:
        value = int(self.get(name, int, default))
        if value < minimum:
            raise self.error(name, f"must be >= {minimum}, got {value}")
        return value

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = str(self.get(name, str, default))
        if value not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.get(name, list, [])
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{name}[{i}]", f"must be a string, got {item!r}")
        return tuple(value)

    def string_map(self, name: str) -> Mapping[str, str]:
        value = self.get(name, dict, {})
        out = {}
        for k, v in value.items():
            if not isinstance(v, (str, int, float, bool)) or isinstance(v, bool):
                raise self.error(f"{name}.{k}", f"must be a string, got {v!r}")
            out[str(k)] = str(v)
        return MappingProxyType(out)

    def section(self, name: str) -> _Reader:
        self.used.add(name)
        return _Reader(self.data.get(name), path=self.key(name), source=self.source)

    def done(self) -> None:
        unknown = sorted(str(k) for k in self.data if k not in self.used)
        if unknown:
            known = ", ".join(sorted(self.used))
            raise self.error(unknown[0], f"unknown key (known here: {known})")


def _names(kinds: tuple[type, ...]) -> str:
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(sorted({names.get(k, k.__name__) for k in kinds}))


def _path(value: str | None, base: Path) -> str | None:
    if not value:
        return None
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path))


def _static_members(r: _Reader, base: Path) -> tuple[StaticMember, ...]:
    r.used.add("staticMembers")
    items = r.data.get("staticMembers") or []
    if not isinstance(items, list):
        raise r.error("staticMembers", "must be a list")
    members = []
    for i, item in enumerate(items):
        m = _Reader(item, path=r.key(f"staticMembers[{i}]"), source=r.source)
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
        members.append(StaticMember(
            name=name, kubeconfig=_path(kubeconfig, base) or kubeconfig,
            context=m.get("context", str, None), labels=m.string_map("labels"),
            cordoned=m.get("cordoned", bool, False),
            allowed_namespaces=m.strings("allowedNamespaces"),
            topology_levels=_levels(m), gang_scheduling=gang))
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


def _levels(r: _Reader) -> tuple[TopologyLevel, ...]:
    """``topologyLevels: [{name, nodeLabel}]`` (``fleet.topology``)."""
    raw = r.get("topologyLevels", list, [])
    try:
        return parse_levels(raw, where=r.key("topologyLevels"))
    except ValueError as exc:
        raise ConfigError(f"{r.source}: {exc}") from None


def _fleet(r: _Reader, base: Path) -> FleetSettings:
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


def _allowed(r: _Reader) -> Allowed:
    """``allowedPriorityClasses`` and ``allowedSchedulers`` of one level (non-empty names)."""
    lists = {}
    for key in ("allowedPriorityClasses", "allowedSchedulers"):
        names = r.strings(key)
        for i, name in enumerate(names):
            if not name:
                raise r.error(f"{key}[{i}]", "must not be empty")
        lists[key] = frozenset(names)
    return Allowed(priority_classes=lists["allowedPriorityClasses"],
                   schedulers=lists["allowedSchedulers"])


def _pod_fields(tpl: _Reader) -> PodFieldPolicy:
    """The scheduling fields tenants' pod templates may set (``control.podpolicy``):
    the allow-lists of every namespace, and more per namespace under ``byNamespace``."""
    allowed = _allowed(tpl)
    by_ns = tpl.section("byNamespace")
    namespaces = {}
    for name in list(by_ns.data):
        entry = by_ns.section(str(name))
        namespaces[str(name)] = _allowed(entry)
        entry.done()
    by_ns.done()
    return PodFieldPolicy(allowed=allowed, by_namespace=MappingProxyType(namespaces))


def _priority(r: _Reader) -> PriorityPolicy:
    """``queue.priority``: default, max, maxByNamespace (integers within the sane range)."""

    def bounded(reader: _Reader, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise reader.error(name, f"must be an integer, got {value!r}")
        if abs(value) > PRIORITY_LIMIT:
            raise reader.error(name, f"must be between -{PRIORITY_LIMIT} and "
                                     f"{PRIORITY_LIMIT}, got {value}")
        return value

    default = bounded(r, "default", r.get("default", int, 0))
    cap = bounded(r, "max", r.get("max", int, 0))
    caps = r.get("maxByNamespace", dict, {})
    by_namespace = {str(ns): bounded(r, f"maxByNamespace.{ns}", value)
                    for ns, value in caps.items()}
    r.done()
    return PriorityPolicy(default=default, max=cap,
                          max_by_namespace=MappingProxyType(by_namespace))


def _webhook(r: _Reader, base: Path) -> WebhookSettings:
    """``webhook``: the shared hub's admission webhook (see ``WebhookSettings``)."""
    url = r.get("url", str, None)
    if url is not None and not url.startswith("https://"):
        r.used.add("url")
        raise r.error("url", f"must be an https:// URL (the apiserver calls webhooks over "
                             f"TLS only), got {url!r}")
    settings = WebhookSettings(
        address=r.get("address", str, "0.0.0.0"), port=r.integer("port", 9443, minimum=1),
        cert_dir=_path(r.get("certDir", str, None), base),
        secret_name=r.get("secretName", str, "dispatcher-webhook-cert"),
        configuration=r.get("configurationName", str, "dispatcher"),
        service_name=r.get("serviceName", str, "dispatcher-webhook"), url=url,
        hosts=r.strings("hosts"))
    r.done()
    return settings


def _control(r: _Reader, *, hub_mode: str, base: Path) -> ControlSettings:
    watch = r.section("watch")
    namespaces, selector = watch.strings("namespaces"), watch.get("labelSelector", str, "")
    watch.done()
    placement = r.section("placement")
    policy = placement.choice("defaultPolicy", "most-free", PLACEMENT_POLICIES)
    placement.done()
    submit = r.section("submit")
    create_ns = submit.get("createNamespaces", bool, False)
    psa_floor = submit.choice("podSecurityFloor", "baseline", LEVELS)
    weaker = submit.choice("weakerMemberNamespaces", "refuse", WEAKER_NAMESPACES)
    admission_check = submit.get("admissionCheck", bool, True)
    tpl = submit.section("podTemplate")
    mutations = PodMutations(labels=tpl.string_map("labels"),
                             annotations=tpl.string_map("annotations"),
                             scheduler_name=tpl.get("schedulerName", str, None) or None,
                             priority_class_name=tpl.get("priorityClassName", str, None)
                             or None)
    pod_fields = _pod_fields(tpl)
    tpl.done()
    submit.done()
    queue = r.section("queue")
    backfill = queue.integer("backfillLimit", 50)
    pending_refresh = queue.number("pendingRefresh", DEFAULT_REFRESH_S)
    priority = _priority(queue.section("priority"))
    queue.done()
    res = r.section("reservations")
    ttl = res.number("ttl", 300.0, strict=True)
    res.done()
    fo = r.section("failover")
    rules = Rules(policy=fo.choice("policy", "if-not-started", POLICIES),  # type: ignore[arg-type]
                  member_lost_after=fo.number("memberLostAfter", 300.0),
                  stuck_after=fo.number("stuckAfter", 0.0),
                  max_attempts=fo.integer("maxAttempts", 3, minimum=1),
                  pending_refresh_s=pending_refresh)
    fo.done()
    sweep = r.section("sweep")
    sweep_interval = sweep.number("interval", 60.0, strict=True)
    sweep.done()
    le = r.section("leaderElection")
    leader = LeaderSettings(enabled=le.get("enabled", bool, True),
                            namespace=le.get("namespace", str, "dispatcher-system"),
                            name=le.get("name", str, "dispatcher"),
                            lease_duration_s=le.number("leaseDuration", 15.0, strict=True),
                            renew_every_s=le.number("renewEvery", 5.0, strict=True))
    if leader.renew_every_s >= leader.lease_duration_s:
        raise le.error("renewEvery", f"must be below leaseDuration "
                                     f"({leader.lease_duration_s:g}), got "
                                     f"{leader.renew_every_s:g}")
    le.done()
    srv = r.section("server")
    server = ServerSettings(address=srv.get("address", str, "0.0.0.0"),
                            port=srv.integer("port", 8080),
                            fleet_view=srv.get("fleetView", bool, False))
    if server.fleet_view and not server.port:
        raise srv.error("fleetView", "needs the server: set server.port (0 turns it off)")
    srv.done()
    lg = r.section("log")
    level = lg.choice("level", "info", LOG_LEVELS)
    lg.done()
    hub_id = r.get("hubId", str, "hub")
    if not hub_id:
        raise r.error("hubId", "must not be empty")
    return ControlSettings(
        webhook=_webhook(r.section("webhook"), base), hub_mode=hub_mode,
        hub_id=hub_id, namespaces=namespaces, label_selector=selector, default_policy=policy,
        create_namespaces=create_ns, pod_security_floor=psa_floor,
        weaker_member_namespaces=weaker,
        admission_check=admission_check, pod_mutations=mutations, pod_fields=pod_fields,
        backfill_limit=backfill,
        priority=priority,
        reservation_ttl_s=ttl, rules=rules, sweep_interval_s=sweep_interval,
        workers=r.integer("workers", 64, minimum=1), record_events=r.get("events", bool, True),
        leader=leader, server=server, log_level=level)


def parse(data: Any, *, source: str, base: Path) -> Config:
    """Validate a parsed config document (see the module docstring)."""
    r = _Reader(data, path="", source=source)
    hub = r.section("hub")
    hub_kubeconfig = _path(hub.get("kubeconfig", str, None), base)
    hub_context = hub.get("context", str, None)
    hub_mode = hub.choice("mode", "dedicated", HUB_MODES)
    hub.done()
    definitions = tuple(_path(p, base) or p for p in r.strings("definitions"))
    control = _control(r, hub_mode=hub_mode, base=base)
    fleet = _fleet(r.section("fleet"), base)
    r.done()
    return Config(source=source, hub_kubeconfig=hub_kubeconfig, hub_context=hub_context,
                  definitions=definitions, control=control, fleet=fleet)


def apply_override(data: dict[str, Any], assignment: str, *, flag: str = "--set") -> None:
    """Apply ``key.path=value`` (value parsed as YAML) to a raw config document."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"{flag} {assignment!r}: expected KEY.PATH=VALUE")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{flag} {assignment!r}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def load(path: str | Path | None, *, overrides: Sequence[str] = (),
         edit: Callable[[dict[str, Any]], None] | None = None) -> Config:
    """Read, override and validate; ConfigError names the file and the key."""
    if path is None:
        data: Any = {}
        source, base = "<defaults>", Path.cwd()
    else:
        file = Path(path)
        source, base = str(path), file.resolve().parent
        try:
            data = yaml.safe_load(file.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{source}:{where}: not valid YAML: "
                              f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping")
    for assignment in overrides:
        apply_override(data, assignment)
    if edit is not None:
        edit(data)
    return parse(data, source=source, base=base)
