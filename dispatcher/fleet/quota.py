"""A Kueue member's GPU quota: how much of a workload its queues let start now.

Pure. On a member that runs Kueue, a copy starts when it fits on the nodes *and* in the
quota of its LocalQueue's ClusterQueue; placement (``placement.engine``) asks ``fit`` for
the second bound. The numbers are the member's own objects (watched by
``fleet.connection`` like nodes and pods, kept in ``QuotaObjects``), read the way Kueue
v0.17.0's scheduler reads them (``pkg/scheduler/flavorassigner``, ``pkg/cache/scheduler``):

- the LocalQueue is the copy's queue label (``fleet.queueing``), else Kueue's defaulting,
  a LocalQueue named ``default`` in the namespace; none resolved: quota does not bound
  the copy (the member's ``manageJobsWithoutQueueName`` decides, which no API reports);
- the ClusterQueue's resource group covering ``nvidia.com/gpu`` lists flavors in order;
  each pod shape (a Kueue pod set) takes the first flavor whose node labels its node
  selector matches (only keys some flavor of the group names count, ``flavorSelector``)
  and whose NoSchedule/NoExecute taints it tolerates (pod and flavor tolerations), with
  room for all its GPUs (a pod set never splits across flavors);
- a flavor's room: its nominal quota minus what is reserved there, plus what the cohort
  lends (every ClusterQueue of the same
  ``cohortName`` lends ``lendingLimit``, else its whole nominal, minus what it uses of
  that) up to ``borrowingLimit``. Reserved is the larger of the ClusterQueue's
  ``status.flavorsReservation`` and the sum over its Workloads holding quota
  (``QuotaReserved`` and not ``Finished``: ``status.admission.podSetAssignments`` with their
  flavors and ``resourceUsage``), as Kueue's own cache counts: the status is written
  lazily, and a copy placed in that gap would wait for quota another member had;
- a stopped (``stopPolicy`` not None) or inactive ClusterQueue, a stopped LocalQueue, a
  missing LocalQueue or a null ``namespaceSelector`` admits nothing.

Not modelled: CPU and memory quota (GPU is what placement bounds), hierarchical Cohort
objects, label ``namespaceSelector``s (taken as admitting), preemption (quota others hold
is not free now, even when Kueue could reclaim it), Topology Aware Scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from dispatcher.fleet.admission import copy_uid
from dispatcher.fleet.nodes import TaintTuple
from dispatcher.workloads.demand import Demand, PodShape, Toleration
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE, tolerations
from dispatcher.workloads.quantity import whole_count

__all__ = [
    "DEFAULT_LOCAL_QUEUE",
    "KINDS",
    "ClusterQueue",
    "FlavorQuota",
    "Kind",
    "MemberQuota",
    "QuotaFit",
    "QuotaObjects",
    "ResourceFlavor",
    "holder_keys",
]

DEFAULT_LOCAL_QUEUE = "default"
"""The LocalQueue Kueue defaults a job without a queue label to (LocalQueueDefaulting)."""
Kind = Literal["clusterqueues", "localqueues", "resourceflavors", "workloads"]
KINDS: tuple[Kind, ...] = ("clusterqueues", "localqueues", "resourceflavors", "workloads")
_UNBOUNDED = 1 << 62
_KEPT_OUT = frozenset({"NoSchedule", "NoExecute"})
_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One flavor's ``nvidia.com/gpu`` quota in one ClusterQueue (None limit: unlimited)."""

    flavor: str
    nominal: int
    reserved: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending_limit is None else min(self.lending_limit,
                                                                    self.nominal)

    @property
    def in_pool(self) -> int:
        """What it takes from the cohort's pool: use beyond its guaranteed share."""
        return max(0, self.reserved - (self.nominal - self.lendable))


