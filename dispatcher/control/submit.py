"""The member side of a dispatch: send a copy plan (``control.core.copyplan``), update a copy's
spec from one, delete a copy (only if ours).

Nothing is decided here: the plan holds the copy, its gang objects and the pods to
dry-run (built by ``control.planner`` from the resolution placing used). This module
sends the requests and maps the answers: the member namespace's Pod Security level
checked, the admission dry-run, the gang objects, the create; a name held by an object
that is not ours, a 4xx (``Rejection``), a transient failure (raised, for the worker's
back-off). Every write's answer goes into the copy cache, so the next ``decide`` sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.control import gangwrites, podadmission
from dispatcher.control.caches import CopyCache, MemberCopy
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import gangsched
from dispatcher.control.core.copies import Rejection, owner_state, stamped, written_generation
from dispatcher.control.core.copyplan import CopyPlan, namespace_of
from dispatcher.control.core.decide import CopyState
from dispatcher.control.core.names import HUB_GENERATION_ANNOTATION
from dispatcher.control.fleetview import FleetView
from dispatcher.control.namespaces import MemberNamespaces, namespace_missing
from dispatcher.control.readings import member_copy
from dispatcher.control.settings import ControlSettings
from dispatcher.control.writer import CopyUpdate, Sent
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.gangapis import NONE
from dispatcher.kube.patches import merge_diff
from dispatcher.kube.resources import ResourceRef

__all__ = ["CopyUpdate", "MemberWrites", "delete_if_owned"]

log = structlog.get_logger("dispatcher")


class MemberWrites:
    """Writes to the members for the control loop (one instance, shared by all workers)."""

    def __init__(self, *, settings: ControlSettings, live: LiveCatalog, hub: KubeClient,
                 fleet: FleetView, copies: CopyCache, monotonic: Callable[[], float]) -> None:
        self.settings = settings
        self.live = live
        self.fleet = fleet
        self.copies = copies
        self.monotonic = monotonic
        self._admission = podadmission.Admission()
        self.namespaces = MemberNamespaces(settings=settings, hub=hub, monotonic=monotonic)

    async def create_copy(self, plan: CopyPlan) -> Sent | Rejection:
        """Create the planned copy: ``Sent`` says whether it exists now (created or ours),
        the member is not connected, or a foreign object holds the name; a ``Rejection``
        when the member refused it for good. Transient failures (no answer, 429, 5xx)
        raise, for the worker's back-off."""
        cluster, uid, gang_plan = plan.member, plan.uid, plan.gangs
        client = self.fleet.client(cluster)
        if client is None:
            return Sent.NOT_CONNECTED
        ref = await client.discovery.resource(plan.api_version, plan.kind)
        if ref is None:
            return Rejection.of(cluster, status=404, reason="NotServed",
                                message=f"{cluster} does not serve {plan.kind} "
                                        f"({plan.api_version})")
        try:
            created = await self._submit(client, ref, plan)
        except Conflict:
            existing = await client.request("GET", ref.item(plan.name, plan.namespace))
            if owner_state(existing, hub_id=self.settings.hub_id,
                           hub_uid=uid) is CopyState.OURS:
                if gangsched.mechanism_of(existing) == gang_plan.mechanism:
                    await gangwrites.adopt_objects(client, gang_plan, existing)
                self.copies.put(cluster, uid, await self.reading(existing))
                return Sent.EXISTS
            return Sent.FOREIGN
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
                     skipped=list(gang_plan.skipped)[:5], notes=list(gang_plan.notes))
        if not self.copies.holds(cluster, uid, created):  # the watch may have been first
            self.copies.put(cluster, uid, await self.reading(created))
        return Sent.EXISTS

    async def _submit(self, client: KubeClient, ref: ResourceRef, plan: CopyPlan) -> Any:
        """The member namespace's Pod Security level checked against the hub namespace's
        (``namespaces.MemberNamespaces``), the admission dry-run of the plan's pods, its
        gang objects (``gangwrites``: before the copy, so no pod waits for them), then
        the create; a missing namespace is created first when ``submit.createNamespaces``
        allows it, with the hub namespace's level."""
        cluster, namespace = plan.member, plan.namespace
        for last in (False, True):
            try:
                refused = await self.namespaces.check(client, cluster=cluster,
                                                      namespace=namespace)
                if refused is None:
                    refused = await podadmission.admit(
                        client, self._admission, cluster=cluster, namespace=namespace,
                        pods=plan.pods, now=self.monotonic)
                if refused is None:
                    refused = await gangwrites.create_objects(
                        client, plan.gangs, cluster=cluster, hub_id=self.settings.hub_id,
                        hub_uid=plan.uid)
                if refused is not None:
                    return refused
                return await client.request("POST", ref.collection(namespace),
                                            body=plan.body)
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
            client, ref, namespace=namespace_of(obj), name=str(obj["metadata"]["name"]),
            hub_id=self.settings.hub_id, hub_uid=uid)
        self.copies.drop(cluster, uid)
        return deleted

    async def reading(self, obj: Mapping[str, Any]) -> MemberCopy:
        """``obj`` as the copy cache holds it (generic status read now)."""
        return await member_copy(obj, live=self.live, seen_at=self.monotonic())

    async def update_copy(self, plan: CopyPlan) -> CopyUpdate | None:
        """Write the planned spec to our copy (spec only: the member's own metadata and
        status stay); None when there is no copy or client to write."""
        found = self.copies.get(plan.member, plan.uid)
        client = self.fleet.client(plan.member)
        if found is None or client is None:
            return None
        patch: dict[str, Any] = {}
        spec = merge_diff(dict(found.obj.get("spec") or {}), dict(plan.body.get("spec") or {}))
        if spec:
            patch["spec"] = spec
        generation = written_generation(plan.body)
        patch["metadata"] = {"annotations": {HUB_GENERATION_ANNOTATION: str(generation)}}
        meta = found.obj["metadata"]
        ref = await client.discovery.resource(str(found.obj["apiVersion"]),
                                              str(found.obj["kind"]))
        if ref is None:
            return None
        updated = await client.request("PATCH", ref.item(meta["name"], meta.get("namespace")),
                                       body=patch, content_type=JSON_MERGE_PATCH)
        self.copies.put(plan.member, plan.uid, await self.reading(updated))
        return CopyUpdate(generation=generation, changed=tuple(sorted(spec)))


async def delete_if_owned(client: KubeClient, ref: ResourceRef, *, namespace: str, name: str,
                          hub_id: str, hub_uid: str | None = None) -> bool:
    """Delete a member object only if it carries our origin (and ``hub_uid`` when given).

    Reads the object first and deletes with a uid precondition, so an object recreated by
    someone else in between is never touched. Returns True when something was deleted;
    False when it was absent or not ours. Refuses empty ``hub_id``.
    """
    if not hub_id:
        raise ValueError("delete_if_owned: empty hub id")
    try:
        current = await client.request("GET", ref.item(name, namespace))
    except NotFound:
        return False
    owner = stamped(current, hub_id=hub_id)
    if owner is None or (hub_uid is not None and owner != hub_uid):
        return False
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background",
            "preconditions": {"uid": current["metadata"]["uid"]}}
    try:
        await client.request("DELETE", ref.item(name, namespace), body=body)
    except NotFound:
        return False
    return True
