"""Gangs from the resolved pod-creating instances and the definition's gang rules.

Every pod lands in exactly one unit: a gang, or an entry of independent pods (units of one
pod). Counts are summed (never multiplied): upstream's ``CalculateSubtreeScale`` multiplies
parents by children and does not sum ``podGroups`` members, which gives wrong minimums
(reference §3.7, §3.8). Rules: docs/definitions.md §3.2.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Protocol

from dispatcher.workloads.demand import Gang, PodShape
from dispatcher.workloads.model import GANG_PER, Definition, Expr, GangGroup
from dispatcher.workloads.podspec import PodNeeds

__all__ = ["MAX_GANGS", "GangValues", "Member", "build_gangs", "gang_components",
           "subtree_leaves"]

# a gangsPath may expand to at most this many units: a typo in a count must not build a
# million-entry Dispatch status (LWS-style per-replica gangs are not capped: one per pod
# group the framework really creates)
MAX_GANGS = 10_000
_PLACEHOLDER = re.compile(r"\{(\d)\}")


class GangValues(Protocol):
    """What gang rules need from an evaluated batch (``batchvalues.BatchValues``)."""

    def all(self, expr: Expr) -> list[Any]:
        """Every result of ``expr`` (EvaluationError when it failed)."""

    def number(self, expr: Expr, value: Any) -> int | None:
        """``value`` (a result of ``expr``) as an int; None stays None."""

    def fail(self, expr: Expr, message: str) -> Exception:
        """The EvaluationError for ``expr``."""


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
                values: GangValues) -> tuple[Gang, ...]:
    """The units of one object, in rule order (the definition's paths read via ``values``)."""
    rules = definition.gangs
    if rules is not None and rules.form == "gangsPath" and rules.path is not None:
        return _drop_empty(_listed(rules.path, members, values))
    if rules is None or not rules.groups:
        return _drop_empty([_gang(default_name, members)])
    if rules.form == "podGroup":
        group = rules.groups[0]
        if group.members:
            covered = set().union(*(subtree_leaves(definition, m) for m in group.members))
            minimum = sum(m.min_pods for m in members if m.component in covered)
        else:
            minimum = sum(m.min_pods for m in members)
        return _drop_empty([replace(_gang(group.name, members, minimum=_explicit(
            group, values, fallback=minimum)), topology=group.topology)])
    owner = _assignments(definition)
    gangs: list[Gang] = []
    for group in rules.groups:
        mine = [m for m in members if owner.get(m.component) == group.name]
        gangs.extend(_split(_chosen(group, values), mine, values=values))
    leftover: dict[str, list[Member]] = {}
    for member in members:
        if member.component not in owner:
            leftover.setdefault(member.component, []).append(member)
    gangs.extend(_gang(name, items) for name, items in leftover.items())
    return _drop_empty(gangs)


def gang_components(definition: Definition, *, default_name: str) -> dict[str, tuple[str, ...]]:
    """Gang name -> the pod-creating components whose pods are all in that gang, for the
    gangs a definition's rules name without reading the object (``build_gangs``'s names).

    Only whole-component gangs are listed: the gang of a definition without rules (named
    ``default_name``, as ``build_gangs`` names it), the ``podGroup``, a ``podGroups`` entry
    of one unit per workload (and the one-component gang of a component no entry names).
    A gang per instance, per replica or per pod, one from a ``gangPerPath`` or a
    ``gangsPath`` is not: its pods share a pod template with other units, so a field
    written into the template cannot tell the units apart. A member gang mechanism
    (``control.core.gangsched``) joins pods to their gang through these templates.
    """
    pods = tuple(c.name for c in definition.components if c.spec is not None)
    rules = definition.gangs
    if rules is None or not rules.groups:
        return {default_name: pods} if rules is None or rules.form != "gangsPath" else {}
    if rules.form == "podGroup":
        group = rules.groups[0]
        return {group.name: pods} if group.per_path is None else {}
    owner = _assignments(definition)
    out: dict[str, tuple[str, ...]] = {}
    for group in rules.groups:
        if group.per == "workload" and group.per_path is None:
            mine = tuple(c for c in pods if owner.get(c) == group.name)
            if mine:
                out[group.name] = mine
    for comp in pods:
        if comp not in owner:
            out.setdefault(comp, (comp,))
    return out


def _one(expr: Expr, values: GangValues, what: str) -> Any:
    found = values.all(expr)
    if len(found) != 1:
        raise values.fail(expr, f"{what} must be exactly one result, got {len(found)}")
    return found[0]


def _chosen(group: GangGroup, values: GangValues) -> GangGroup:
    """The group with ``gangPerPath``'s answer as its unit."""
    if group.per_path is None:
        return group
    value = _one(group.per_path, values, "a gang unit")
    per = next((p for p in GANG_PER if p == value), None)
    if per is None:
        raise values.fail(group.per_path, f"must give one of {', '.join(GANG_PER)}, "
                                          f"not {value!r}")
    return replace(group, per=per)


def _split(group: GangGroup, members: Sequence[Member], *, values: GangValues) -> list[Gang]:
    if group.per == "pod":
        return [_gang(group.name, members, minimum=1, independent=True)]
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
                            pod_shapes=_shapes(shapes),
                            templates=_templates(m for m in members if m.replicas > index)))
        return out
    minimum = _explicit(group, values, fallback=sum(m.min_pods for m in members))
    return [_gang(group.name, members, minimum=minimum)]