@dataclass(frozen=True, kw_only=True)
class ClusterQueue:
    """What placement needs of one ClusterQueue: its GPU flavors in order, the node label
    keys its flavors name (``flavorSelector``'s allowed keys), and why it admits nothing
    (``closed``: '' when it admits)."""

    name: str
    cohort: str = ""
    flavors: tuple[FlavorQuota, ...] = ()
    label_keys: frozenset[str] = frozenset()
    closed: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any],
           held: Mapping[str, int] | None = None) -> ClusterQueue:
        """``held``: GPUs by flavor its Workloads hold (the larger of that and the status
        counts)."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        name = str((obj.get("metadata") or {}).get("name") or "")
        reserved = {str(u.get("name")): _gpus_of(u.get("resources"), "total")
                    for u in status.get("flavorsReservation") or () if isinstance(u, Mapping)}
        for flavor, gpus in (held or {}).items():
            reserved[flavor] = max(reserved.get(flavor, 0), gpus)
        flavors: list[FlavorQuota] = []
        for group in spec.get("resourceGroups") or ():
            if GPU_RESOURCE not in (group.get("coveredResources") or ()):
                continue
            for entry in group.get("flavors") or ():
                quota = next((r for r in entry.get("resources") or ()
                              if r.get("name") == GPU_RESOURCE), None)
                if quota is None:
                    continue
                flavor = str(entry.get("name") or "")
                flavors.append(FlavorQuota(
                    flavor=flavor, nominal=whole_count(quota.get("nominalQuota", 0)),
                    reserved=reserved.get(flavor, 0),
                    borrowing_limit=_limit(quota.get("borrowingLimit")),
                    lending_limit=_limit(quota.get("lendingLimit"))))
        return cls(name=name, cohort=str(spec.get("cohortName") or ""),
                   flavors=tuple(flavors), closed=_closed(spec, status))

    def with_label_keys(self, flavors: Mapping[str, ResourceFlavor]) -> ClusterQueue:
        keys = frozenset(k for f in self.flavors if f.flavor in flavors
                         for k in flavors[f.flavor].node_labels)
        return ClusterQueue(name=self.name, cohort=self.cohort, flavors=self.flavors,
                            label_keys=keys, closed=self.closed)


def _limit(value: Any) -> int | None:
    return None if value is None else whole_count(value)


def _gpus_of(resources: Any, key: str) -> int:
    for item in resources or ():
        if isinstance(item, Mapping) and item.get("name") == GPU_RESOURCE:
            return whole_count(item.get(key, 0))
    return 0


def _closed(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    stop = spec.get("stopPolicy") or "None"
    if stop != "None":
        return f"stopped (stopPolicy {stop})"
    if spec.get("namespaceSelector", None) is None:
        return "admits no namespace (namespaceSelector is null)"
    active = next((c for c in status.get("conditions") or ()
                   if isinstance(c, Mapping) and c.get("type") == "Active"), None)
    if active is not None and active.get("status") == "False":
        return f"inactive: {active.get('reason') or ''} {active.get('message') or ''}".strip()
    return ""


@dataclass(frozen=True, kw_only=True)
class ResourceFlavor:
    """A ResourceFlavor's node labels, NoSchedule/NoExecute taints and tolerations."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    taints: tuple[TaintTuple, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ResourceFlavor:
        spec = obj.get("spec") or {}
        labels = spec.get("nodeLabels") or {}
        taints = tuple((str(t.get("key") or ""), str(t.get("value") or ""),
                        str(t.get("effect") or ""))
                       for t in spec.get("nodeTaints") or () if isinstance(t, Mapping))
        try:
            tolerated = tolerations(spec.get("tolerations"))
        except ValueError:
            tolerated = ()
        return cls(name=str((obj.get("metadata") or {}).get("name") or ""),
                   node_labels=MappingProxyType({str(k): str(v) for k, v in labels.items()}),
                   taints=tuple(t for t in taints if t[2] in _KEPT_OUT),
                   tolerations=tolerated)

    def admits(self, shape: PodShape, label_keys: frozenset[str]) -> bool:
        """Whether a pod of ``shape`` may use this flavor (``checkFlavorForPodSets``)."""
        wanted = dict(shape.node_selector)
        if shape.gpu_product:
            wanted[GPU_PRODUCT_LABEL] = shape.gpu_product
        if any(self.node_labels.get(k) != v for k, v in wanted.items() if k in label_keys):
            return False
        tolerating = (*shape.tolerations, *self.tolerations)
        return all(any(t.tolerates(key=k, value=v, effect=e) for t in tolerating)
                   for k, v, e in self.taints)


