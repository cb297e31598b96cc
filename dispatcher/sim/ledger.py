"""The simulator's own account of which GPUs each pod holds, node by node.

It is deliberately independent of the capacity model under test: every placement the cores
choose is booked here, and a node ever holding more GPUs than it has raises at once. It also
answers the report's questions cheaply (GPUs in use per member, fragmentation) by keeping,
per class of identical nodes, how many nodes have each number of free GPUs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from dispatcher.fleet.fleetfile import FleetSpec, node_manifests
from dispatcher.workloads.demand import PodShape
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE
from dispatcher.workloads.quantity import whole_count

__all__ = ["Ledger", "NodeClass", "OverAllocationError"]

_IGNORED_LABELS = {"kubernetes.io/hostname"}


class OverAllocationError(RuntimeError):
    """A node was given more GPUs than it has: a placement bug, never a normal outcome."""


@dataclass(frozen=True, kw_only=True)
class NodeClass:
    """Nodes that are interchangeable for placement: same member, labels, taints, GPUs."""

    member: str
    gpus: int
    product: str | None
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]

    def __hash__(self) -> int:
        return hash((self.member, self.gpus, self.product, tuple(sorted(self.labels.items())),
                     self.taints))

    def admits(self, shape: PodShape) -> bool:
        """Whether a pod of ``shape`` may run on such a node at all (ignoring what is free)."""
        if shape.gpu_product is not None and shape.gpu_product != self.product:
            return False
        if any(self.labels.get(k) != v for k, v in shape.node_selector.items()):
            return False
        for key, value, effect in self.taints:
            if effect in ("NoSchedule", "NoExecute") and not any(
                    t.tolerates(key=key, value=value, effect=effect) for t in shape.tolerations):
                return False
        return True


class Ledger:
    """GPUs held per node, per member and per workload, with the over-allocation invariant."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.classes: list[NodeClass] = []
        self.members: tuple[str, ...] = tuple(m.name for m in fleet.members)
        self.member_total: dict[str, int] = dict.fromkeys(self.members, 0)
        self.member_used: dict[str, int] = dict.fromkeys(self.members, 0)
        self._node_class: dict[str, int] = {}
        self._node_used: dict[str, int] = {}
        self._free_hist: list[dict[int, int]] = []
        self._held: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        index: dict[NodeClass, int] = {}
        for member in fleet.members:
            for node in node_manifests(member):
                labels = {k: v for k, v in node["metadata"]["labels"].items()
                          if k not in _IGNORED_LABELS}
                gpus = whole_count(node["status"]["allocatable"][GPU_RESOURCE])
                cls = NodeClass(
                    member=member.name, gpus=gpus, product=labels.get(GPU_PRODUCT_LABEL),
                    labels=labels,
                    taints=tuple((t["key"], t["value"], t["effect"])
                                 for t in node["spec"]["taints"]))
                key = index.setdefault(cls, len(self.classes))
                if key == len(self.classes):
                    self.classes.append(cls)
                    self._free_hist.append({})
                hist = self._free_hist[key]
                hist[gpus] = hist.get(gpus, 0) + 1
                name = node["metadata"]["name"]
                self._node_class[name] = key
                self._node_used[name] = 0
                self.member_total[member.name] += gpus

    @property
    def total(self) -> int:
        """GPUs in the whole fleet."""
        return sum(self.member_total.values())

    @property
    def used(self) -> int:
        """GPUs held by running pods in the whole fleet."""
        return sum(self.member_used.values())

    def node_used(self, node: str) -> int:
        """GPUs held on one node."""
        return self._node_used[node]

    def _move(self, node: str, delta: int) -> str:
        cls_index = self._node_class.get(node)
        if cls_index is None:
            raise OverAllocationError(f"placement chose node {node!r}, which is not in the fleet")
        cls = self.classes[cls_index]
        before = self._node_used[node]
        after = before + delta
        if after > cls.gpus or after < 0:
            raise OverAllocationError(
                f"node {node} would hold {after} GPUs but has {cls.gpus}")
        hist = self._free_hist[cls_index]
        hist[cls.gpus - before] -= 1
        hist[cls.gpus - after] = hist.get(cls.gpus - after, 0) + 1
        self._node_used[node] = after
        return cls.member

    def hold(self, *, uid: str, member: str, pods: Iterable[tuple[str, int]]) -> None:
        """Book ``uid``'s pods; raises OverAllocationError (and books nothing) when any node
        would exceed its GPUs or a pod lands outside ``member``."""
        pods = tuple(pods)
        if uid in self._held:
            raise OverAllocationError(f"workload {uid} placed twice")
        done: list[tuple[str, int]] = []
        try:
            for node, gpus in pods:
                if self._move(node, gpus) != member:
                    self._move(node, -gpus)
                    raise OverAllocationError(f"pod of {uid} on {node}, outside member {member}")
                done.append((node, gpus))
        except OverAllocationError:
            for node, gpus in done:
                self._move(node, -gpus)
            raise
        self._held[uid] = (member, pods)
        self.member_used[member] += sum(g for _, g in pods)

    def free(self, *, uid: str) -> str | None:
        """Give back ``uid``'s GPUs; returns its member (None if it held nothing)."""
        held = self._held.pop(uid, None)
        if held is None:
            return None
        member, pods = held
        for node, gpus in pods:
            self._move(node, -gpus)
        self.member_used[member] -= sum(g for _, g in pods)
        return member

    def check(self) -> None:
        """Recount everything from the per-node figures; raises on any inconsistency."""
        per_member = dict.fromkeys(self.members, 0)
        for node, used in self._node_used.items():
            cls = self.classes[self._node_class[node]]
            if not 0 <= used <= cls.gpus:
                raise OverAllocationError(f"node {node} holds {used} GPUs but has {cls.gpus}")
            per_member[cls.member] += used
        if per_member != self.member_used:
            raise OverAllocationError(f"per-member totals drifted: {self.member_used} "
                                      f"!= {per_member}")

    def fragmentation(self, shapes: Iterable[PodShape], *,
                      members: Collection[str] | None = None) -> tuple[int, int]:
        """(free GPUs no pending workload can use, free GPUs in all), over the whole fleet.

        Free GPUs are stranded on a member where no pending workload fits as a whole
        (``members`` lists those where one does; None: every member), and elsewhere on
        nodes where no pending GPU pod fits: wrong product, selector or untolerated taint,
        or fewer GPUs free than the smallest such pod needs.
        """
        gpu_shapes = [s for s in set(shapes) if s.gpus > 0]
        stranded = free_total = 0
        for cls, hist in zip(self.classes, self._free_hist, strict=True):
            usable = members is None or cls.member in members
            need = (min((s.gpus for s in gpu_shapes if cls.admits(s)), default=None)
                    if usable else None)
            for free, nodes in hist.items():
                if free <= 0 or nodes <= 0:
                    continue
                free_total += free * nodes
                if need is None or need > free:
                    stranded += free * nodes
        return stranded, free_total
