"""Steer a copy's pods: required node affinity to the chosen topology domains, preferred
node affinity to the planned nodes.

**Domains.** Placement (``placement.domains``) chose one domain per gang (a rack, an NVLink
clique) and reserved GPUs there; the member's own scheduler must stay inside it. Every pod
template of such a gang gets, in the copy,
``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` with the match expression
``<level's node label> In [<domain>]``. The user's own affinity is never widened: required
node selector terms are ORed and the expressions inside one term ANDed, so the expression
is added to *every* existing term (each alternative the user allowed is narrowed to the
domain); a template without required terms gets one term with only this expression. An
empty term matches no node in Kubernetes; adding an expression to it would make it match,
so it is left empty.

**Planned nodes.** Placement also chose the nodes, and reserved their GPUs until the pods
bind. The member's scheduler does not know that plan, and its default profile scores
nodes by CPU and memory only (``LeastAllocated``), blind to GPUs: which of the nodes a GPU
pod fits on it takes is not the plan's. A small pod on the empty node planned for another
workload's 8-GPU pod leaves that one unschedulable while GPUs sit free in pieces on other
nodes (measured with ``benchmarks/peers.py``). Every pod template whose pods ask
for GPUs gets one *preferred* term per planned node, weight 100, ``matchFields
metadata.name In [<node>]`` (the apiserver takes one value per field requirement; a
CPU-only template, an MPI launcher, gets none): a planned node scores the most on the
scheduler's node-affinity score (weight 2 in the default profile), which outweighs the
resource scores, so pods take the planned nodes when they fit there and any other node
when not. A preference never makes a
pod unschedulable. The term is added once (an update recomputes the same one from the
recorded plan); the user's own preferred and required terms stay as written.
``submit.preferPlannedNodes: false`` turns it off.

Which templates: a gang names its pod templates as (component, instance id) pairs
(``Gang.templates``, from the resolution); the instance's index among the component's
instances is the index of its template among the locations of the definition's spec path,
as ``workloads.mutate`` writes every other pod field. A fragmented pod spec is written
through its ``nodeAffinityPath`` fragment. Pure apart from the ``Locator`` (the bounded
jq worker for an untrusted definition).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.placement.model import GangDomain
from dispatcher.workloads.demand import Gang
from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.model import Component, Definition, Expr
from dispatcher.workloads.paths import Locator, expr_locations, in_process, value_at
from dispatcher.workloads.resolve import Resolution

__all__ = [
    "PREFERRED",
    "REQUIRED",
    "Domains",
    "carries_planned",
    "gpu_templates",
    "keep_in_domains",
    "narrowed",
    "preferring",
    "steer",
]

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
PLANNED_WEIGHT = 100  # the most a preferred term may weigh

Pin = tuple[str, str]  # (node label, value)
Target = tuple[list[Pin], Sequence[str]]  # a template's pins, and the nodes it prefers


@dataclass(frozen=True, kw_only=True)
class Domains:
    """A decision's domains and planned nodes, with what the copy needs to find the gangs'
    templates."""

    domains: tuple[GangDomain, ...]
    gangs: tuple[Gang, ...]
    instances: Mapping[str, tuple[str, ...]]
    nodes: tuple[str, ...] = ()
    gpu: frozenset[tuple[str, str]] = frozenset()
    """(component, instance id) of the templates whose pods ask for GPUs."""

    @classmethod
    def of(cls, domains: Sequence[GangDomain], resolution: Resolution, *,
           nodes: Sequence[str] = ()) -> Domains:
        return cls(domains=tuple(domains), gangs=resolution.demand.gangs,
                   instances={c.name: tuple(i.id for i in c.instances)
                              for c in resolution.components}, nodes=tuple(nodes),
                   gpu=gpu_templates(resolution))

    def apply(self, obj: Mapping[str, Any], definition: Definition, *,
              locate: Locator = in_process) -> dict[str, Any]:
        """``steer`` with these domains and nodes, written into ``obj`` itself (the copy
        plan's own body, built for this copy: no second copy of it)."""
        targets = _targets(self.domains, self.nodes, self.gangs, self.instances, self.gpu)
        return _edited(obj, definition, targets, locate=locate, in_place=True)


def gpu_templates(resolution: Resolution) -> frozenset[tuple[str, str]]:
    """(component, instance id) of every template of ``resolution`` whose pods ask for
    GPUs."""
    return frozenset((c.name, i.id) for c in resolution.components for i in c.instances
                     if i.needs.gpus > 0)


def _affinity_copy(node_affinity: Any, *, where: str) -> dict[str, Any]:
    """A deep copy of a ``v1.NodeAffinity`` dict (None: an empty one)."""
    if node_affinity is None:
        return {}
    if not isinstance(node_affinity, Mapping):
        raise MutationError(f"{where}: nodeAffinity is not an object")
    return copy.deepcopy(dict(node_affinity))


def narrowed(node_affinity: Any, pins: Sequence[Pin], *, where: str) -> dict[str, Any]:
    """``node_affinity`` (a ``v1.NodeAffinity`` dict or None) with every pin required in
    every required term (module docstring); the input is not modified."""
    out = _affinity_copy(node_affinity, where=where)
    required = out.get(REQUIRED)
    if required is None:
        required = {}
    if not isinstance(required, Mapping):
        raise MutationError(f"{where}: nodeAffinity.{REQUIRED} is not an object")
    required = dict(required)
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        terms = []
    if not isinstance(terms, list):
        raise MutationError(f"{where}: nodeSelectorTerms is not a list")
    wanted = [{"key": label, "operator": "In", "values": [value]} for label, value in pins]
    if not terms:
        terms = [{"matchExpressions": wanted}]
    else:
        narrowed_terms = []
        for i, given in enumerate(terms):
            if not isinstance(given, Mapping):
                raise MutationError(f"{where}: nodeSelectorTerms[{i}] is not an object")
            term = dict(given)
            expressions = term.get("matchExpressions")
            if expressions is not None and not isinstance(expressions, list):
                raise MutationError(f"{where}: nodeSelectorTerms[{i}].matchExpressions is "
                                    f"not a list")
            if not expressions and not term.get("matchFields"):
                narrowed_terms.append(term)  # matches nothing; an expression would widen it
                continue
            merged = list(expressions or [])
            merged.extend(e for e in wanted if e not in merged)
            term["matchExpressions"] = merged
            narrowed_terms.append(term)
        terms = narrowed_terms
    required["nodeSelectorTerms"] = terms
    out[REQUIRED] = required
    return out


def preferring(node_affinity: Any, nodes: Sequence[str], *, where: str) -> dict[str, Any]:
    """``node_affinity`` with one preferred term per node of ``nodes``, by name (module
    docstring), unless it has that term already; the input is not modified."""
    out = _affinity_copy(node_affinity, where=where)
    terms = out.get(PREFERRED)
    if terms is None:
        terms = []
    if not isinstance(terms, list):
        raise MutationError(f"{where}: nodeAffinity.{PREFERRED} is not a list")
    terms = list(terms)
    for node in sorted(set(nodes)):
        term = _planned_term(node)
        if term not in terms:
            terms.append(term)
    out[PREFERRED] = terms
    return out


def _planned_term(node: str) -> dict[str, Any]:
    """The preferred term for one planned node: ``matchFields`` on ``metadata.name`` (the
    node's name itself, whatever its labels; the apiserver takes one value per field
    requirement, hence one term per node)."""
    return {"weight": PLANNED_WEIGHT, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}}