@dataclass(frozen=True, slots=True)
class QuotaFit:
    """The quota bound of one workload on one member: ``free`` GPUs its ClusterQueue lets
    it start in the flavors its pods may use (``reserved`` of ``nominal`` taken there),
    ``fits`` whether every pod set found room, ``reason`` (for a misfit) the sentence
    naming the queues."""

    cluster_queue: str
    local_queue: str
    fits: bool
    free: int
    reserved: int
    nominal: int
    asked: int
    in_flight: int = 0
    """Of what the queue has left, GPUs held for copies just sent there (not in Kueue's
    numbers yet): not in ``free``."""
    reason: str = ""

    def cell(self) -> str:
        """For tables: ``team-a: 8 of 32 free``."""
        return f"{self.cluster_queue}: {self.free} of {self.nominal} free"

    def to_dict(self) -> dict[str, Any]:
        return {"clusterQueue": self.cluster_queue, "localQueue": self.local_queue,
                "fits": self.fits, "free": self.free, "reserved": self.reserved,
                "nominal": self.nominal, "asked": self.asked, "inFlight": self.in_flight,
                "reason": self.reason}

    def describe(self) -> str:
        """``ClusterQueue gpus (LocalQueue team-a/gpus): 24 of 32 nvidia.com/gpu reserved,
        8 free by quota``."""
        sent = f" ({self.in_flight} held for copies just sent)" if self.in_flight else ""
        return (f"ClusterQueue {self.cluster_queue} (LocalQueue {self.local_queue}): "
                f"{self.reserved} of {self.nominal} {GPU_RESOURCE} reserved, {self.free} "
                f"free by quota{sent}")