def _explicit(group: GangGroup, values: GangValues, *, fallback: int) -> int:
    if group.min_pods is None:
        return fallback
    value = values.number(group.min_pods, _one(group.min_pods, values, "a gang minimum"))
    return fallback if value is None else value


def _gang(name: str, members: Sequence[Member], *, minimum: int | None = None,
          independent: bool = False) -> Gang:
    pods = sum(m.pods for m in members)
    wanted = sum(m.min_pods for m in members) if minimum is None else minimum
    return Gang(name=name, pods=pods, min_pods=max(1, min(wanted, pods)) if pods else 0,
                pod_shapes=_shapes([(m.needs, m.pods) for m in members]),
                independent=independent, templates=_templates(members))


def _listed(path: Expr, members: Sequence[Member], values: GangValues) -> list[Gang]:
    """The units a ``gangsPath`` lists, expanded by their ``counts``.

    Each result: ``{name, counts?, minPods?, independent?, members: [{component, id?,
    pods}]}``; ``pods`` are per expanded unit. Every pod of every instance must be in
    exactly one unit, so a path that disagrees with the components' counts is an error
    rather than a silently lost or doubled pod.
    """
    by_key = {(m.component, m.id): m for m in members}
    held = dict.fromkeys(by_key, 0)
    out: list[Gang] = []
    names: set[str] = set()
    for item in values.all(path):
        if not isinstance(item, Mapping):
            raise values.fail(path, f"each gang must be an object, not {item!r}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise values.fail(path, f"gang name must be a non-empty string, not {name!r}")
        counts = [_count(path, values, c, f"gang {name} counts")
                  for c in _items(path, values, item.get("counts", []), f"gang {name} counts")]
        if any(int(i) >= len(counts) for i in _PLACEHOLDER.findall(name)):
            raise values.fail(path, f"gang {name}: a placeholder has no count")
        independent = item.get("independent", False)
        if not isinstance(independent, bool):
            raise values.fail(path, f"gang {name}: independent must be true or false")
        parts: list[tuple[Member, int]] = []
        for raw in _items(path, values, item.get("members"), f"gang {name} members"):
            member = by_key.get((str(raw.get("component")), str(raw.get("id") or ""))) \
                if isinstance(raw, Mapping) else None
            if member is None:
                raise values.fail(path, f"gang {name}: {raw!r} is not a pod-creating "
                                        "instance (component and id)")
            parts.append((member, _count(path, values, raw.get("pods"),
                                         f"gang {name} member pods")))
        total = 1
        for count in counts:
            total *= count
        if len(out) + total > MAX_GANGS:
            raise values.fail(path, f"more than {MAX_GANGS} gangs")
        for member, pods in parts:
            held[(member.component, member.id)] += pods * total
        pods = sum(p for _, p in parts)
        wanted = 1 if independent else item.get("minPods", pods)
        minimum = _count(path, values, wanted, f"gang {name} minPods")
        shapes = _shapes([(m.needs, p) for m, p in parts])
        for index in itertools.product(*(range(c) for c in counts)):
            unit = _unit_name(name, index)
            if unit in names:
                raise values.fail(path, f"gang name {unit} is not unique")
            names.add(unit)
            out.append(Gang(name=unit, pods=pods, min_pods=max(1, min(minimum, pods))
                            if pods else 0, pod_shapes=shapes, independent=independent,
                            templates=_templates(m for m, p in parts if p > 0)))
    for (component, instance), member in by_key.items():
        if held[(component, instance)] != member.pods:
            raise values.fail(path, f"the gangs hold {held[(component, instance)]} of the "
                                    f"{member.pods} pods of {component} "
                                    f"{instance or '(no id)'}")
    return out


def _unit_name(template: str, index: tuple[int, ...]) -> str:
    """``template`` with ``{k}`` replaced by the k-th index (no ``str.format``: a name is
    untrusted text)."""
    if not index:
        return template
    return _PLACEHOLDER.sub(lambda match: str(index[int(match.group(1))]), template)


def _items(path: Expr, values: GangValues, value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise values.fail(path, f"{what} must be a list, not {value!r}")
    return value


def _count(path: Expr, values: GangValues, value: Any, what: str) -> int:
    if type(value) is int and value >= 0:  # the usual case, without the checks below
        return value
    number = values.number(path, value)
    if number is None or number < 0:
        raise values.fail(path, f"{what} must be a whole number >= 0, not {value!r}")
    return number


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


def _templates(members: Iterable[Member]) -> tuple[tuple[str, str], ...]:
    """The (component, instance id) pod templates of ``members``, once each, in order."""
    return tuple(dict.fromkeys((m.component, m.id) for m in members if m.pods > 0))


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
