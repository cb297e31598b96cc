"""What a workload asks of a cluster: gangs of pods with their GPU shapes.

This is the boundary between ``workloads`` (which resolves an object through its definition
into a ``Demand``) and ``placement`` (which fits a ``Demand`` onto a cluster's nodes). Plain,
frozen data: no jq, no Kubernetes client, cheap to hash and compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = ["Demand", "Gang", "PodShape", "Toleration", "TopologyConstraint"]

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """A pod toleration, as in ``core/v1`` (empty strings where the pod left a field out)."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: TaintEffect = ""

    def tolerates(self, *, key: str, value: str, effect: str) -> bool:
        """Whether this toleration matches a taint, with the scheduler's rules.

        An empty key with ``Exists`` matches every taint; an empty effect matches every effect.
        """
        if self.effect and self.effect != effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True, kw_only=True)
class PodShape:
    """``count`` identical pods: what each needs from one node.

    ``gpus`` follows DESIGN.md: max(sum over containers, max over init containers) of
    ``nvidia.com/gpu`` (limits, else requests). ``gpu_product`` is the required
    ``nvidia.com/gpu.product`` (node selector or single-valued required affinity), or None for
    any product. ``node_selector`` holds the other required node labels (product excluded).
    ``cpu``/``memory`` are the pod's requests as Kubernetes quantity strings, for display.
    """

    count: int
    gpus: int
    gpu_product: str | None = None
    cpu: str | None = None
    memory: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tolerations: tuple[Toleration, ...] = ()

    def __hash__(self) -> int:
        return hash((self.count, self.gpus, self.gpu_product, self.cpu, self.memory,
                     tuple(sorted(self.node_selector.items())), self.tolerations))


@dataclass(frozen=True, kw_only=True)
class TopologyConstraint:
    """Keep a gang inside one domain of a topology level (one rack, one NVLink clique).

    ``level`` is what was asked: a level name a member declares (``rack``) or the node
    label key of one (``nvidia.com/gpu.clique``, the Workload Map's
    ``requiredTopologyLevel`` form); each member resolves it against its own levels.
    ``required`` False (``preferredTopologyLevel``, ``dispatcher.io/topology-preferred``):
    one domain when some domain holds the gang, else anywhere on the member. ``source``
    says where it came from, for explanations.
    """

    level: str
    required: bool = True
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class Gang:
    """One scheduling unit of a workload as its framework defines it, or a set of them.

    A gang (``independent`` False) is pods the framework's gang scheduler starts together:
    ``min_pods`` is its minimum (for elastic jobs below ``pods``). ``independent`` True
    stands for ``pods`` units of one pod each (a Deployment's replicas, a RayJob's
    submitter): no co-scheduling, so ``min_pods`` is 1; one entry instead of one per pod
    keeps a 1000-replica Deployment's Dispatch status small. Placement ignores the split:
    every pod of every unit of a workload is placed at once on one cluster.

    ``topology`` (a definition's ``podGroup.topology``) asks placement to keep the gang in
    one topology domain. ``templates`` names the pod templates its pods come from, as
    (component, instance id) pairs: a copy can steer pods only per template, so gangs that
    share a template share one domain (``placement.domains``).
    """

    name: str
    pods: int
    min_pods: int
    pod_shapes: tuple[PodShape, ...]
    independent: bool = False
    topology: TopologyConstraint | None = None
    templates: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        """GPUs of every pod of the gang together."""
        return sum(shape.count * shape.gpus for shape in self.pod_shapes)


@dataclass(frozen=True, kw_only=True)
class Demand:
    """Everything one workload needs at once: its gangs (all on the same cluster)."""

    gangs: tuple[Gang, ...]

    @property
    def pods(self) -> int:
        """Pods of all gangs."""
        return sum(gang.pods for gang in self.gangs)

    @property
    def gpus(self) -> int:
        """GPUs of all gangs."""
        return sum(gang.gpus for gang in self.gangs)
