"""``dispatcher run`` assembled: config -> clients, fleet, leader election, controller, server.

The only place that builds the real objects; everything it wires takes them as arguments.
Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when leadership was lost (a new
leader may already act, so this replica stops at once), 2 for configuration problems, 3 when
a background task crashed (the replica stops cleanly, releasing its Lease, so that it is
restarted and a standby can take over instead of running on with a dead watcher).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from dispatcher.aiotasks import on_crash
from dispatcher.config import Config
from dispatcher.control.controller import Controller
from dispatcher.control.core.hubhold import HoldScope
from dispatcher.control.fleetview import LiveFleet
from dispatcher.control.leader import HUB_MODE_ANNOTATION, LeaderElector
from dispatcher.control.observe import Metrics, configure_logging, serve
from dispatcher.control.settings import MULTIKUEUE_DISPATCHER, ControlSettings
from dispatcher.fleet.kubeconfigs import INSECURE, KubeconfigProblem, transport_risk
from dispatcher.fleet.runtime import Fleet
from dispatcher.kube.client import KubeClient, observe_requests
from dispatcher.kube.errors import KubeError
from dispatcher.shell import fleetpage
from dispatcher.shell.hubmode import hub_warnings
from dispatcher.shell.webhook import HubWebhook
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import WorkloadError

__all__ = ["check_hub", "hub_kubeconfig_path", "load_catalog", "run"]

log = structlog.get_logger("dispatcher")

def hub_kubeconfig_path(config: Config) -> Path:
    """The hub kubeconfig: the config's, else $KUBECONFIG (first entry), else ~/.kube/config."""
    if config.hub_kubeconfig:
        return Path(config.hub_kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return Path(env.split(os.pathsep)[0]).expanduser()
    return Path.home() / ".kube" / "config"


def load_catalog(config: Config) -> Catalog:
    """The built-in catalog, with the config's definitions merged over it."""
    catalog = Catalog.builtin()
    if config.definitions:
        catalog = Catalog.merged(catalog, Catalog.load(config.definitions))
    return catalog


async def _hub_client(config: Config) -> KubeClient:
    path = hub_kubeconfig_path(config)
    data: Any = await asyncio.to_thread(lambda: yaml.safe_load(path.read_text()))
    # The hub kubeconfig is the operator's own input (it may reference files, as the
    # shipped in-cluster one does): an insecure transport is warned about, not refused.
    try:
        risk = transport_risk(data, context=config.hub_context) if isinstance(data, dict) else ""
    except KubeconfigProblem:
        risk = ""  # the client below says what is wrong with it
    if risk:
        log.warning("hub.tls_unverified", kubeconfig=str(path), reason=risk,
                    hint=f"the hub kubeconfig {INSECURE[risk]}")
    return await KubeClient.from_kubeconfig(data, name="hub", context=config.hub_context)


async def check_hub(config: Config) -> list[str]:
    """Warnings about the hub against ``hub.mode`` (``run --check``); an unreachable hub is
    a warning too, never an error: the check is advice."""
    if config.control.mode == MULTIKUEUE_DISPATCHER:
        return []  # before reading the hub: nothing to check (``_mode_warnings``)
    try:
        hub = await _hub_client(config)
    except (OSError, ValueError, KubeError) as exc:
        return [f"could not read the hub to check hub.mode: {exc}"]
    try:
        return await _mode_warnings(hub, config.control)
    finally:
        await hub.close()


async def _mode_warnings(hub: KubeClient, settings: ControlSettings) -> list[str]:
    """``hub_warnings`` for the controller's hub mode; none as MultiKueue's dispatcher: it
    makes no copy of its own to hold, and Kueue's webhooks on the hub are its install."""
    if settings.mode == MULTIKUEUE_DISPATCHER:
        return []
    return await hub_warnings(hub, mode=settings.hub_mode,
                              own_webhook=settings.webhook.configuration)


async def _start_webhook(settings: ControlSettings, hub: KubeClient, controller: Controller,
                         stops: _Stops) -> None:
    """Serve and register the shared hub's webhook. Every replica serves it and is Ready
    once it does (the decision needs only the catalog, which every replica follows), so
    the Service reaches them all and a leader's restart refuses nothing."""
    scope = HoldScope.watching(namespaces=settings.namespaces, own=settings.leader.namespace,
                               selector=settings.label_selector)
    webhook = HubWebhook(hub=hub, settings=settings.webhook,
                         namespace=settings.leader.namespace,
                         catalog=lambda: controller.live.current, scope=scope)
    controller.live.subscribe(lambda _old, _new: webhook.catalog_changed())
    stops.webhook = await webhook.start()
    stops.drain = webhook.drain


@dataclass
class _Stops:
    """What ``run`` must stop on the way out, filled in as each part starts."""

    server: Callable[[], Awaitable[None]] | None = None
    webhook: Callable[[], Awaitable[None]] | None = None
    drain: Callable[[], None] | None = None  # the webhook's answers close their connections
    definitions: Callable[[], Awaitable[None]] | None = None
    serving: bool = False  # the shared hub's webhook answers (a replica's readiness there)
    stopping_at: float | None = None  # loop time the stop was asked for


async def _drain(stops: _Stops, *, seconds: float) -> None:
    """Keep a stopping replica's webhook serving, unready, for ``seconds`` after the stop
    was asked: a Service sends new calls to it until its EndpointSlice drops it, and a
    call refused meanwhile is a refused create (the apiserver does not retry it). Its
    answers close their connections meanwhile, so the apiserver's kept-open ones move to
    the other replicas before this one closes."""
    if stops.webhook is None or stops.stopping_at is None:
        return
    if stops.drain is not None:
        stops.drain()
    left = stops.stopping_at + seconds - asyncio.get_running_loop().time()
    if left > 0:
        log.info("webhook.draining", seconds=round(left, 1))
        await asyncio.sleep(left)


async def run(config: Config) -> int:
    """Run the controller until SIGTERM/SIGINT (0), leadership loss (1) or a crashed
    background task (3)."""
    configure_logging(level=config.control.log_level)
    settings = config.control
    try:
        catalog = load_catalog(config)
    except WorkloadError as exc:
        log.error("catalog.invalid", message=str(exc)[:2000])
        return 2
    hub = await _hub_client(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    crashed: list[str] = []
    stops = _Stops()

    async def unready_on_stop() -> None:
        await stop.wait()
        stops.serving, stops.stopping_at = False, loop.time()
        if stops.drain is not None:
            stops.drain()

    unready = asyncio.ensure_future(unready_on_stop())

    def crash(task: str, _: BaseException) -> None:
        crashed.append(task)
        stop.set()

    remove_crash_hook = on_crash(crash)
    metrics = Metrics.create()
    observed = observe_requests(metrics.request_observer(hub))
    kinds = [d.gvk for d in catalog.definitions]
    fleet = LiveFleet(Fleet(hub=hub, settings=config.fleet, kinds=kinds))
    controller = Controller(settings=settings, catalog=catalog, hub=hub, fleet=fleet,
                            metrics=metrics)
    code = 0
    try:
        await _start_surfaces(config, hub, controller, metrics, stops, stop=stop)
        led = await _lead(settings, hub, controller=controller, fleet=fleet, metrics=metrics,
                          stop=stop, crashed=crashed)
        if led is None:
            return 0  # stopped before leading
        code = led
    finally:
        metrics.leader.set(0)
        observe_requests(observed)
        remove_crash_hook()
        unready.cancel()
        await _drain(stops, seconds=settings.webhook.drain_s)
        if stops.webhook is not None:
            await stops.webhook()
        if stops.definitions is not None:
            await stops.definitions()
        if stops.server is not None:
            await stops.server()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await hub.close()
    log.info("controller.stopped", code=code)
    return code


async def _start_surfaces(config: Config, hub: KubeClient, controller: Controller,
                          metrics: Metrics, stops: _Stops, *, stop: asyncio.Event) -> None:
    """The metrics/health server (and fleet view), the hub mode checks, the webhook of a
    shared hub: what runs whether or not this replica leads."""
    settings = config.control
    shared = settings.hub_mode == "shared"
    if settings.server.port:
        # /readyz: on a shared hub, the webhook serves (every replica: the Service's
        # endpoints); else the controller leads and runs
        ready = (lambda: stops.serving) if shared else controller.ready
        stops.server = await serve(metrics=metrics, address=settings.server.address,
                                   port=settings.server.port, ready=ready,
                                   pages=fleetpage.pages(controller)
                                   if settings.server.fleet_view else ())
    log.info("controller.starting", config=config.source, hub=hub.server,
             hub_id=settings.hub_id, definitions=len(controller.live.base),
             hub_mode=settings.hub_mode, fleet_view=settings.server.fleet_view)
    for warning in await _mode_warnings(hub, settings):
        log.warning("hub.mode_mismatch", hub_mode=settings.hub_mode, message=warning)
    if shared:
        await controller.follow_definitions(stop, report=False)
        stops.definitions = controller.definitions.stop
        await _start_webhook(settings, hub, controller, stops)
        stops.serving = True


async def _lead(settings: ControlSettings, hub: KubeClient, *, controller: Controller,
                fleet: LiveFleet, metrics: Metrics, stop: asyncio.Event, crashed: list[str]
                ) -> int | None:
    """Win the lease (when leader election is on), then run the fleet and the controller
    until ``stop``; the exit code, or None when stopped before leading."""
    elector: LeaderElector | None = None
    if settings.leader.enabled:
        elector = LeaderElector(
            client=hub, namespace=settings.leader.namespace, name=settings.leader.name,
            identity=f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}",
            lease_duration=settings.leader.lease_duration_s,
            renew_every=settings.leader.renew_every_s,
            annotations={HUB_MODE_ANNOTATION: settings.hub_mode})
        acquire = asyncio.ensure_future(elector.acquire())
        halt = asyncio.ensure_future(stop.wait())
        await asyncio.wait({acquire, halt}, return_when=asyncio.FIRST_COMPLETED)
        if not acquire.done():
            acquire.cancel()
            return None
        halt.cancel()
        holder = asyncio.ensure_future(elector.hold())
        lost = asyncio.ensure_future(elector.lost.wait())
        lost.add_done_callback(lambda _: stop.set())
    metrics.leader.set(1)
    await fleet.start()
    try:
        await controller.run(stop)
    finally:
        await fleet.stop()  # bounded: each connection cancels and awaits its own tasks
    code = 0
    if elector is not None and elector.lost.is_set():
        code = 1
    elif crashed:
        code = 3
        log.error("controller.task_crashed", tasks=crashed)
    if elector is not None:
        holder.cancel()
        lost.cancel()
        await elector.release()
    return code