def carries_planned(obj: Any, nodes: Sequence[str]) -> bool:
    """Whether ``obj`` (a copy as the member holds it) has a planned-node term for every
    node of ``nodes`` somewhere. An update recomputes the terms only for a copy made with
    them: a copy made before (an upgrade) keeps its templates, which a Job's immutable pod
    template requires."""
    wanted = [_planned_term(node) for node in set(nodes)]
    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            terms = value.get(PREFERRED)
            if isinstance(terms, list):
                found.extend(terms)
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(obj)
    return bool(wanted) and all(term in found for term in wanted)


def _pins(domains: Sequence[GangDomain], gangs: Sequence[Gang],
          instances: Mapping[str, Sequence[str]]) -> dict[tuple[str, int], list[Pin]]:
    """(component, instance index) -> the pins its template must carry. A gang no longer
    in the resolution (the spec changed since the decision) pins nothing."""
    by_name = {g.name: g for g in gangs}
    out: dict[tuple[str, int], list[Pin]] = {}
    for domain in domains:
        pin = (domain.node_label, domain.value)
        for name in domain.gangs:
            gang = by_name.get(name)
            if gang is None:
                continue
            for component, instance in gang.templates:
                ids = list(instances.get(component, ()))
                if instance not in ids:
                    continue
                pins = out.setdefault((component, ids.index(instance)), [])
                if pin not in pins:
                    pins.append(pin)
    return out


def _where(definition: Definition, comp: Component) -> tuple[Expr, tuple[str, ...]]:
    """The path to write a component's node affinity through, and the suffix below it."""
    spec = comp.spec
    problem = f"definition {definition.name}: component {comp.name}: cannot keep its pods " \
              f"in a topology domain"
    if spec is None:
        raise MutationError(f"{problem}: no pod spec")
    if spec.pattern in ("template", "podspec"):
        if spec.path is None:
            raise MutationError(f"{problem}: empty pod spec path")
        prefix = ("spec",) if spec.pattern == "template" else ()
        return spec.path, (*prefix, "affinity", "nodeAffinity")
    fragment = spec.fragment("nodeAffinityPath")
    if fragment is None:
        raise MutationError(f"{problem}: fragmentedPodSpecDefinition has no nodeAffinityPath")
    return fragment, ()


