"""One recording fake per port of the control loop (``control.writer``): ``FakeHub`` for the
hub's writes, ``FakeMembers`` for the members'. Both append ``(name, detail)`` to one shared
``calls`` list, so a test reads the order of writes across the two. Given the caches, they
answer as the API would and keep the caches as the real writers do (``test_reconcile``);
without them they only record and answer what the test configured (``test_actions``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.control.caches import CopyCache, HubCache, MemberCopy
from dispatcher.control.core import record as records
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.copyplan import CopyPlan
from dispatcher.control.core.names import FINALIZER, ORIGIN_LABEL
from dispatcher.control.writer import CopyUpdate, Created, HubRead, Sent
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.patches import apply_merge
from dispatcher.kube.resources import ResourceRef

__all__ = ["Calls", "FakeHub", "FakeMembers"]


class Calls(list[tuple[str, Any]]):
    """The writes made, in order, as (name, detail)."""

    def names(self) -> list[str]:
        return [name for name, _ in self]


class FakeHub:
    """``HubWriter``: records; with ``cache`` (and the workloads' ``ref``), writes into it."""

    def __init__(self, calls: Calls, *, cache: HubCache | None = None,
                 ref: ResourceRef | None = None, created: Created = Created.CREATED,
                 mirror_ok: bool = True, finalizer_conflict: bool = False) -> None:
        self.calls, self.cache, self.ref = calls, cache, ref
        self.created = created  # what create_record answers (BLOCKED: a namesake waits)
        self.mirror_ok = mirror_ok
        self.finalizer_conflict = finalizer_conflict
        self.gone = True  # what read_workload answers
        self.found: Mapping[str, Any] | None = None  # ... when not gone
        self._rv = 10

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def create_record(self, uid: str, workload: Mapping[str, Any], *,
                            placed: Mapping[str, Any] | None = None) -> Created:
        self.calls.append(("create_record", placed))
        if self.cache is not None and self.created is Created.CREATED:
            body = records.dispatch_body(workload=workload,
                                         name=records.dispatch_name(workload), placed=placed)
            body["metadata"].update(uid="rec-1", resourceVersion=self._next_rv())
            self.cache.put_record(body, force=True)
        return self.created

    async def read_workload(self, record: records.DispatchRecord) -> HubRead:
        self.calls.append(("read_workload", record.workload_uid))
        return HubRead(gone=self.gone, found=None if self.gone else self.found)

    async def patch_record(self, uid: str, status: dict[str, Any]) -> None:
        self.calls.append(("patch_record", status))
        if self.cache is not None:
            raw = self.cache.record(uid)
            assert raw is not None
            self.cache.put_record(apply_merge(raw, {"status": status, "metadata": {
                "resourceVersion": self._next_rv()}}), force=True)

    async def mirror_status(self, uid: str, diff: dict[str, Any]) -> bool:
        self.calls.append(("mirror_status", diff))
        if self.cache is not None and self.ref is not None:
            item = self.cache.workload(uid)
            assert item is not None
            self.cache.put(self.ref, apply_merge(item.obj, {
                "status": diff, "metadata": {"resourceVersion": self._next_rv()}}))
        return self.mirror_ok

    async def remove_finalizer(self, uid: str, workload: Mapping[str, Any] | None) -> bool:
        self.calls.append(("remove_finalizer", uid))
        if self.finalizer_conflict:
            return False
        if self.cache is not None:
            raw = self.cache.record(uid)
            assert raw is not None and FINALIZER in raw["metadata"]["finalizers"]
            self.cache.drop_record(raw)
        return True

    def event(self, workload: Mapping[str, Any], *, reason: str, message: str,
              warning: bool = False) -> None:
        self.calls.append(("event", reason))


class FakeMembers:
    """``MemberWriter``: records; with ``copies``, a sent copy is put there (uid
    ``remote-1``, status pending) and a deleted one dropped."""

    def __init__(self, calls: Calls, *, copies: CopyCache | None = None,
                 create: Sent | Rejection = Sent.EXISTS,
                 update: CopyUpdate | None = None) -> None:
        self.calls, self.copies = calls, copies
        self.create = create  # what create_copy answers
        self.update = update
        self.plans: list[CopyPlan] = []

    async def create_copy(self, plan: CopyPlan) -> Sent | Rejection:
        self.calls.append(("create_copy", plan.member))
        self.plans.append(plan)
        if self.copies is not None and self.create is Sent.EXISTS:
            copy = {"apiVersion": plan.api_version, "kind": plan.kind,
                    "metadata": {"name": plan.name, "uid": "remote-1", "resourceVersion": "5",
                                 "labels": {ORIGIN_LABEL: "hub", HUB_UID_LABEL: plan.uid}},
                    "status": {}}
            self.copies.put(plan.member, plan.uid, MemberCopy(
                obj=copy, generic="pending", statuses=(), seen_at=0.0))
        return self.create

    async def update_copy(self, plan: CopyPlan) -> CopyUpdate | None:
        self.calls.append(("update_copy", plan.member))
        self.plans.append(plan)
        return self.update

    async def delete_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool:
        self.calls.append(("delete_copy", cluster))
        if self.copies is not None:
            self.copies.drop(cluster, uid)
        return True
