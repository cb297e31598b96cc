"""The values at the placement boundary: what a member looks like, what is asked, what is decided.

``MemberSnapshot`` is built by the controller from live state (MemberCluster status, the
member's ``ClusterCapacity``) or by ``dispatcher explain`` from a fleet file; placement reads
nothing else, so both paths decide identically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from dispatcher.fleet.quota import QuotaFit
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.demand import Demand, TopologyConstraint

__all__ = [
    "PIN_ANNOTATION",
    "POLICY_ANNOTATION",
    "SELECTOR_ANNOTATION",
    "TOPOLOGY_ANNOTATION",
    "TOPOLOGY_PREFERRED_ANNOTATION",
    "Decision",
    "DomainRoom",
    "GangDomain",
    "MemberSnapshot",
    "NodeGrant",
    "PlacementError",
    "PlacementRequest",
    "Verdict",
]

PIN_ANNOTATION = "dispatcher.io/cluster"
SELECTOR_ANNOTATION = "dispatcher.io/cluster-selector"
POLICY_ANNOTATION = "dispatcher.io/policy"
TOPOLOGY_ANNOTATION = "dispatcher.io/topology"
"""Every gang of the workload inside one domain of this level (required)."""
TOPOLOGY_PREFERRED_ANNOTATION = "dispatcher.io/topology-preferred"
"""Every gang inside one domain of this level when one holds it, else anywhere."""

_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_WEIGHTS: Mapping[str, float] = MappingProxyType({})


class PlacementError(ValueError):
    """The request itself is wrong (unknown pinned member, bad selector, unknown policy).

    Not "nothing fits": that is a normal ``Decision`` with no choice. The message is meant
    for the workload's Pending condition.
    """


@dataclass(frozen=True, kw_only=True)
class PlacementRequest:
    """What to place and under which rules.

    ``api_version``/``kind`` are the workload's; ``pin`` and ``selector`` come from the
    ``dispatcher.io/cluster`` and ``dispatcher.io/cluster-selector`` annotations; ``prefer``
    lists members to favour, best first (ahead of the policy score among feasible members).
    ``exhaustive`` evaluates every member; by default members ranked below the first
    feasible one are not packed (like kube-scheduler's percentageOfNodesToScore), which keeps
    a decision over 100 members well under a millisecond. ``count_fits`` (for explanations)
    implies ``exhaustive`` and also counts how many times the demand fits on each member.
    ``namespace`` is the workload's (checked against members' allow-lists; a member with
    an allow-list never takes a request whose namespace is not known). ``topology`` (the
    ``dispatcher.io/topology`` annotations) keeps every gang in one domain of a level,
    over whatever the definition's ``podGroup.topology`` said (``placement.domains``).
    ``queue`` is the hub object's Kueue queue label: on a Kueue member the copy's LocalQueue
    unless the member declares one (``fleet.queueing``), whose quota bounds the fit.
    """

    demand: Demand
    api_version: str = ""
    kind: str = ""
    pin: str | None = None
    selector: str | None = None
    policy: str = "most-free"
    prefer: tuple[str, ...] = ()
    weights: Mapping[str, float] = field(default_factory=lambda: _EMPTY_WEIGHTS)
    count_fits: bool = False
    exhaustive: bool = False
    namespace: str = ""
    topology: TopologyConstraint | None = None
    reasons: bool = True
    queue: str | None = None

    @cached_property
    def identity(self) -> tuple[object, ...]:
        """Every field, hashable (``weights`` as sorted items): a memo key for answers that
        are a function of the request (``dispatcher simulate``'s bare-fleet memo)."""
        return (self.demand, self.api_version, self.kind, self.pin, self.selector,
                self.policy, self.prefer, tuple(sorted(self.weights.items())),
                self.count_fits, self.exhaustive, self.namespace, self.topology, self.reasons,
                self.queue)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0] if "/" in self.api_version else ""

    @property
    def gvk(self) -> GroupVersionKind:
        return GroupVersionKind.of(self.api_version, self.kind)

    @classmethod
    def from_annotations(cls, *, demand: Demand, api_version: str, kind: str,
                         annotations: Mapping[str, str], default_policy: str = "most-free",
                         count_fits: bool = False, namespace: str = "") -> PlacementRequest:
        """Read pin, selector, policy and topology from a workload's annotations (the
        required topology annotation wins over the preferred one)."""
        return cls(demand=demand, api_version=api_version, kind=kind,
                   pin=annotations.get(PIN_ANNOTATION) or None,
                   selector=annotations.get(SELECTOR_ANNOTATION) or None,
                   policy=annotations.get(POLICY_ANNOTATION) or default_policy,
                   count_fits=count_fits, namespace=namespace,
                   topology=topology_from_annotations(annotations))


