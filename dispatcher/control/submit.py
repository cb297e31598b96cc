"""The member side of a dispatch: build the copy, ask the member's admission, create it,
update its spec, delete it (only if ours).

Every write's answer goes into the copy cache, so the next ``decide`` sees it. A refusal
that will not change by retrying (a 4xx, a kind not served, a copy that cannot be built)
comes back as a ``Rejection``; a transient failure raises for the worker's back-off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from dispatcher.control import dryrun, gangsched, gangwrites, podadmission
from dispatcher.control.caches import CopyCache, MemberCopy
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.copies import (
    Rejection,
    build_copy,
    delete_if_owned,
    owner_state,
    written_generation,
)
from dispatcher.control.decide import CopyState
from dispatcher.control.fleetview import FleetView
from dispatcher.control.memory import StepMemory
from dispatcher.control.names import HUB_GENERATION_ANNOTATION, PendingReason
from dispatcher.control.namespaces import MemberNamespaces, namespace_missing
from dispatcher.control.podpolicy import refusal
from dispatcher.control.readings import member_copy
from dispatcher.control.resolutions import Resolutions
from dispatcher.control.settings import ControlSettings
from dispatcher.control.topology import Domains
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.gangapis import NONE, Mechanism
from dispatcher.kube.patches import merge_diff
from dispatcher.kube.resources import ResourceRef
from dispatcher.placement.model import GangDomain
from dispatcher.workloads.bounded import (
    DefinitionQuarantined,
    EvaluationUnavailable,
    ObjectQuarantined,
)
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.gangs import gang_components
from dispatcher.workloads.model import Definition
from dispatcher.workloads.mutate import PodTemplate, pod_templates
from dispatcher.workloads.paths import in_process
from dispatcher.workloads.resolve import Resolution

__all__ = ["CopyUpdate", "MemberWrites"]

log = structlog.get_logger("dispatcher")

_T = TypeVar("_T")
_Built = tuple[dict[str, Any], list[dict[str, Any]], gangsched.GangPlan] | Rejection


class MemberWrites:
    """Writes to the members for the control loop (one instance, shared by all workers)."""

    def __init__(self, *, settings: ControlSettings, live: LiveCatalog, hub: KubeClient,
                 fleet: FleetView, copies: CopyCache, clock: Callable[[], float],
                 monotonic: Callable[[], float], memory: StepMemory,
                 resolutions: Resolutions | None = None) -> None:
        self.settings = settings
        self.memory = memory
        self.resolutions = resolutions
        self.live = live
        self.hub = hub
        self.fleet = fleet
        self.copies = copies
        self.clock = clock
        self.monotonic = monotonic
        self._admission = podadmission.Admission()
        self.namespaces = MemberNamespaces(settings=settings, hub=hub, monotonic=monotonic)
        self._pod_fields = settings.pod_policy

    async def create_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any],
                          domains: Sequence[GangDomain] = ()) -> bool | Rejection:
        """Create the copy on ``cluster``: True when it exists now (created or ours), False
        to look again later (not connected, or a foreign object holds the name), a
        ``Rejection`` when the member refused it for good (or it cannot be built).
        Transient failures (no answer, 429, 5xx) raise, for the worker's back-off.
        ``domains``: the decision's topology domains, which the copy's pods must keep to
        (``control.topology``)."""
        client = self.fleet.client(cluster)
        if client is None:
            return False
        namespace = str(workload["metadata"].get("namespace") or "default")
        refused = await self.refused_fields(uid, workload)  # its spec may have changed
        if refused is not None:
            return Rejection.of(cluster, status=0, reason=PendingReason.POD_TEMPLATE_REFUSED,
                                message=refused)
        built = await self._built(uid, workload, client=client, cluster=cluster,
                                  namespace=namespace, domains=domains)
        if isinstance(built, Rejection):
            return built
        body, pods, gang_plan = built
        ref = await client.discovery.resource(str(workload["apiVersion"]),
                                              str(workload["kind"]))
        if ref is None:
            return Rejection.of(cluster, status=404, reason="NotServed",
                                message=f"{cluster} does not serve {workload['kind']} "
                                        f"({workload['apiVersion']})")
        try:
            created = await self._submit(client, ref, cluster=cluster, namespace=namespace,
                                         body=body, pods=pods, gang_plan=gang_plan, uid=uid)
        except Conflict:
            existing = await client.request("GET", ref.item(body["metadata"]["name"],
                                                            namespace))
            if owner_state(existing, hub_id=self.settings.hub_id,
                           hub_uid=uid) is CopyState.OURS:
                if gangsched.mechanism_of(existing) == gang_plan.mechanism:
                    await gangwrites.adopt_objects(client, gang_plan, existing)
                self.copies.put(cluster, uid, await self.reading(existing))
                return True
            self.memory.saw_foreign(cluster, uid)
            return False
        except KubeError as exc:
            if not exc.permanent:
                raise
            await gangwrites.discard_objects(client, gang_plan, hub_id=self.settings.hub_id,
                                             hub_uid=uid)
            return Rejection.of(cluster, status=exc.status, reason=exc.reason or
                                type(exc).__name__, message=exc.detail)
        if isinstance(created, Rejection):
            return created
        await gangwrites.adopt_objects(client, gang_plan, created)
        if gang_plan.mechanism != NONE or gang_plan.skipped:
            log.info("copy.gangs", uid=uid, member=cluster, mechanism=gang_plan.mechanism,
                     member_mechanism=gang_plan.member_mechanism,
                     gangs=[j.gang for j in gang_plan.joins],
                     skipped=list(gang_plan.skipped)[:5])
        if not self.copies.holds(cluster, uid, created):  # the watch may have been first
            self.copies.put(cluster, uid, await self.reading(created))
        return True

    async def _built(self, uid: str, workload: Mapping[str, Any], *, client: KubeClient,
                     cluster: str, namespace: str, domains: Sequence[GangDomain]) -> _Built:
        """The copy's body, the pods to dry-run and the gang plan for ``cluster``, or the
        ``Rejection`` when the copy cannot be built (a busy evaluator raises instead)."""
        mechanism = await self._gang_mechanism(client, cluster)
        gangs = await self._gangs(uid, workload) if mechanism != NONE else None
        try:
            pins = await self._pins(uid, workload, domains)
            body, templates, gang_plan = await self._off_loop(
                workload, lambda w, d: self._copy_and_templates(
                    w, d, pins=pins, mechanism=mechanism, gangs=gangs))
            pods = dryrun.dry_run_pods(templates, namespace=namespace)
        except EvaluationUnavailable:
            raise  # a busy host: the worker's back-off, not a verdict on the copy
        except WorkloadError as exc:
            if isinstance(exc, DefinitionQuarantined):
                self.live.notify_quarantine()
            reason = "Quarantined" if isinstance(exc, ObjectQuarantined) else "CopyInvalid"
            return Rejection.of(cluster, status=0, reason=reason, message=str(exc))
        return body, pods, gang_plan

    async def _gang_mechanism(self, client: KubeClient, cluster: str) -> Mechanism:
        """The member's gang mechanism (its MemberCluster's, ``fleet``), ``none`` when the
        member does not serve its API right now (discovery, cached per client)."""
        snapshot = self.fleet.snapshot(cluster)
        return await gangwrites.usable(
            client, snapshot.gang_mechanism if snapshot is not None else NONE)

    async def _gangs(self, uid: str, workload: Mapping[str, Any]) -> Resolution | None:
        """The resolution whose gangs and instances the gang plan reads (None when it
        cannot be resolved: its copy is refused anyway by ``refused_fields``)."""
        resolution = await self._resolution(uid, workload)
        return None if isinstance(resolution, str) else resolution

    async def _submit(self, client: KubeClient, ref: ResourceRef, *, cluster: str,
                      namespace: str, body: Mapping[str, Any],
                      pods: Sequence[Mapping[str, Any]],
                      gang_plan: gangsched.GangPlan | None = None, uid: str = "") -> Any:
        """The member namespace's Pod Security level checked against the hub namespace's
        (``namespaces.MemberNamespaces``), the admission dry-run of the pods, the gang
        plan's objects (``gangwrites``: before the copy, so no pod waits for them), then
        the create; a missing namespace is created first when ``submit.createNamespaces``
        allows it, with the hub namespace's level."""
        for last in (False, True):
            try:
                refused = await self.namespaces.check(client, cluster=cluster,
                                                      namespace=namespace)
                if refused is None:
                    refused = await podadmission.admit(
                        client, self._admission, cluster=cluster, namespace=namespace,
                        pods=pods, now=self.monotonic)
                if refused is None and gang_plan is not None:
                    refused = await gangwrites.create_objects(
                        client, gang_plan, cluster=cluster, hub_id=self.settings.hub_id,
                        hub_uid=uid)
                if refused is not None:
                    return refused
                return await client.request("POST", ref.collection(namespace), body=body)
            except NotFound as exc:
                if last or not namespace_missing(exc, namespace):
                    raise
                if not self.settings.create_namespaces:
                    return Rejection.of(
                        cluster, status=404, reason="NamespaceMissing",
                        message=f"namespace {namespace} does not exist on {cluster}; the "
                                f"member's operator prepares the namespaces it takes "
                                f"(submit.createNamespaces is off)")
                refused = await self.namespaces.create(client, cluster=cluster,
                                                       namespace=namespace)
                if refused is not None:
                    return refused
        raise AssertionError("unreachable")

    async def delete_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool:
        """Delete our copy of ``uid`` on ``cluster`` (only if owned)."""
        client = self.fleet.client(cluster)
        found = self.copies.get(cluster, uid)
        if client is None:
            return False
        obj = found.obj if found is not None else workload
        ref = await client.discovery.resource(str(obj["apiVersion"]), str(obj["kind"]))
        if ref is None:
            return False
        deleted = await delete_if_owned(
            client, ref, namespace=str(obj["metadata"].get("namespace") or "default"),
            name=str(obj["metadata"]["name"]), hub_id=self.settings.hub_id, hub_uid=uid)
        self.copies.drop(cluster, uid)
        return deleted

    async def copy_body(self, workload: Mapping[str, Any], *, mechanism: Mechanism = NONE,
                        uid: str = "", pins: Domains | None = None) -> dict[str, Any]:
        """The member copy of ``workload`` (stamped, mutated, kept to ``pins``; its gangs
        joined to ``mechanism``, as they were when the copy was created)."""
        gangs = await self._gangs(uid, workload) if mechanism != NONE else None
        body, _ = await self._off_loop(workload, lambda w, d: self._joined(
            w, d, pins=pins, mechanism=mechanism, gangs=gangs))
        return body

    async def _pins(self, uid: str, workload: Mapping[str, Any],
                    domains: Sequence[GangDomain]) -> Domains | None:
        """The domains with the gangs' pod templates, from the workload's resolution
        (raises WorkloadError when it cannot be resolved now)."""
        if not domains:
            return None
        known = self.resolutions.get(uid, workload) if self.resolutions is not None else None
        resolution = known if isinstance(known, Resolution) else \
            await self.live.evaluator.resolve_async(workload)
        return Domains.of(domains, resolution)

    def _copy_of(self, workload: Mapping[str, Any], definition: Definition | None,
                 pins: Domains | None = None) -> dict[str, Any]:
        locate = self.live.evaluator.locator(definition, subject=workload) \
            if definition is not None else in_process
        body = build_copy(workload, hub_id=self.settings.hub_id, definition=definition,
                          mutations=self.settings.pod_mutations, locate=locate)
        if pins is None or definition is None:
            return body
        return pins.apply(body, definition, locate=locate)

    def _copy_and_templates(self, workload: Mapping[str, Any], definition: Definition | None,
                            *, pins: Domains | None = None, mechanism: Mechanism = NONE,
                            gangs: Resolution | None = None
                            ) -> tuple[dict[str, Any], list[PodTemplate], gangsched.GangPlan]:
        body, gang_plan = self._joined(workload, definition, pins=pins, mechanism=mechanism,
                                       gangs=gangs)
        if definition is None or not self.settings.admission_check:
            return body, [], gang_plan
        return body, pod_templates(body, definition, locate=self.live.evaluator.locator(
            definition, subject=workload)), gang_plan

    def _joined(self, workload: Mapping[str, Any], definition: Definition | None, *,
                mechanism: Mechanism, gangs: Resolution | None, pins: Domains | None = None
                ) -> tuple[dict[str, Any], gangsched.GangPlan]:
        """The copy, kept to ``pins``, with the gangs of the resolution ``gangs`` joined to
        the member's mechanism (``gangsched``: its instances' creation stages split them)."""
        body = self._copy_of(workload, definition, pins)
        units = gang_components(definition, default_name=str(
            workload["metadata"].get("name") or definition.root.name)) \
            if definition is not None else {}
        gang_plan = gangsched.plan(
            mechanism=mechanism, definition=definition,
            gangs=gangs.demand.gangs if gangs is not None else (), units=units, copy=body,
            hub_id=self.settings.hub_id,
            instances=[i for c in gangs.components for i in c.instances] if gangs else ())
        locate = self.live.evaluator.locator(definition, subject=workload) \
            if definition is not None else in_process
        return gangsched.join(body, definition, gang_plan, locate=locate), gang_plan

    async def _off_loop(self, workload: Mapping[str, Any],
                        build: Callable[[Mapping[str, Any], Definition | None], _T]) -> _T:
        """``build(workload, definition)``: when the definition is untrusted, in the
        workload's namespace's turn on the evaluator's own threads (its path expressions
        run in the bounded workers: a wait of up to the deadline must not hold the event
        loop, nor another tenant's turn, nor the loop's default executor)."""
        definition = self.live.current.find(str(workload["apiVersion"]),
                                            str(workload["kind"]))
        if definition is None or self.live.trusted(definition):
            return build(workload, definition)
        namespace = str(workload["metadata"].get("namespace") or "")
        return await self.live.evaluator.run(namespace, lambda: build(workload, definition))

    async def reading(self, obj: Mapping[str, Any]) -> MemberCopy:
        """``obj`` as the copy cache holds it (generic status read now)."""
        return await member_copy(obj, live=self.live, seen_at=self.monotonic())

    async def refused_fields(self, uid: str, workload: Mapping[str, Any]) -> str | None:
        """Why the scheduling fields of ``workload``'s pod templates may not reach a member
        (``control.podpolicy``, the same rule placing applies), or None. The resolution
        placing used serves when it is of this generation (no second evaluation); a spec
        changed since is resolved again. A workload that cannot be resolved now cannot be
        checked, and is refused with that reason."""
        resolution = await self._resolution(uid, workload)
        if isinstance(resolution, str):
            return resolution
        namespace = str(workload["metadata"].get("namespace") or "")
        return refusal(resolution.scheduling, namespace=namespace, policy=self._pod_fields)

    async def _resolution(self, uid: str, workload: Mapping[str, Any]) -> Resolution | str:
        """The current resolution of ``workload`` (the one placing used when it is of this
        generation), or why there is none."""
        known = self.resolutions.get(uid, workload) if self.resolutions is not None else None
        if isinstance(known, Resolution):
            return known
        try:
            return await self.live.evaluator.resolve_async(workload)
        except WorkloadError as exc:
            if isinstance(exc, DefinitionQuarantined):
                self.live.notify_quarantine()
            return f"pod templates cannot be checked: {str(exc).splitlines()[0][:500]}"

    async def update_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any],
                          domains: Sequence[GangDomain] = ()) -> CopyUpdate | None:
        """Write the hub object's spec to our copy on ``cluster`` (spec only: the member's
        own metadata and status stay); None when there is no copy or client to write. A
        spec whose pod templates set a refused scheduling field is not written
        (``CopyUpdate.refused`` says why): the copy keeps running as it was."""
        found = self.copies.get(cluster, uid)
        client = self.fleet.client(cluster)
        if found is None or client is None:
            return None
        refused = await self.refused_fields(uid, workload)
        if refused is not None:
            return CopyUpdate(generation=int(workload["metadata"].get("generation") or 0),
                              changed=(), refused=refused)
        wanted = await self.copy_body(workload, mechanism=gangsched.mechanism_of(found.obj),
                                      uid=uid, pins=await self._pins(uid, workload, domains))
        patch: dict[str, Any] = {}
        spec = merge_diff(dict(found.obj.get("spec") or {}), dict(wanted.get("spec") or {}))
        if spec:
            patch["spec"] = spec
        generation = written_generation(wanted)
        patch["metadata"] = {"annotations": {HUB_GENERATION_ANNOTATION: str(generation)}}
        meta = found.obj["metadata"]
        ref = await client.discovery.resource(str(found.obj["apiVersion"]),
                                              str(found.obj["kind"]))
        if ref is None:
            return None
        updated = await client.request("PATCH", ref.item(meta["name"], meta.get("namespace")),
                                       body=patch, content_type=JSON_MERGE_PATCH)
        self.copies.put(cluster, uid, await self.reading(updated))
        return CopyUpdate(generation=generation, changed=tuple(sorted(spec)))


@dataclass(frozen=True, kw_only=True)
class CopyUpdate:
    """What ``update_copy`` wrote: the hub generation and the top-level spec keys changed;
    ``refused``: why nothing was written (a pod template sets a refused field)."""

    generation: int
    changed: tuple[str, ...]
    refused: str | None = None
