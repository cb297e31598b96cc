"""The shell around ``copyplan.plan``: gather its input, run it where the definition may run.

Called by the reconciler between ``decide`` and the member writer, for SUBMIT and
UPDATE_COPY: the resolution is the one placing used (``Resolutions``, kept per generation:
no second evaluation; ``prepare`` resolves a spec changed since, and raises a busy host's
``EvaluationUnavailable`` for the worker's back-off); the gang mechanism is the member's
(its MemberCluster's, checked against discovery: a member that stopped serving the API
gets none) for a submit, and the one the copy was created with for an update; for a member
whose Kubernetes minor lacks a Pod Security check, the hub namespace's level
(``namespaces.MemberNamespaces.required``), so the plan runs that check itself. A tenant's
definition runs the plan on the evaluator's threads in its namespace's turn: its path
expressions must not hold the event loop, nor another tenant's turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from dispatcher.control import gangwrites
from dispatcher.control.caches import CopyCache
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.copyplan import CopyPlan, PlanInput, namespace_of, plan
from dispatcher.control.core.gangsched import mechanism_of
from dispatcher.control.core.topology import carries_planned
from dispatcher.control.fleetview import FleetView
from dispatcher.control.resolutions import Resolutions
from dispatcher.control.settings import ControlSettings
from dispatcher.fleet.queueing import NONE as NONE_QUEUE
from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.kube import podsecurity
from dispatcher.kube.gangapis import NONE, Mechanism, minor_number
from dispatcher.placement.model import GangDomain
from dispatcher.workloads.bounded import DefinitionQuarantined

__all__ = ["CopyPlanner"]

Planned = CopyPlan | Rejection


class CopyPlanner:
    """Plans the copies of the control loop (one instance, shared by all workers)."""

    def __init__(self, *, settings: ControlSettings, live: LiveCatalog,
                 resolutions: Resolutions, fleet: FleetView, copies: CopyCache,
                 pod_security: Callable[[str, str], Awaitable[podsecurity.Policy | Rejection]]
                 | None = None) -> None:
        self.settings = settings
        self.pod_security = pod_security
        """(member, namespace) -> the hub namespace's required level; None: never read."""
        self.live = live
        self.resolutions = resolutions
        self.fleet = fleet
        self.copies = copies

    async def submit(self, uid: str, *, cluster: str, workload: Mapping[str, Any],
                     domains: Sequence[GangDomain] = (), nodes: Sequence[str] = ()
                     ) -> Planned:
        """The copy to create on ``cluster`` (its GPU pods prefer ``nodes``)."""
        snapshot = self.fleet.snapshot(cluster)
        return await self._plan(uid, cluster=cluster, workload=workload, domains=domains,
                                nodes=nodes, snapshot=snapshot,
                                mechanism=await self._mechanism(cluster, snapshot),
                                dry_run=self.settings.admission_check)

    async def update(self, uid: str, *, cluster: str, workload: Mapping[str, Any],
                     domains: Sequence[GangDomain] = (), nodes: Sequence[str] = ()
                     ) -> Planned | None:
        """The copy whose spec an update writes on ``cluster``; None without a copy."""
        found = self.copies.get(cluster, uid)
        if found is None:
            return None
        if nodes and not carries_planned(found.obj.get("spec"), nodes):
            nodes = ()  # made without the terms: its templates stay as they are
        return await self._plan(uid, cluster=cluster, workload=workload, domains=domains,
                                nodes=nodes, snapshot=self.fleet.snapshot(cluster),
                                mechanism=mechanism_of(found.obj), dry_run=False)

    async def _plan(self, uid: str, *, cluster: str, workload: Mapping[str, Any],
                    domains: Sequence[GangDomain], nodes: Sequence[str],
                    snapshot: MemberSnapshot | None,
                    mechanism: Mechanism, dry_run: bool) -> Planned:
        await self.resolutions.prepare(uid, workload)
        definition = self.live.current.find(str(workload.get("apiVersion")),
                                            str(workload.get("kind")))
        wanted = await self._wanted(cluster, namespace_of(workload), snapshot)
        if isinstance(wanted, Rejection):
            return wanted
        given = PlanInput(uid=uid, member=cluster, workload=workload, definition=definition,
                          resolution=self.resolutions.get(uid, workload),
                          hub_id=self.settings.hub_id, mechanism=mechanism,
                          queueing=snapshot.queueing if snapshot is not None
                          else Queueing(system=NONE_QUEUE),
                          domains=tuple(domains), nodes=tuple(nodes),
                          mutations=self.settings.pod_mutations,
                          pod_fields=self.settings.pod_policy, dry_run=dry_run,
                          member_version=snapshot.kubernetes_version
                          if snapshot is not None else None, pod_security=wanted)
        try:
            if definition is None or self.live.trusted(definition):
                return plan(given)
            evaluator = self.live.evaluator
            locate = evaluator.locator(definition, subject=workload)
            return await evaluator.run(namespace_of(workload),
                                       lambda: plan(given, locate=locate))
        except DefinitionQuarantined as exc:
            self.live.notify_quarantine()
            return Rejection.of(cluster, status=0, reason="CopyInvalid", message=str(exc))

    async def _wanted(self, cluster: str, namespace: str, snapshot: MemberSnapshot | None
                      ) -> podsecurity.Policy | Rejection | None:
        """The hub namespace's Pod Security level, when the member's minor lacks a check
        some level has (``podsecurity.lacking``); None otherwise (nothing read)."""
        version = snapshot.kubernetes_version if snapshot is not None else None
        strictest = podsecurity.Policy("restricted")
        if self.pod_security is None or not podsecurity.lacking(
                strictest, minor_number(version)):
            return None
        return await self.pod_security(cluster, namespace)

    async def _mechanism(self, cluster: str, snapshot: MemberSnapshot | None) -> Mechanism:
        """The member's gang mechanism (its MemberCluster's), ``none`` when the member does
        not serve its API right now (discovery, cached per client)."""
        mechanism = snapshot.gang_mechanism if snapshot is not None else NONE
        if mechanism == NONE:
            return NONE
        client = self.fleet.client(cluster)
        return NONE if client is None else await gangwrites.usable(client, mechanism)