def topology_from_annotations(annotations: Mapping[str, str]) -> TopologyConstraint | None:
    """``dispatcher.io/topology`` (required) or ``dispatcher.io/topology-preferred``."""
    required = annotations.get(TOPOLOGY_ANNOTATION)
    if required:
        return TopologyConstraint(level=str(required), required=True,
                                  source=f"annotation {TOPOLOGY_ANNOTATION}")
    preferred = annotations.get(TOPOLOGY_PREFERRED_ANNOTATION)
    if preferred:
        return TopologyConstraint(level=str(preferred), required=False,
                                  source=f"annotation {TOPOLOGY_PREFERRED_ANNOTATION}")
    return None


@dataclass(frozen=True, slots=True)
class NodeGrant:
    """GPUs (and pods) the assignment puts on one node."""

    node: str
    gpus: int
    pods: int


@dataclass(frozen=True, slots=True)
class GangDomain:
    """Where a gang (or gangs sharing pod templates) was kept: one domain of one level.

    ``gangs`` are gang names; ``level`` the member's level name, ``node_label`` its node
    label and ``value`` the chosen domain. The copy's pod templates of those gangs get a
    required node affinity ``node_label In [value]`` (``control.core.topology``)."""

    gangs: tuple[str, ...]
    level: str
    node_label: str
    value: str

    def to_dict(self) -> dict[str, Any]:
        return {"gangs": list(self.gangs), "level": self.level, "nodeLabel": self.node_label,
                "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GangDomain:
        """The inverse of ``to_dict`` (a Dispatch record); ValueError when malformed."""
        gangs, value = data.get("gangs"), data.get("value")
        label = data.get("nodeLabel")
        if not isinstance(gangs, list) or not all(isinstance(g, str) for g in gangs) \
                or not isinstance(value, str) or not isinstance(label, str) or not label:
            raise ValueError(f"not a gang domain: {dict(data)!r}")
        return cls(gangs=tuple(gangs), level=str(data.get("level") or label),
                   node_label=label, value=value)


@dataclass(frozen=True, slots=True)
class DomainRoom:
    """One domain's numbers for one gang, for explanations: ``free`` GPUs on the domain's
    nodes the gang's pods may use (after the gangs placed before it), and how many of its
    ``wanted`` pods the packer placed there (``pods``)."""

    gangs: tuple[str, ...]
    level: str
    value: str
    free: int
    pods: int
    wanted: int

    def to_dict(self) -> dict[str, Any]:
        return {"gangs": list(self.gangs), "level": self.level, "value": self.value,
                "free": self.free, "pods": self.pods, "wanted": self.wanted}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One member's answer. ``feasible`` is None when the member was not evaluated (a
    better-ranked member fits and the request is not exhaustive). ``fits`` is how many times
    the whole demand fits at once (a lower bound found by the packer; None when not counted),
    ``free_after`` the member's free GPUs after placement, ``score`` the policy's number
    (higher is better). With a topology request, ``domains`` are the domains chosen per
    gang and ``rooms`` (counted fits only, i.e. explanations) every domain's numbers."""

    member: str
    feasible: bool | None
    reason: str
    free: int
    fits: int | None = None
    free_after: int | None = None
    score: float | None = None
    assignment: tuple[NodeGrant, ...] = ()
    domains: tuple[GangDomain, ...] = ()
    rooms: tuple[DomainRoom, ...] = ()
    quota: QuotaFit | None = None
    """On a Kueue member whose queues are known, the quota bound (``fleet.quota``)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "member": self.member, "feasible": self.feasible, "reason": self.reason,
            "free": self.free, "fits": self.fits, "freeAfter": self.free_after,
            "score": self.score}
        if self.assignment:
            data["assignment"] = [{"node": g.node, "gpus": g.gpus, "pods": g.pods}
                                  for g in self.assignment]
        if self.domains:
            data["domains"] = [d.to_dict() for d in self.domains]
        if self.rooms:
            data["rooms"] = [r.to_dict() for r in self.rooms]
        if self.quota is not None:
            data["quota"] = self.quota.to_dict()
        return data


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Every member's verdict (best first), the choice and its node assignment; with a
    topology request, ``domains``: the chosen member's domain per gang."""

    policy: str
    pods: int
    gpus: int
    gangs: int
    verdicts: tuple[Verdict, ...]
    chosen: str | None
    assignment: tuple[NodeGrant, ...]
    summary: str
    domains: tuple[GangDomain, ...] = ()

    def verdict(self, member: str) -> Verdict:
        for verdict in self.verdicts:
            if verdict.member == member:
                return verdict
        raise KeyError(member)

    def to_dict(self) -> dict[str, Any]:
        """For one JSON log line per decision and ``dispatcher explain -o json``."""
        data: dict[str, Any] = {
            "policy": self.policy, "pods": self.pods, "gpus": self.gpus, "gangs": self.gangs,
            "chosen": self.chosen, "summary": self.summary,
            "assignment": [{"node": g.node, "gpus": g.gpus, "pods": g.pods}
                           for g in self.assignment],
            "members": [v.to_dict() for v in self.verdicts],
        }
        if self.domains:
            data["domains"] = [d.to_dict() for d in self.domains]
        return data
