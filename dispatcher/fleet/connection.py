"""One member cluster's connection: client, Node/Pod watches, health, version, served kinds.

The fleet runtime (``fleet.runtime``) keeps one ``MemberConnection`` per member and nothing
else touches a member's client (Kueue's remoteClient is the model). A connection runs one
supervisor task:

    load kubeconfig -> client -> /version -> discover kinds -> session:
        Node informer  -> ClusterCapacity (rebuilt from each Listed, Changed applied)
        Pod informer   -> ClusterCapacity (bound, non-terminated pods only), then
                          MemberReservations (a workload's bound pods shrink its reservation)
        Kueue informers -> QuotaObjects (a Kueue member's ClusterQueues, LocalQueues,
                          ResourceFlavors and the quota its Workloads hold; unreadable ones
                          are retried, never fail the session: quota then does not bound
                          placement there)
        probe loop     -> lastSeen; a failed probe ends the session
        discovery loop -> served workload kinds
    any failure -> health.failed (first loss kept) -> tenacity backoff -> again

What the member serves is read by ``fleet/serving.py``; events reach capacity and
reservations through ``fleet/feed.py``.

A reload (the kubeconfig Secret changed) ends the session and reconnects at once. The
capacity object lives as long as the connection, so reservations and placement keep one
reference across reconnects; while the member is not Ready, placement skips it anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import structlog
import tenacity

from dispatcher.aiotasks import cancel_all, guarded
from dispatcher.fleet import feed, serving
from dispatcher.fleet import health as healthmod
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.kubeconfigs import INSECURE, SKIP_VERIFY, KubeconfigProblem, transport_risk
from dispatcher.fleet.members import MemberSpec
from dispatcher.fleet.queueing import KUEUE, Queueing
from dispatcher.fleet.quota import Kind, MemberQuota, QuotaObjects
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.settings import FleetSettings
from dispatcher.fleet.signals import Change
from dispatcher.kube import gangapis, retry, watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.gangapis import Mechanism
from dispatcher.kube.resources import NODES, PODS, GroupVersionKind, ResourceRef

__all__ = ["FIRST_REDISCOVERY_S", "POD_FIELD_SELECTOR", "Clock", "KubeconfigLoader",
           "MemberConnection", "NotConnected", "backoff", "rediscovery_wait"]

log = structlog.get_logger(__name__)

Clock = Callable[[], datetime]
KubeconfigLoader = Callable[[], Awaitable[tuple[dict[str, Any], str]]]
"""Returns (kubeconfig, credentials version); raises KubeconfigProblem when unusable."""

# Only pods that can hold GPUs: bound and not terminated. A pod that finishes leaves the
# selector, and the watch reports it as DELETED.
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def backoff(settings: FleetSettings) -> tenacity.wait.wait_base:
    """Exponential from ``reconnect_initial_s`` up to ``reconnect_max_s``, with jitter of the
    same size as the first step (members lost together do not reconnect in lockstep)."""
    return tenacity.wait_exponential_jitter(multiplier=settings.reconnect_initial_s,
                                            jitter=settings.reconnect_initial_s,
                                            max=settings.reconnect_max_s)


class NotConnected(RuntimeError):
    """The member has no working connection right now."""


class _SessionEnded(Exception):
    """The session ended after the member had been healthy (start over, fresh backoff)."""


class MemberConnection:
    """The live link to one member. ``start()`` it, ``stop()`` it; read its attributes.

    ``on_change`` is called (synchronously, from the event loop) with what changed:
    ``Change.CAPACITY`` for node and pod events, ``Change.STATE`` for the client, health,
    version, served kinds or spec; it must be cheap (the runtime bumps this member's
    pulses).
    """

    def __init__(self, *, spec: MemberSpec, load: KubeconfigLoader, settings: FleetSettings,
                 clock: Clock, kinds: Sequence[GroupVersionKind],
                 on_change: Callable[[Change], None]) -> None:
        self.spec = spec
        self.capacity = ClusterCapacity()
        self.reservations = MemberReservations(member=spec.name, capacity=self.capacity)
        self.health = healthmod.initial()
        self.kubernetes_version: str | None = None
        self.insecure_transport = ""
        """Why the current connection is not verified TLS (``kubeconfigs.INSECURE``'s keys:
        plain http or insecure-skip-tls-verify, allowed by fleet.allowInsecureTLS); ''."""
        # uid of the member's kube-system namespace: the same cluster registered twice
        # shows up as two members with one id (None: not readable)
        self.cluster_id: str | None = None
        self.served: frozenset[GroupVersionKind] | None = None
        """The catalog's kinds the member serves; None until known."""
        self.resources: Mapping[GroupVersionKind, ResourceRef] = {}
        """The discovered resource of each served kind: discovered once, here, for everyone
        (the copy watches read it too)."""
        self.gang_discovered: Mechanism | None = None
        """The gang mechanism the member's served APIs point to (``kube.gangapis``); None
        until discovered."""
        self.kueue_discovered: bool | None = None
        """Whether the member serves Kueue's queue APIs (None: not asked yet)."""
        self.quota_objects = QuotaObjects()
        self._kueue: Mapping[Kind, ResourceRef] = {}
        self.kueue_workloads: ResourceRef | None = None
        """Kueue's Workload resource on a Kueue member (the copies' admissions are read
        from it, ``control.watchers``); None elsewhere."""
        self.synced = False
        """Whether capacity was listed at least once (it may be stale while not Ready)."""
        self.credentials_version: str | None = None
        self._client: KubeClient | None = None  # published once the member answered
        self._opened: KubeClient | None = None  # this session's client, to close
        self._load = load
        self._settings = settings
        self._clock = clock
        self._kinds = tuple(kinds)
        self._notify = on_change
        self._reload = asyncio.Event()
        self._rediscover_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listed: set[str] = set()
        self._unreachable_after = timedelta(seconds=settings.unreachable_after_s)
        self._log = log.bind(member=spec.name)

    # -- public surface ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def client(self) -> KubeClient:
        """The member's client while connected; NotConnected otherwise."""
        if self._client is None:
            raise NotConnected(f"member {self.name} is not connected: "
                               f"{self.health.reason}: {self.health.message}")
        return self._client

    @property
    def tls_verified(self) -> bool:
        """Whether the member's identity is verified (False only by the fleet's opt-in)."""
        return not self.insecure_transport

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def gang_mechanism(self) -> Mechanism:
        """The gang mechanism copies are built for: ``spec.gangScheduling``, else (auto)
        the discovered one."""
        return gangapis.effective(self.spec.gang_scheduling, self.gang_discovered)

    @property
    def queueing(self) -> Queueing:
        """How copies are queued there: ``spec.queueing``, its system resolved (auto: by
        the served APIs)."""
        return self.spec.queueing.effective(discovered=self.kueue_discovered)

    @property
    def quota(self) -> MemberQuota | None:
        """The member's queues for placement: on a Kueue member once all three kinds were
        listed; None otherwise (quota does not bound placement there)."""
        if self.queueing.system != KUEUE or not self.quota_objects.synced:
            return None
        return self.quota_objects.view()

    def set_kinds(self, kinds: Sequence[GroupVersionKind]) -> None:
        """Discover these workload kinds from now on (the live catalog changed): at once,
        not at the next discovery interval, so a new kind is placeable within seconds."""
        if tuple(kinds) != self._kinds:
            self._kinds = tuple(kinds)
            self._rediscover_now.set()

    def start(self) -> None:
        """Start the supervisor task (idempotent)."""
        if self._task is None:
            self._task = guarded(self._supervise(), name=f"member/{self.name}")

    async def stop(self) -> None:
        """Stop watching and close the client; returns once the supervisor and its session
        tasks have ended. The stopping flag ends the supervisor even when library code turns
        the cancellation into an ordinary error (aiohttp's request timeout reports a cancel
        that lands as its timer fires as TimeoutError), which would otherwise be retried."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            await cancel_all([task])
        await self._close()

    def reload(self) -> None:
        """Credentials changed: reconnect now (ends a session or a backoff wait)."""
        self._reload.set()

    def update_spec(self, spec: MemberSpec) -> None:
        """New labels, cordon or allowed namespaces (same credentials source)."""
        self.spec = spec
        self._notify(Change.STATE)

    def expire(self) -> None:
        """Re-evaluate Reachable against the clock (called while waiting)."""
        before = self.health
        self.health = healthmod.expire(before, now=self._clock(),
                                       unreachable_after=self._unreachable_after)
        if self.health != before:
            first = self.health.first_loss
            self._log.warning("member.unreachable", reason=str(self.health.reason),
                              since=first.isoformat() if first is not None else None)
            self._notify(Change.STATE)

    # -- supervisor ----------------------------------------------------------------------

    async def _supervise(self) -> None:
        """Reconnect until stopped (``kube.retry``); a session that had been healthy (or
        was ended by a reload) starts again at once with a fresh backoff."""
        await retry.forever(self._session, wait=backoff(self._settings),
                            sleep=self._backoff_sleep, retry_on=lambda exc: True,
                            restart_on=lambda exc: isinstance(exc, _SessionEnded),
                            stopping=lambda: self._stopping)

    async def _backoff_sleep(self, seconds: float) -> None:
        """Sleep between attempts; wake early on reload; turn unreachable on time."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (remaining := end - loop.time()) > 0:
            step = remaining
            deadline = healthmod.unreachable_deadline(
                self.health, unreachable_after=self._unreachable_after)
            if deadline is not None:
                step = min(step, max((deadline - self._clock()).total_seconds(), 0.0) + 0.05)
            try:
                await asyncio.wait_for(self._reload.wait(), step)
                return
            except TimeoutError:
                self.expire()

    async def _session(self) -> None:
        """Connect and watch until something fails; raises for failures before Ready."""
        self._reload.clear()
        was_ready = False
        try:
            client = await self._connect()
            try:
                await self._prepare(client)
                was_ready = await self._watch(client)
            finally:
                await self._close()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)
            if was_ready or self._reload.is_set():
                raise _SessionEnded from None
            raise
        raise _SessionEnded  # reload: reconnect at once

    async def _connect(self) -> KubeClient:
        self.insecure_transport = ""  # not connected: no insecure connection to report
        kubeconfig, version = await self._load()
        # Remembered before validation: a broken kubeconfig is retried when it changes.
        self.credentials_version = version
        # Before any request: a refused server never sees a byte, let alone a credential.
        risk = transport_risk(kubeconfig, context=self.spec.context)
        if risk:
            if not self._settings.allow_insecure_tls:
                fix = ("give it the member's CA" if risk == SKIP_VERIFY
                       else "use the member's https:// address")
                raise KubeconfigProblem(
                    f"the kubeconfig {INSECURE[risk]}: {fix}, or allow unverified members "
                    "with fleet.allowInsecureTLS: true", reason="KubeconfigInvalid")
            self._log.warning("member.tls_unverified", reason=risk,
                              hint=f"the kubeconfig {INSECURE[risk]} "
                                   "(allowed by fleet.allowInsecureTLS)")
        client = await KubeClient.from_kubeconfig(kubeconfig, name=self.name,
                                                  context=self.spec.context)
        self._opened = client
        self.insecure_transport = risk
        return client

    async def _close(self) -> None:
        client, self._opened, self._client = self._opened, None, None
        if client is not None:
            await client.close()

    async def _prepare(self, client: KubeClient) -> None:
        timeout = self._settings.request_timeout_s
        info = await client.request("GET", "/version", request_timeout=timeout)
        # Published only now: a reconnect attempt to a member still down is not connected.
        self._client = client
        version = str((info or {}).get("gitVersion", "")) or None
        recovered = self.health.first_loss is not None
        self.kubernetes_version = version
        self.cluster_id = await serving.cluster_id(
            client, request_timeout=self._settings.request_timeout_s, log=self._log)
        self.health = healthmod.connected(self.health, now=self._clock(),
                                          version=version or "?")
        event = "member.recovered" if recovered else "member.connected"
        self._log.info(event, server=client.server, version=version)
        await self._discover(client)
        self._notify(Change.STATE)

    async def _discover(self, client: KubeClient) -> None:
        client.discovery.forget()
        gang = await serving.gang_mechanism(client)
        if gang != self.gang_discovered:
            self.gang_discovered = gang
            self._log.info("member.gang_mechanism", discovered=gang,
                           spec=self.spec.gang_scheduling,
                           note=gangapis.note(self.kubernetes_version, gang) or None)
            self._notify(Change.STATE)
        resources = await serving.kueue_resources(client)
        kueue = resources is not None
        self.kueue_workloads = (resources or {}).get("workloads")
        if kueue != self.kueue_discovered:
            watching = bool(self._kueue)
            self.kueue_discovered = kueue
            self._kueue = resources or {}
            self._log.info("member.queueing", kueue=kueue, spec=self.spec.queueing.system)
            self._notify(Change.STATE)
            if watching != self._watches_queues():
                self._reload.set()  # start (or stop) the queue informers: a new session
        if not self._kinds:
            return  # no catalog given: served kinds stay unknown (None filters nothing)
        found = await serving.served_kinds(client, self._kinds)
        self.resources = found
        if frozenset(found) != self.served:
            self.served = frozenset(found)
            self._log.info("member.kinds", served=len(found), catalog=len(self._kinds))
            self._notify(Change.STATE)

    async def _watch(self, client: KubeClient) -> bool:
        """Run the session's loops until one fails or a reload comes; True once Ready."""
        self._listed = set()
        prefix = f"member/{self.name}"
        tasks: list[asyncio.Task[Any]] = [
            # Not ``guarded``: their failures are expected (member outages) and reported by
            # the supervisor as health, not as crashed tasks.
            asyncio.create_task(self._informer(client, "nodes"), name=f"{prefix}/nodes"),
            asyncio.create_task(self._informer(client, "pods"), name=f"{prefix}/pods"),
            asyncio.create_task(self._probe(client), name=f"{prefix}/probe"),
            asyncio.create_task(self._rediscover(client), name=f"{prefix}/discovery"),
            asyncio.create_task(self._reload.wait(), name=f"{prefix}/reload"),
        ]
        if self._watches_queues():
            tasks += [asyncio.create_task(self._queue_informer(client, kind, ref),
                                          name=f"{prefix}/{kind}")
                      for kind, ref in self._kueue.items()]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready = self.health.ready
            pending = [t for t in tasks if not t.done()]
            await cancel_all(pending)
        for task in done:
            exc = task.exception()
            if exc is not None:
                raise exc
        if not self._reload.is_set():
            raise RuntimeError("a member watch ended unexpectedly")
        self._log.info("member.reloading", reason="kubeconfig changed")
        return ready

    async def _informer(self, client: KubeClient, what: str) -> None:
        """List+watch nodes or pods; re-list every resync period."""
        ref = NODES if what == "nodes" else PODS
        selector = POD_FIELD_SELECTOR if what == "pods" else None
        while True:
            # informer() is an async generator; close it when the resync timer fires.
            stream = cast(AsyncGenerator[watch.Listed | watch.Changed, None], watch.informer(
                client, ref, field_selector=selector,
                timeout_seconds=self._settings.watch_timeout_s))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.resync_period_s), \
                        contextlib.aclosing(stream):
                    async for item in stream:
                        change = Change.CAPACITY
                        if isinstance(item, watch.Listed):
                            if self._relist(what, item.objects):
                                change |= Change.STATE
                        else:
                            self._apply(what, item)
                        self._notify(change)

    def _watches_queues(self) -> bool:
        return bool(self._kueue) and self.queueing.system == KUEUE

    async def _queue_informer(self, client: KubeClient, kind: Kind, ref: ResourceRef) -> None:
        """List+watch one Kueue kind into ``quota_objects``; a failure (no RBAC for it, a
        Kueue upgrade) is logged and retried after a resync period, the session goes on."""
        objects = self.quota_objects
        while True:
            stream = cast(AsyncGenerator[watch.Listed | watch.Changed, None], watch.informer(
                client, ref, timeout_seconds=self._settings.watch_timeout_s))
            try:
                async with asyncio.timeout(self._settings.resync_period_s), \
                        contextlib.aclosing(stream):
                    async for item in stream:
                        if isinstance(item, watch.Listed):
                            objects.relist(kind, item.objects)
                        else:
                            objects.apply(kind, item.type, item.object)
                        self._notify(Change.CAPACITY)
            except TimeoutError:
                continue
            except Exception as exc:  # any failure: quota unknown, retried
                objects.listed.discard(kind)
                self._notify(Change.CAPACITY)
                self._log.warning("member.quota_unreadable", kind=kind, error=str(exc),
                                  hint="placement there is bounded by nodes only; see "
                                       "deploy/member for the Kueue read rules")
                await asyncio.sleep(self._settings.resync_period_s)

    def _relist(self, what: str, objects: list[dict[str, Any]]) -> bool:
        """Replace nodes or pods; True when this made the member Ready (both listed)."""
        feed.relist(self.capacity, self.reservations, what, objects)
        self._listed.add(what)
        if self._listed >= {"nodes", "pods"} and not self.health.ready:
            self.synced = True
            self.health = healthmod.synced(self.health, now=self._clock())
            self._log.info("member.ready", nodes=self.capacity.node_count,
                           free=self.capacity.free)
            return True
        return False

    def _apply(self, what: str, change: watch.Changed) -> None:
        feed.apply(self.capacity, self.reservations, what, change)

    async def _probe(self, client: KubeClient) -> None:
        while True:
            await asyncio.sleep(self._settings.probe_interval_s)
            await client.request("GET", "/version",
                                 request_timeout=self._settings.request_timeout_s)
            self.health = healthmod.probed(self.health, now=self._clock())

    async def _rediscover(self, client: KubeClient) -> None:
        """Discover again every interval, or at once when asked (``set_kinds``). While the
        member serves fewer of the catalog's kinds than asked, sooner: an apiserver that
        just restarted registers its CRDs over a few seconds after it answers, and a kind
        found missing then would stay unwatched (its copies neither swept nor sent) for a
        whole interval."""
        soon = FIRST_REDISCOVERY_S
        while True:
            wait = rediscovery_wait(soon, interval=self._settings.discovery_interval_s,
                                    missing=self.served is not None
                                    and len(self.served) < len(self._kinds))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rediscover_now.wait(), wait)
            self._rediscover_now.clear()
            before = self.served
            await self._discover(client)
            soon = FIRST_REDISCOVERY_S if self.served != before \
                else min(soon * 2, self._settings.discovery_interval_s)

    def _failed(self, exc: BaseException) -> None:
        problem = healthmod.classify(exc)
        before = self.health
        self.health = healthmod.failed(before, now=self._clock(), problem=problem,
                                       unreachable_after=self._unreachable_after)
        after = self.health
        if (before.reason, before.ready, before.reachable) != (after.reason, after.ready,
                                                               after.reachable):
            # failing while within unreachableAfter; unreachable (as ``expire`` says) after.
            # A reconnect that fails past unreachableAfter turns it unreachable here, before
            # ``expire`` looks: said here then, or the SRE's log never says it.
            lost = "member.failing" if self.health.reachable else "member.unreachable"
            event = {"KubeconfigInvalid": "member.kubeconfig_invalid",
                     "SecretMissing": "member.secret_missing"}.get(problem.reason, lost)
            self._log.warning(event, reason=str(problem.reason), message=problem.message,
                              reachable=self.health.reachable)
        self._notify(Change.STATE)


FIRST_REDISCOVERY_S = 2.0
"""The first look again at a member missing some of the catalog's kinds (then doubled
while nothing changes, up to the discovery interval)."""


def rediscovery_wait(soon: float, *, interval: float, missing: bool) -> float:
    """Seconds until the next discovery: ``soon`` (capped by ``interval``) while kinds are
    missing, else the interval."""
    return min(soon, interval) if missing else interval
