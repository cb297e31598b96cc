"""Gangs from the resolved pod-creating instances and the definition's gang rules.

Every pod lands in exactly one gang. Counts are summed (never multiplied): upstream's
``CalculateSubtreeScale`` multiplies parents by children and does not sum ``podGroups``
members, which gives wrong minimums (reference §3.7, §3.8). Rules: docs/definitions.md §3.2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from dispatcher.workloads.demand import Gang, PodShape
from dispatcher.workloads.model import Definition, Expr, GangGroup
from dispatcher.workloads.podspec import PodNeeds

__all__ = ["Member", "build_gangs", "subtree_leaves"]

MinPods = Callable[[Expr], int | None]


@dataclass(frozen=True, kw_only=True)
class Member:
    """One pod-creating instance, as gangs see it."""

    component: str
    id: str
    replicas: int
    pods_per_replica: int
    pods: int
    min_pods: int
    needs: PodNeeds


def build_gangs(definition: Definition, members: Sequence[Member], *, default_name: str,
                min_pods: MinPods) -> tuple[Gang, ...]:
    """The gangs of one object; ``min_pods`` evaluates a ``minPodsPath`` (None: not given)."""
    rules = definition.gangs
    if rules is None or not rules.groups:
        return _drop_empty([_gang(default_name, members)])
    if rules.form == "podGroup":
        group = rules.groups[0]
        if group.members:
            covered = set().union(*(subtree_leaves(definition, m) for m in group.members))
            minimum = sum(m.min_pods for m in members if m.component in covered)
        else:
            minimum = sum(m.min_pods for m in members)
        return _drop_empty([_gang(group.name, members, minimum=_explicit(
            group, min_pods, fallback=minimum))])
    owner = _assignments(definition)
    gangs: list[Gang] = []
    for group in rules.groups:
        mine = [m for m in members if owner.get(m.component) == group.name]
        gangs.extend(_split(group, mine, min_pods=min_pods))
    leftover: dict[str, list[Member]] = {}
    for member in members:
        if member.component not in owner:
            leftover.setdefault(member.component, []).append(member)
    gangs.extend(_gang(name, items) for name, items in leftover.items())
    return _drop_empty(gangs)


def _split(group: GangGroup, members: Sequence[Member], *, min_pods: MinPods) -> list[Gang]:
    if group.per == "instance":
        by_id: dict[str, list[Member]] = {}
        for member in members:
            by_id.setdefault(member.id, []).append(member)
        return [_gang(f"{group.name}-{i}" if i else group.name, items)
                for i, items in by_id.items()]
    if group.per == "replica":
        out = []
        for index in range(max((m.replicas for m in members), default=0)):
            shapes = [(m.needs, m.pods_per_replica) for m in members if m.replicas > index]
            pods = sum(count for _, count in shapes)
            out.append(Gang(name=f"{group.name}-{index}", pods=pods, min_pods=pods,
                            pod_shapes=_shapes(shapes)))
        return out
    minimum = _explicit(group, min_pods, fallback=sum(m.min_pods for m in members))
    return [_gang(group.name, members, minimum=minimum)]


def _explicit(group: GangGroup, min_pods: MinPods, *, fallback: int) -> int:
    if group.min_pods is None:
        return fallback
    value = min_pods(group.min_pods)
    return fallback if value is None else value


def _gang(name: str, members: Sequence[Member], *, minimum: int | None = None) -> Gang:
    pods = sum(m.pods for m in members)
    wanted = sum(m.min_pods for m in members) if minimum is None else minimum
    return Gang(name=name, pods=pods, min_pods=max(1, min(wanted, pods)) if pods else 0,
                pod_shapes=_shapes([(m.needs, m.pods) for m in members]))


def _shapes(items: Sequence[tuple[PodNeeds, int]]) -> tuple[PodShape, ...]:
    """Identical pods grouped, in order of first appearance."""
    counts: dict[tuple[object, ...], tuple[PodNeeds, int]] = {}
    for needs, count in items:
        if count <= 0:
            continue
        key = needs.key()
        previous = counts.get(key)
        counts[key] = (needs, count + (previous[1] if previous else 0))
    return tuple(PodShape(count=count, gpus=n.gpus, gpu_product=n.gpu_product, cpu=n.cpu,
                          memory=n.memory, node_selector=n.node_selector,
                          tolerations=n.tolerations)
                 for n, count in counts.values())


def _drop_empty(gangs: Sequence[Gang]) -> tuple[Gang, ...]:
    return tuple(g for g in gangs if g.pods > 0)


@lru_cache(maxsize=1024)
def subtree_leaves(definition: Definition, name: str) -> frozenset[str]:
    """Pod-creating components in the subtree of ``name`` (itself included)."""
    found = {name} if _creates_pods(definition, name) else set()
    for child in definition.children_of(name):
        found |= subtree_leaves(definition, child.name)
    return frozenset(found)


def _creates_pods(definition: Definition, name: str) -> bool:
    comp = definition.component(name)
    return comp is not None and comp.spec is not None


@lru_cache(maxsize=256)
def _assignments(definition: Definition) -> dict[str, str]:
    """Pod-creating component -> ``podGroups`` entry, the most direct mention winning.

    Upstream's candidate order: the component itself, then its parent, grandparent, ...;
    at each level the entries in order (filters are pod-side and not evaluated).
    """
    rules = definition.gangs
    owners = {c.name: c.owner for c in definition.components}
    out: dict[str, str] = {}
    for comp in definition.components:
        if comp.spec is None or rules is None:
            continue
        current: str | None = comp.name
        seen: set[str] = set()
        while current is not None and current not in seen and comp.name not in out:
            seen.add(current)
            for group in rules.groups:
                if current in group.members:
                    out[comp.name] = group.name
                    break
            current = owners.get(current)
    return out