class MemberQuota:
    """A frozen view of one member's queues (built by ``QuotaObjects.view``)."""

    def __init__(self, *, cluster_queues: Iterable[ClusterQueue],
                 local_queues: Mapping[tuple[str, str], tuple[str, str]],
                 flavors: Mapping[str, ResourceFlavor],
                 holders: frozenset[str] = frozenset()) -> None:
        """``local_queues``: (namespace, name) -> (ClusterQueue, closed reason);
        ``holders``: ``holder_keys`` of the Workloads holding quota (a reservation whose
        Workload is one of them is counted by the quota already)."""
        self.flavors = dict(flavors)
        self.holders = holders
        self.cluster_queues = {q.name: q.with_label_keys(self.flavors) for q in cluster_queues}
        self.local_queues = dict(local_queues)
        self._cohorts: dict[str, list[ClusterQueue]] = {}
        for queue in self.cluster_queues.values():
            if queue.cohort:
                self._cohorts.setdefault(queue.cohort, []).append(queue)

    def room(self, queue: ClusterQueue, quota: FlavorQuota) -> int:
        """GPUs of ``quota``'s flavor ``queue`` can reserve now, borrowing included."""
        guaranteed = quota.nominal - quota.lendable
        own = max(0, guaranteed - quota.reserved)
        if not queue.cohort:
            return own + max(0, quota.lendable - quota.in_pool)
        pool = 0
        for peer in self._cohorts.get(queue.cohort, ()):
            for other in peer.flavors:
                if other.flavor == quota.flavor:
                    pool += other.lendable - other.in_pool
        cap = _UNBOUNDED if quota.borrowing_limit is None else quota.borrowing_limit
        return own + max(0, min(pool, quota.lendable + cap - quota.in_pool))

    def rooms(self) -> Iterator[tuple[str, str, int, int]]:
        """(ClusterQueue, flavor, nominal, room) of every GPU flavor (the quota gauges)."""
        for queue in self.cluster_queues.values():
            for quota in queue.flavors:
                yield queue.name, quota.flavor, quota.nominal, self.room(queue, quota)

    def resolve(self, namespace: str, queue: str | None) -> str | None:
        """The LocalQueue a copy in ``namespace`` lands in: its label, else ``default``
        when that LocalQueue exists; None when neither (quota does not bound it)."""
        if queue:
            return queue
        return DEFAULT_LOCAL_QUEUE if (namespace, DEFAULT_LOCAL_QUEUE) in self.local_queues \
            else None

    def fit(self, demand: Demand, *, namespace: str, queue: str | None,
            in_flight: int = 0) -> QuotaFit | None:
        """The quota bound of ``demand`` (None: no LocalQueue, not bounded). ``in_flight``
        GPUs were just sent there and may not show in the ClusterQueue's status yet: taken
        from the first flavors before the pod sets."""
        name = self.resolve(namespace, queue)
        if name is None:
            return None
        asked = demand.gpus
        where = f"{namespace}/{name}"
        entry = self.local_queues.get((namespace, name))
        if entry is None:
            return QuotaFit(cluster_queue="?", local_queue=where, fits=asked == 0, free=0,
                            reserved=0, nominal=0, asked=asked,
                            reason=f"LocalQueue {where} does not exist (the copy would wait "
                                   "forever)")
        cq_name, lq_closed = entry
        cq = self.cluster_queues.get(cq_name)
        closed = lq_closed or (f"ClusterQueue {cq_name} does not exist" if cq is None
                               else cq.closed and f"ClusterQueue {cq_name} {cq.closed}")
        if cq is None or closed:
            return QuotaFit(cluster_queue=cq_name, local_queue=where, fits=asked == 0,
                            free=0, reserved=0, nominal=0, asked=asked,
                            reason=f"LocalQueue {where}: {closed}")
        return self._fit(cq, where, demand, in_flight)

    def _fit(self, cq: ClusterQueue, where: str, demand: Demand, in_flight: int) -> QuotaFit:
        rooms = {q.flavor: self.room(cq, q) for q in cq.flavors}
        usable: set[str] = set()
        unplaced: list[int] = []
        held = 0  # of in_flight, taken from the flavors these pods may use
        for shape in (s for g in demand.gangs for s in g.pod_shapes if s.gpus > 0):
            need = shape.gpus * shape.count
            allowed = [q.flavor for q in cq.flavors if q.flavor in self.flavors
                       and self.flavors[q.flavor].admits(shape, cq.label_keys)]
            usable.update(allowed)
            for flavor in allowed:
                taken = min(in_flight, rooms[flavor])
                rooms[flavor] -= taken
                in_flight -= taken
                held += taken
            chosen = next((f for f in allowed if rooms[f] >= need), None)
            if chosen is None:
                unplaced.append(need)
            else:
                rooms[chosen] -= need
        counted = [q for q in cq.flavors if q.flavor in usable]
        free = sum(self.room(cq, q) for q in counted) - held
        fit = QuotaFit(cluster_queue=cq.name, local_queue=where, fits=not unplaced,
                       free=free, reserved=sum(q.reserved for q in counted),
                       nominal=sum(q.nominal for q in counted), asked=demand.gpus,
                       in_flight=held)
        if unplaced:
            if not counted:
                said = (f"ClusterQueue {cq.name} (LocalQueue {where}): no flavor of it admits "
                        f"the pods (node labels, taints), {demand.gpus} asked")
            elif free >= demand.gpus:
                said = (f"{fit.describe()}, {demand.gpus} asked (a pod set of "
                        f"{max(unplaced)} GPU(s) finds no flavor with room)")
            else:
                said = f"{fit.describe()}, {demand.gpus} asked"
            fit = QuotaFit(cluster_queue=fit.cluster_queue, local_queue=where, fits=False,
                           free=free, reserved=fit.reserved, nominal=fit.nominal,
                           asked=fit.asked, in_flight=held, reason=said)
        return fit


