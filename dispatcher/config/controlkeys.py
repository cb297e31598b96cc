"""The controller's sections of the config file: watch, placement, submit, queue,
reservations, failover, sweep, leaderElection, server, log, webhook and the top-level keys
of the control loop (``hubId``, ``workers``, ``events``)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from dispatcher.config.reader import Reader, config_path
from dispatcher.control.core.copies import PodMutations
from dispatcher.control.core.decide import Rules
from dispatcher.control.core.pending import DEFAULT_REFRESH_S
from dispatcher.control.core.podpolicy import Allowed, PodFieldPolicy
from dispatcher.control.core.priority import PRIORITY_LIMIT, PriorityPolicy
from dispatcher.control.settings import (
    MODES,
    ControlSettings,
    LeaderSettings,
    ServerSettings,
    WebhookSettings,
)
from dispatcher.kube.podsecurity import LEVELS

__all__ = ["control_settings"]

POLICIES = ("never", "if-not-started", "always")
PLACEMENT_POLICIES = ("most-free", "best-fit")
LOG_LEVELS = ("debug", "info", "warning", "error")
WEAKER_NAMESPACES = ("refuse", "allow")


def _allowed(r: Reader) -> Allowed:
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


def _pod_fields(tpl: Reader) -> PodFieldPolicy:
    """The scheduling fields tenants' pod templates may set (``control.core.podpolicy``):
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


def _priority(r: Reader) -> PriorityPolicy:
    """``queue.priority``: default, max, maxByNamespace (integers within the sane range)."""

    def bounded(reader: Reader, name: str, value: Any) -> int:
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


def _webhook(r: Reader, base: Path) -> WebhookSettings:
    """``webhook``: the shared hub's admission webhook (see ``WebhookSettings``)."""
    url = r.get("url", str, None)
    if url is not None and not url.startswith("https://"):
        r.used.add("url")
        raise r.error("url", f"must be an https:// URL (the apiserver calls webhooks over "
                             f"TLS only), got {url!r}")
    settings = WebhookSettings(
        address=r.get("address", str, "127.0.0.1"), port=r.integer("port", 9443, minimum=1),
        cert_dir=config_path(r.get("certDir", str, None), base),
        secret_name=r.get("secretName", str, "dispatcher-webhook-cert"),
        configuration=r.get("configurationName", str, "dispatcher"),
        service_name=r.get("serviceName", str, "dispatcher-webhook"), url=url,
        hosts=r.strings("hosts"), drain_s=r.number("drainSeconds", 5.0, minimum=0))
    r.done()
    return settings


def control_settings(r: Reader, *, hub_mode: str, base: Path) -> ControlSettings:
    """The control loop's settings, its sections read in the order of the file's
    documentation (the first bad key is the one reported)."""
    watch = r.section("watch")
    namespaces, selector = watch.strings("namespaces"), watch.get("labelSelector", str, "")
    watch.done()
    placement = r.section("placement")
    policy = placement.choice("defaultPolicy", "most-free", PLACEMENT_POLICIES)
    placement.done()
    submit = _submit(r.section("submit"))
    queue = r.section("queue")
    backfill = queue.integer("backfillLimit", 50)
    claim_after = queue.number("claimAfter", 300.0)
    pending_refresh = queue.number("pendingRefresh", DEFAULT_REFRESH_S)
    priority = _priority(queue.section("priority"))
    queue.done()
    res = r.section("reservations")
    ttl = res.number("ttl", 300.0, strict=True)
    res.done()
    rules = _failover(r.section("failover"), pending_refresh_s=pending_refresh)
    sweep = r.section("sweep")
    sweep_interval = sweep.number("interval", 60.0, strict=True)
    sweep.done()
    leader = _leader(r.section("leaderElection"))
    server = _server(r.section("server"))
    lg = r.section("log")
    level = lg.choice("level", "info", LOG_LEVELS)
    lg.done()
    hub_id = r.get("hubId", str, "hub")
    if not hub_id:
        raise r.error("hubId", "must not be empty")
    mode = r.choice("mode", "dispatch", MODES)
    mk = r.section("multiKueue")
    admit_within = mk.number("admitWithin", 300.0)
    mk.done()
    return ControlSettings(
        mode=mode, multikueue_admit_within_s=admit_within,
        webhook=_webhook(r.section("webhook"), base), hub_mode=hub_mode,
        hub_id=hub_id, namespaces=namespaces, label_selector=selector, default_policy=policy,
        **submit, backfill_limit=backfill, claim_after_s=claim_after, priority=priority,
        reservation_ttl_s=ttl, rules=rules, sweep_interval_s=sweep_interval,
        workers=r.integer("workers", 64, minimum=1), record_events=r.get("events", bool, True),
        leader=leader, server=server, log_level=level)


def _submit(submit: Reader) -> dict[str, Any]:
    """``submit``: what copies carry and how member namespaces are treated (the
    ``ControlSettings`` fields by name)."""
    create_ns = submit.get("createNamespaces", bool, False)
    psa_floor = submit.choice("podSecurityFloor", "baseline", LEVELS)
    weaker = submit.choice("weakerMemberNamespaces", "refuse", WEAKER_NAMESPACES)
    admission_check = submit.get("admissionCheck", bool, True)
    prefer_planned = submit.get("preferPlannedNodes", bool, True)
    tpl = submit.section("podTemplate")
    mutations = PodMutations(labels=tpl.string_map("labels"),
                             annotations=tpl.string_map("annotations"),
                             scheduler_name=tpl.get("schedulerName", str, None) or None,
                             priority_class_name=tpl.get("priorityClassName", str, None)
                             or None)
    pod_fields = _pod_fields(tpl)
    tpl.done()
    submit.done()
    return {"create_namespaces": create_ns, "pod_security_floor": psa_floor,
            "weaker_member_namespaces": weaker, "admission_check": admission_check,
            "prefer_planned_nodes": prefer_planned, "pod_mutations": mutations,
            "pod_fields": pod_fields}


def _failover(fo: Reader, *, pending_refresh_s: float) -> Rules:
    """``failover``: the failover and stuck rules (with ``queue.pendingRefresh``, read
    before: the rules ``decide`` applies)."""
    rules = Rules(policy=fo.choice("policy", "if-not-started", POLICIES),  # type: ignore[arg-type]
                  member_lost_after=fo.number("memberLostAfter", 300.0),
                  stuck_after=fo.number("stuckAfter", 0.0),
                  gang_stall_after=fo.number("gangStalledAfter", 120.0),
                  unadmitted_after=fo.number("unadmittedAfter", 300.0),
                  max_attempts=fo.integer("maxAttempts", 3, minimum=1),
                  pending_refresh_s=pending_refresh_s)
    fo.done()
    return rules


def _leader(le: Reader) -> LeaderSettings:
    """``leaderElection``: the Lease, renewed well within its duration."""
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
    return leader


def _server(srv: Reader) -> ServerSettings:
    """``server``: metrics, health and the fleet view (which needs the server)."""
    server = ServerSettings(address=srv.get("address", str, "127.0.0.1"),
                            port=srv.integer("port", 8080),
                            fleet_view=srv.get("fleetView", bool, False))
    if server.fleet_view and not server.port:
        raise srv.error("fleetView", "needs the server: set server.port (0 turns it off)")
    srv.done()
    return server