def keep_in_domains(obj: Mapping[str, Any], definition: Definition, *,
                    domains: Sequence[GangDomain], gangs: Sequence[Gang],
                    instances: Mapping[str, Sequence[str]],
                    locate: Locator = in_process) -> dict[str, Any]:
    """A copy of ``obj`` whose pod templates of each domain's gangs require that domain.

    ``gangs`` and ``instances`` (component -> instance ids, in order) come from the
    workload's resolution. Raises MutationError when a template cannot be written."""
    return steer(obj, definition, domains=domains, nodes=(), gangs=gangs,
                 instances=instances, gpu=(), locate=locate)


def steer(obj: Mapping[str, Any], definition: Definition, *,
          domains: Sequence[GangDomain], nodes: Sequence[str], gangs: Sequence[Gang],
          instances: Mapping[str, Sequence[str]], gpu: Collection[tuple[str, str]],
          locate: Locator = in_process) -> dict[str, Any]:
    """A copy of ``obj`` whose pod templates require their gangs' domains and, those of
    ``gpu`` (``gpu_templates``), prefer ``nodes`` (the decision's planned nodes), in one
    pass over the templates (module docstring). Raises MutationError when a template
    cannot be written."""
    return _edited(obj, definition, _targets(domains, nodes, gangs, instances, gpu),
                   locate=locate, in_place=False)


def _targets(domains: Sequence[GangDomain], nodes: Sequence[str], gangs: Sequence[Gang],
             instances: Mapping[str, Sequence[str]], gpu: Collection[tuple[str, str]]
             ) -> dict[tuple[str, int], Target]:
    """(component, instance index) -> its template's pins and preferred nodes."""
    pins = _pins(domains, gangs, instances)
    preferred = _preferred(nodes, gpu, instances)
    return {key: (pins.get(key, []), preferred.get(key, ()))
            for key in pins.keys() | preferred.keys()}


def _steered(node_affinity: Any, target: Target, *, where: str) -> dict[str, Any]:
    """``node_affinity`` narrowed to the target's pins and preferring its nodes."""
    pins, nodes = target
    out = narrowed(node_affinity, pins, where=where) if pins else node_affinity
    return preferring(out, nodes, where=where) if nodes else out


def _preferred(nodes: Sequence[str], gpu: Collection[tuple[str, str]],
               instances: Mapping[str, Sequence[str]]) -> dict[tuple[str, int], Sequence[str]]:
    """(component, instance index) -> the nodes its template prefers: the templates whose
    pods ask for GPUs (a CPU-only pod, an MPI launcher, is not steered onto GPU nodes)."""
    out: dict[tuple[str, int], Sequence[str]] = {}
    if not nodes:
        return out
    for component, instance in gpu:
        ids = list(instances.get(component, ()))
        if instance in ids:
            out[(component, ids.index(instance))] = tuple(nodes)
    return out


def _edited(obj: Mapping[str, Any], definition: Definition,
            targets: Mapping[tuple[str, int], Target], *, locate: Locator,
            in_place: bool) -> dict[str, Any]:
    """``obj`` (a copy of it unless ``in_place``) with the node affinity of each
    (component, instance index) template of ``targets`` steered (``_steered``)."""
    out: dict[str, Any] = obj if in_place and isinstance(obj, dict) \
        else copy.deepcopy(dict(obj))
    if not targets:
        return out
    comps = {c.name: c for c in definition.components}
    names = sorted({component for component, _ in targets})
    plan = [(comps[name], *_where(definition, comps[name])) for name in names
            if name in comps]
    found = expr_locations([expr for _, expr, _ in plan], out, locate=locate, verb="written",
                           where=lambda i: f"definition {definition.name}: component "
                                           f"{plan[i][0].name}")
    for (comp, expr, suffix), locations in zip(plan, found, strict=True):
        for (component, index), target in sorted(targets.items(), key=lambda kv: kv[0]):
            if component != comp.name:
                continue
            where = f"component {comp.name}: {expr.field}"
            if index >= len(locations):
                raise MutationError(f"{where}: no pod template for instance {index}")
            _write(out, [*locations[index], *suffix], target, where=where)
    return out


def _write(root: dict[str, Any], path: Sequence[str | int], target: Target, *,
           where: str) -> None:
    """Steer the node affinity at ``path`` (created when missing, like jq assign)."""
    if not path:
        raise MutationError(f"{where}: the path addresses the whole object")
    parent: Any = root
    for i, step in enumerate(path[:-1]):
        child = value_at(parent, [step])
        if child is None:
            if isinstance(step, int):
                raise MutationError(f"{where}: index {step} is out of range")
            child = {} if not isinstance(path[i + 1], int) else []
            parent[step] = child
        parent = child
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(parent, list) or not -len(parent) <= last < len(parent):
            raise MutationError(f"{where}: index {last} is out of range")
        parent[last] = _steered(parent[last], target, where=where)
    else:
        if not isinstance(parent, dict):
            raise MutationError(f"{where}: cannot set {last!r} in {type(parent).__name__}")
        parent[last] = _steered(parent.get(last), target, where=where)
