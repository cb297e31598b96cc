"""A loaded definition as frozen values: components, paths, status rules, gang rules.

Produced by ``definitions.py`` (the loader/validator), consumed by ``resolve.py`` and
``mutate.py``. Every jq path is an ``Expr`` that knows its field path (for error messages)
and its slot in the definition's compiled batch (for evaluation).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.demand import TopologyConstraint
from dispatcher.workloads.holds import Hold
from dispatcher.workloads.jqrun import Batch

__all__ = [
    "DEFAULT_PRECEDENCE",
    "DEMAND_FRAGMENTS",
    "FRAGMENT_FIELDS",
    "GANG_PER",
    "GENERIC_OF_KEY",
    "Component",
    "Condition",
    "Definition",
    "Expr",
    "GangGroup",
    "GangPer",
    "GangScheduling",
    "GenericStatus",
    "Matcher",
    "Scale",
    "SpecSource",
    "StatusRules",
]


class GenericStatus(enum.StrEnum):
    """The generic statuses of DESIGN.md. String-valued: a member equals its name as a
    string, so JSON, logs, Dispatch records and comparisons with stored values are
    unchanged (the YAML representer below keeps ``-o yaml`` output plain too)."""

    PENDING = "pending"
    INITIALIZING = "initializing"
    RUNNING = "running"
    DEGRADED = "degraded"
    COMPLETED = "completed"
    FAILED = "failed"
    SUSPENDED = "suspended"
    UNKNOWN = "unknown"


yaml.SafeDumper.add_representer(
    GenericStatus, lambda dumper, status: dumper.represent_str(status.value))

# statusMappings key -> generic status
GENERIC_OF_KEY: dict[str, GenericStatus] = {
    "resuming": GenericStatus.INITIALIZING, "suspending": GenericStatus.SUSPENDED,
    "suspended": GenericStatus.SUSPENDED, "running": GenericStatus.RUNNING,
    "failed": GenericStatus.FAILED, "completed": GenericStatus.COMPLETED,
    "initializing": GenericStatus.INITIALIZING, "pending": GenericStatus.PENDING,
    # the Karta variant that split Initializing into Pending and Progressing
    # (dsx-ai-factory/karta pkg/api/runai/v1alpha1/structure.go, its nimservice.go): its
    # Progressing is ours initializing, its Pending ours pending
    "progressing": GenericStatus.INITIALIZING,
    "degraded": GenericStatus.DEGRADED,
}
DEFAULT_PRECEDENCE: tuple[str, ...] = (
    "resuming", "suspending", "suspended", "running", "failed", "completed",
    "initializing", "pending", "progressing", "degraded",
)

# fragmentedPodSpecDefinition fields (upstream + dispatcher extensions at the end)
FRAGMENT_FIELDS: tuple[str, ...] = (
    "schedulerNamePath", "labelsPath", "annotationsPath", "resourcesPath",
    "resourceClaimsPath", "podAffinityPath", "nodeAffinityPath", "containersPath",
    "containerPath", "priorityClassNamePath", "imagePath",
    "nodeSelectorPath", "tolerationsPath", "initContainersPath", "nodeNamePath",
)
# the fragments resolve evaluates: what changes what a pod needs, and the scheduling fields
# the operator's policy judges (workloads.podfields); the others (labels, image, ...) are
# only validated at load and used by mutation
DEMAND_FRAGMENTS: frozenset[str] = frozenset({
    "resourcesPath", "nodeAffinityPath", "containersPath", "containerPath",
    "nodeSelectorPath", "tolerationsPath", "initContainersPath",
    "schedulerNamePath", "priorityClassNamePath", "nodeNamePath",
})


@dataclass(frozen=True, kw_only=True)
class Expr:
    """One jq path of a definition: its text, where it is, and its slot in the batch."""

    text: str
    field: str
    slot: int  # -1: not evaluated by resolve (validated at load; mutation reads ``text``)
    section: Literal["demand", "status"] = "demand"


@dataclass(frozen=True, kw_only=True)
class SpecSource:
    """Where a component's pods are described: one of the three upstream patterns."""

    pattern: Literal["template", "podspec", "fragmented"]
    path: Expr | None = None  # podTemplateSpecPath or podSpecPath
    metadata: Expr | None = None
    fragments: tuple[tuple[str, Expr], ...] = ()

    def fragment(self, name: str) -> Expr | None:
        """The fragment path called ``name`` (e.g. ``containersPath``), if defined."""
        for key, expr in self.fragments:
            if key == name:
                return expr
        return None