class QuotaObjects:
    """The member's ClusterQueues, LocalQueues and ResourceFlavors as watched (mutable,
    event-loop only); ``view()`` is the frozen ``MemberQuota``, rebuilt only after a
    change (``version`` counts them)."""

    def __init__(self) -> None:
        self._objects: dict[Kind, dict[str, Mapping[str, Any]]] = {k: {} for k in KINDS}
        self.listed: set[Kind] = set()
        self.version = 0
        self._view: tuple[int, MemberQuota] | None = None

    @property
    def synced(self) -> bool:
        return self.listed >= set(KINDS)

    def relist(self, kind: Kind, objects: Iterable[Mapping[str, Any]]) -> None:
        kept = ((_key(o), _kept(kind, o)) for o in objects)
        self._objects[kind] = {k: o for k, o in kept if o is not None}
        self.listed.add(kind)
        self.version += 1

    def apply(self, kind: Kind, event: str, obj: Mapping[str, Any]) -> None:
        """One watch event; a Workload that holds no quota is not kept (nor counted)."""
        kept = None if event == "DELETED" else _kept(kind, obj)
        store, key = self._objects[kind], _key(obj)
        if kept is None:
            if store.pop(key, None) is None:
                return  # a Workload that held nothing before either: nothing changed
        elif store.get(key) == kept:
            return
        else:
            store[key] = kept
        self.version += 1

    def view(self) -> MemberQuota:
        if self._view is None or self._view[0] != self.version:
            self._view = (self.version, build(self._objects["clusterqueues"].values(),
                                              self._objects["localqueues"].values(),
                                              self._objects["resourceflavors"].values(),
                                              self._objects["workloads"].values()))
        return self._view[1]


def holder_keys(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """How a Kueue Workload is recognised as the one taking a reservation's quota: its
    ``namespace/name`` (a MultiKueue copy keeps the hub Workload's) and its job's uid
    (the copy the dispatcher created: ``fleet.admission.copy_uid``)."""
    job = copy_uid(obj)
    return (_key(obj), *((job,) if job else ()))


def _kept(kind: Kind, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What is kept of a watched object: the object, or of a Workload only its quota held
    (``{"clusterQueue": ..., "gpus": {flavor: n}, "keys": holder_keys}``; None when it
    holds none)."""
    if kind != "workloads":
        return obj
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()
                  if isinstance(c, Mapping)}
    admission = status.get("admission") or {}
    if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True" \
            or not admission.get("clusterQueue"):
        return None
    gpus: dict[str, int] = {}
    for assigned in admission.get("podSetAssignments") or ():
        flavor = (assigned.get("flavors") or {}).get(GPU_RESOURCE)
        used = whole_count((assigned.get("resourceUsage") or {}).get(GPU_RESOURCE, 0))
        if flavor and used:
            gpus[str(flavor)] = gpus.get(str(flavor), 0) + used
    return {"clusterQueue": str(admission["clusterQueue"]), "gpus": gpus,
            "keys": holder_keys(obj)} if gpus else None


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def build(cluster_queues: Iterable[Mapping[str, Any]], local_queues: Iterable[Mapping[str, Any]],
          flavors: Iterable[Mapping[str, Any]],
          held: Iterable[Mapping[str, Any]] = ()) -> MemberQuota:
    """A ``MemberQuota`` from the objects as the API serves them (v1beta2 or v1beta1:
    v1beta1's ``spec.cohort`` is read too); ``held``: the quota its Workloads hold
    (``_kept``)."""
    by_queue: dict[str, dict[str, int]] = {}
    holders: set[str] = set()
    for item in held:
        holders.update(item.get("keys") or ())
        sums = by_queue.setdefault(str(item["clusterQueue"]), {})
        for flavor, gpus in item["gpus"].items():
            sums[flavor] = sums.get(flavor, 0) + int(gpus)
    queues = []
    for obj in cluster_queues:
        queue = ClusterQueue.of(obj, by_queue.get(str((obj.get("metadata") or {}).get("name"))))
        legacy = (obj.get("spec") or {}).get("cohort")
        if not queue.cohort and legacy:
            queue = ClusterQueue(name=queue.name, cohort=str(legacy), flavors=queue.flavors,
                                 closed=queue.closed)
        queues.append(queue)
    by_name: dict[tuple[str, str], tuple[str, str]] = {}
    for obj in local_queues:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        stop = spec.get("stopPolicy") or "None"
        by_name[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = (
            str(spec.get("clusterQueue") or ""),
            f"stopped (stopPolicy {stop})" if stop != "None" else "")
    return MemberQuota(cluster_queues=queues, local_queues=by_name,
                       flavors={f.name: f for f in map(ResourceFlavor.of, flavors)},
                       holders=frozenset(holders))
