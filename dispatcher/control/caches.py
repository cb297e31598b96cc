"""In-memory views the reconcile snapshots are read from, fed by watches and by our writes.

``HubCache`` holds hub workloads (by uid, with the resource they belong to) and Dispatch
records (by workload uid); ``CopyCache`` holds our copies on each member (by hub uid) and
which (member, kind) watches have listed. Writes update the caches from the response at
once, so the next decision never sees its own write missing; a watch event older than what
the cache holds (by resourceVersion) is ignored, and one equal to it is not news: the echo
of our own write wakes no worker (``observe``, ``observe_record``). Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.control.core import record as records
from dispatcher.fleet.admission import Admission
from dispatcher.kube.resources import GroupVersionKind, ResourceRef
from dispatcher.kube.watch import lean

__all__ = ["CopyCache", "HubCache", "HubItem", "MemberCopy"]


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


@dataclass(frozen=True, slots=True)
class HubItem:
    """A hub workload and the resource it is served by."""

    ref: ResourceRef
    obj: Mapping[str, Any]


class HubCache:
    """Hub workloads and Dispatch records."""

    def __init__(self) -> None:
        self._items: dict[str, HubItem] = {}
        self._records: dict[str, Mapping[str, Any]] = {}
        self._parsed: dict[str, tuple[Mapping[str, Any], records.DispatchRecord]] = {}
        self.synced: set[tuple[GroupVersionKind, str]] = set()  # (kind, namespace or "")

    def workload(self, uid: str) -> HubItem | None:
        return self._items.get(uid)

    def uids(self) -> Iterator[str]:
        return iter(list(self._items))

    def put(self, ref: ResourceRef, obj: Mapping[str, Any], *, force: bool = False) -> bool:
        """Store a workload unless the cache already holds a newer version."""
        uid = _uid(obj)
        old = self._items.get(uid)
        if old is not None and not force and _rv(old.obj) > _rv(obj):
            return False
        self._items[uid] = HubItem(ref=ref, obj=lean(obj))
        return True

    def observe(self, ref: ResourceRef, obj: Mapping[str, Any]) -> bool:
        """A watch event: store it; True when it is news (not the version already held,
        e.g. the echo of our own write, and not an older one)."""
        old = self._items.get(_uid(obj))
        if old is not None and _rv(old.obj) >= _rv(obj) and _rv(obj):
            return False
        return self.put(ref, obj)

    def drop(self, uid: str) -> None:
        self._items.pop(uid, None)

    def relist(self, ref: ResourceRef, namespace: str, objects: Iterable[Mapping[str, Any]]
               ) -> set[str]:
        """Replace every workload of ``ref`` (in ``namespace``, "" for all); returns the uids
        that changed or went away."""
        fresh = {_uid(o): o for o in objects}
        touched = set(fresh)
        for uid, item in list(self._items.items()):
            same_ns = not namespace or (item.obj.get("metadata") or {}).get(
                "namespace") == namespace
            if item.ref == ref and same_ns and uid not in fresh:
                del self._items[uid]
                touched.add(uid)
        for obj in fresh.values():
            self.put(ref, obj, force=True)
        self.synced.add((ref.gvk, namespace))
        return touched

    # -- records ----------------------------------------------------------------------------

    def record(self, workload_uid: str) -> Mapping[str, Any] | None:
        return self._records.get(workload_uid)

    def record_value(self, workload_uid: str) -> records.DispatchRecord | None:
        """The record read (``record.read``) once per stored object: a snapshot is taken
        several times per dispatch, the record changes about twice."""
        raw = self._records.get(workload_uid)
        if raw is None:
            return None
        hit = self._parsed.get(workload_uid)
        if hit is not None and hit[0] is raw:
            return hit[1]
        value = records.read(raw)
        self._parsed[workload_uid] = (raw, value)
        return value

    def records(self) -> Iterator[Mapping[str, Any]]:
        return iter(list(self._records.values()))

    def observe_record(self, obj: Mapping[str, Any]) -> str:
        """A watch event of a Dispatch: its workload uid when it is news, else ""."""
        uid = str(((obj.get("spec") or {}).get("workload") or {}).get("uid") or "")
        old = self._records.get(uid)
        if old is not None and _rv(old) >= _rv(obj) and _rv(obj):
            return ""
        return self.put_record(obj)

    def put_record(self, obj: Mapping[str, Any], *, force: bool = False) -> str:
        """Store a Dispatch by its workload uid; returns that uid ("" when it has none)."""
        uid = str(((obj.get("spec") or {}).get("workload") or {}).get("uid") or "")
        if not uid:
            return ""
        old = self._records.get(uid)
        # the same version kept as it is (its parsed record memo too): a write's answer
        # often arrives after the watch event of that write
        if old is None or force or _rv(obj) > _rv(old) or not _rv(old):
            self._records[uid] = lean(obj)
        return uid

    def drop_record(self, obj: Mapping[str, Any]) -> str:
        uid = str(((obj.get("spec") or {}).get("workload") or {}).get("uid") or "")
        current = self._records.get(uid)
        if current is not None and _uid(current) == _uid(obj):
            del self._records[uid]
            self._parsed.pop(uid, None)
        return uid

    def relist_records(self, objects: Iterable[Mapping[str, Any]], *, namespace: str = ""
                       ) -> set[str]:
        """Replace the records of ``namespace`` ("" for all); returns the uids touched."""
        old = {uid for uid, rec in self._records.items()
               if not namespace or (rec.get("metadata") or {}).get("namespace") == namespace}
        for uid in old:
            del self._records[uid]
            self._parsed.pop(uid, None)
        for obj in objects:
            self.put_record(obj, force=True)
        fresh = {uid for uid, rec in self._records.items()
                 if not namespace or (rec.get("metadata") or {}).get("namespace") == namespace}
        return old | fresh

    def uids_on(self, member: str) -> list[str]:
        """Workloads whose record names ``member`` as their cluster."""
        return [uid for uid, rec in self._records.items()
                if records.decision_of(rec).get("cluster") == member]


@dataclass(frozen=True, slots=True)
class MemberCopy:
    """Our copy on a member, its generic status, and when we saw it change (loop time)."""

    obj: Mapping[str, Any]
    generic: str
    statuses: tuple[str, ...]
    seen_at: float


class CopyCache:
    """Our copies per member, by hub uid; ``synced`` (member, kind) after each list."""

    def __init__(self) -> None:
        self._copies: dict[str, dict[str, MemberCopy]] = {}
        self.synced: set[tuple[str, GroupVersionKind]] = set()
        self._admissions: dict[str, dict[str, Admission]] = {}
        self._by_copy: dict[str, dict[str, str]] = {}  # member -> copy's own uid -> hub uid

    def get(self, member: str, uid: str) -> MemberCopy | None:
        return self._copies.get(member, {}).get(uid)

    def hub_uid(self, member: str, copy_uid: str) -> str | None:
        """The hub uid of our copy on ``member`` whose own uid is ``copy_uid`` (a Kueue
        Workload names the copy it admits by that)."""
        return self._by_copy.get(member, {}).get(copy_uid)

    def admission(self, member: str, copy_uid: str) -> Admission | None:
        """What the member's Kueue says of the copy ``copy_uid`` (None: not queued there,
        or not seen yet)."""
        return self._admissions.get(member, {}).get(copy_uid)

    def set_admission(self, member: str, copy_uid: str, admission: Admission | None) -> None:
        if admission is None:
            self._admissions.get(member, {}).pop(copy_uid, None)
        else:
            self._admissions.setdefault(member, {})[copy_uid] = admission

    def relist_admissions(self, member: str, fresh: Mapping[str, Admission]) -> set[str]:
        """Replace the member's admissions; the copy uids whose admission changed."""
        old = self._admissions.get(member, {})
        self._admissions[member] = dict(fresh)
        return {u for u in old.keys() | fresh.keys() if old.get(u) != fresh.get(u)}

    def where(self, uid: str) -> list[str]:
        """Members holding a copy of ``uid``."""
        return sorted(m for m, copies in self._copies.items() if uid in copies)

    def items(self, member: str) -> list[tuple[str, MemberCopy]]:
        return list(self._copies.get(member, {}).items())

    def holds(self, member: str, uid: str, obj: Mapping[str, Any]) -> bool:
        """This version of the copy (or a newer one) is already held: a watch event that is
        the echo of our own write, nothing new to read or decide on."""
        old = self._copies.get(member, {}).get(uid)
        return old is not None and bool(_rv(obj)) and _rv(old.obj) >= _rv(obj)

    def put(self, member: str, uid: str, copy: MemberCopy) -> None:
        old = self._copies.get(member, {}).get(uid)
        if old is not None and _rv(old.obj) > _rv(copy.obj):
            return
        if old is not None:
            self._unindex(member, old)
        self._copies.setdefault(member, {})[uid] = copy
        self._index(member, uid, copy)

    def drop(self, member: str, uid: str) -> None:
        old = self._copies.get(member, {}).pop(uid, None)
        if old is not None:
            self._unindex(member, old)

    def _index(self, member: str, uid: str, copy: MemberCopy) -> None:
        own = copy.obj["metadata"].get("uid")
        if own:
            self._by_copy.setdefault(member, {})[str(own)] = uid

    def _unindex(self, member: str, copy: MemberCopy) -> None:
        own = copy.obj["metadata"].get("uid")
        if own:
            self._by_copy.get(member, {}).pop(str(own), None)

    def relist(self, member: str, kind: GroupVersionKind, fresh: Mapping[str, MemberCopy]
               ) -> set[str]:
        """Replace the copies of one kind on ``member``; returns uids that changed."""
        copies = self._copies.setdefault(member, {})
        touched = set(fresh)
        for uid, copy in list(copies.items()):
            if GroupVersionKind.of_object(copy.obj) == kind and uid not in fresh:
                del copies[uid]
                self._unindex(member, copy)
                touched.add(uid)
            elif uid in fresh:
                self._unindex(member, copy)
        copies.update(fresh)
        for uid, copy in fresh.items():
            self._index(member, uid, copy)
        self.synced.add((member, kind))
        return touched

    def unsync(self, member: str, kind: GroupVersionKind | None = None) -> None:
        """The member's watches (or only the one of ``kind``) broke: that copy state is
        unknown until they list again. Only the broken watch re-lists, so it must not
        unsync the others (their copies would read as unknown until their next re-list)."""
        self.synced = {s for s in self.synced
                       if s[0] != member or (kind is not None and s[1] != kind)}