@dataclass(frozen=True, kw_only=True)
class Scale:
    """Replica paths; ``pods_per_replica``, ``creation_stage`` and ``pod_waves`` are the
    dispatcher's extensions (docs/definitions.md §3.1, §3.8).

    ``creation_stage`` says, per instance, when the operator creates its pods: instances
    of one workload in different stages are created at different times (a later stage
    once an earlier one is ready or done), so a member gang must never hold them
    together. ``pod_waves`` says, per instance, that its pods come in waves (fewer exist
    at once than it will run, later ones replacing finished ones): no minimum of them is
    ever sure to exist at once.
    """

    replicas: Expr | None = None
    min_replicas: Expr | None = None
    max_replicas: Expr | None = None
    pods_per_replica: Expr | None = None
    creation_stage: Expr | None = None
    pod_waves: Expr | None = None

    def exprs(self) -> tuple[Expr, ...]:
        """The defined paths resolve evaluates (maxReplicas is not), in a fixed order."""
        return tuple(e for e in (self.replicas, self.min_replicas, self.max_replicas,
                                 self.pods_per_replica, self.creation_stage, self.pod_waves)
                     if e is not None and e.slot >= 0)


@dataclass(frozen=True, kw_only=True)
class Component:
    """A node of the structure: the root object or a logical view into it."""

    name: str
    kind: GroupVersionKind | None
    owner: str | None
    instance_ids: Expr | None
    spec: SpecSource | None
    scale: Scale | None


@dataclass(frozen=True, kw_only=True)
class Condition:
    """An expected condition of a matcher (upstream + ``absent``/``statusNot``)."""

    type: str
    status: str = ""
    reason: str = ""
    absent: bool = False
    status_not: str | None = None


@dataclass(frozen=True, kw_only=True)
class Matcher:
    """All present parts must hold; an empty matcher always matches."""

    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    expression: Expr | None = None
    upstream_differs: str | None = None
    """``differsFromUpstream`` (extension): why this reading deliberately differs from
    upstream's for the workload state it matches; reported when it decides the status."""


@dataclass(frozen=True, kw_only=True)
class StatusRules:
    """The root's statusDefinition: where phase/conditions are and how they map."""

    phase: Expr | None
    conditions: Expr | None
    type_field: str = "type"
    status_field: str = "status"
    reason_field: str = "reason"
    message_field: str = "message"
    # (mapping key, matchers) in precedence order
    mappings: tuple[tuple[str, tuple[Matcher, ...]], ...] = ()


GangPer = Literal["workload", "instance", "replica", "pod"]
GANG_PER: tuple[GangPer, ...] = ("workload", "instance", "replica", "pod")


@dataclass(frozen=True, kw_only=True)
class GangGroup:
    """One gang rule: a ``podGroups`` entry or the ``podGroup``.

    ``per_path`` (``gangPerPath``) chooses ``per`` from the object, for a framework whose
    unit depends on the spec (a NIMService is gang-scheduled only when multi-node).
    """

    name: str
    members: tuple[str, ...]
    per: GangPer = "workload"
    min_pods: Expr | None = None
    per_path: Expr | None = None
    topology: TopologyConstraint | None = None
    """``podGroup.topology``: keep the gang in one domain of that level (the required
    level, else the preferred one as a preference)."""


@dataclass(frozen=True, kw_only=True)
class GangScheduling:
    """``optimizationInstructions.gangScheduling``: an upstream form, or ``gangsPath``.

    ``gangsPath`` (form ``gangsPath``, ``groups`` empty) lists the units explicitly, for a
    framework that builds them from data (a Grove PodCliqueSet's PodGangs per scaling group).
    """

    form: Literal["podGroup", "podGroups", "gangsPath"]
    groups: tuple[GangGroup, ...]
    path: Expr | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Definition:
    """A validated definition, ready to evaluate objects of one apiVersion/kind."""

    name: str
    source: str
    format: str  # apiVersion/kind of the definition document
    group: str
    version: str
    kind: str
    components: tuple[Component, ...]  # root first, then children in definition order
    status: StatusRules | None
    gangs: GangScheduling | None
    demand_batch: Batch
    status_batch: Batch
    full_batch: Batch  # demand slots, then status slots: one jq call per full resolve
    # copyDefinition.serverSetPaths: what the hub's apiserver set, removed from a copy
    server_set: tuple[Expr, ...] = ()
    # ... of them, the plain field paths as JSON paths ("spec.priority"): a scheduling field
    # found there is the hub's (its admission wrote it), not the tenant's, and goes unjudged
    server_set_fields: frozenset[str] = frozenset()
    # copyDefinition.hubHold: how the kind is kept from running on a shared hub
    hold: Hold | None = None
    # copyDefinition.memberGangs: the member gang mechanisms (kube/gangapis) whose pod
    # fields this kind's controllers carry from the pod templates to the pods
    member_gangs: tuple[str, ...] = ()
    document: dict[str, Any] = field(repr=False)

    @property
    def api_version(self) -> str:
        """The apiVersion of the objects this definition describes."""
        return self.gvk.api_version

    @property
    def gvk(self) -> GroupVersionKind:
        """The type of the objects this definition describes."""
        return GroupVersionKind(self.group, self.version, self.kind)

    @property
    def root(self) -> Component:
        """The root component (the workload object itself)."""
        return self.components[0]

    def component(self, name: str) -> Component | None:
        """The component called ``name``, if any."""
        for comp in self.components:
            if comp.name == name:
                return comp
        return None

    def children_of(self, name: str) -> tuple[Component, ...]:
        """Direct children of a component, in definition order."""
        return tuple(c for c in self.components if c.owner == name)
