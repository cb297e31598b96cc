"""Gang fit inside one topology domain: every pod of a gang in one rack, block or clique.

For multi-node GPU training the fit that matters is "inside one NVLink domain / rack", not
"somewhere on the member". A gang with a topology constraint (``Gang.topology`` from the
definition's ``podGroup.topology``, or the ``dispatcher.io/topology`` annotation for every
gang and every entry of independent pods) is resolved against the member's levels
(``fleet.topology``) to a node label; each value of that label among the member's nodes is
a *domain*.

Keeping a gang in domain ``v`` is the same as giving its pods the node selector
``label=v``, so the fit is the ordinary packer (``placement.fit``) over pod shapes with that
selector added: sound like the packer (a "fits" always comes with a node assignment that
respects every per-node constraint), and the copy enforces the same thing on the member with
a required node affinity (``control.core.topology``).

Units: gangs that share a pod template are one unit (a copy steers pods per template, so an
LWS whose groups all come from one template keeps them all in one domain). Units are placed
largest first (GPUs, then name), each into the best domain that still holds it beside the
units placed before it: ``most-free`` takes the domain with the most free GPUs the unit's
pods may use, ``best-fit`` the fullest that still holds it (ties: the domain's name). The
gangs without a constraint and independent pods are packed last, anywhere. Greedy like the
packer: it may miss a combination (a unit taking the domain a later one needed) and then
reports infeasible, never a wrong fit.

A required constraint that no domain satisfies makes the member infeasible, with numbers: the
best domain and how many of the gang's pods the packer placed there ("no rack holds gang
train (8 pods, 64 GPUs): best rack r1 holds 6 of 8 pods (48 GPUs free there); 2 racks, 96
GPUs free on the member"). A preferred one falls back to anywhere on the member.
Not modelled: a user's own node affinity on the level's label (only ``nodeSelector`` is
read, as for every label): a template that excludes the chosen domain stays Pending there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from dispatcher.fleet.capacity import ClusterCapacity, NodeClass
from dispatcher.fleet.topology import TopologyLevel, resolve_level
from dispatcher.placement.fit import PackResult, PodGroup, eligible, pack, pod_groups
from dispatcher.placement.model import DomainRoom, GangDomain
from dispatcher.workloads.demand import Demand, Gang, PodShape, TopologyConstraint

__all__ = ["DomainFit", "Unit", "fit_domains", "units_of"]

_SHOWN = 3  # domains named in a misfit reason besides the best one


@dataclass(frozen=True, slots=True)
class Unit:
    """Gangs that must share one domain (one gang, or gangs sharing pod templates)."""

    gangs: tuple[Gang, ...]
    constraint: TopologyConstraint

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.gangs)

    @property
    def label(self) -> str:
        """``gang NAME`` / ``gangs A, B`` (``pods NAME`` for independent pods), for
        reasons."""
        if len(self.gangs) == 1 and self.gangs[0].independent:
            return f"pods {self.gangs[0].name}"
        names = self.names
        return f"gang {names[0]}" if len(names) == 1 else f"gangs {', '.join(names)}"

    @property
    def pods(self) -> int:
        return sum(g.pods for g in self.gangs)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.gangs)


def units_of(demand: Demand, override: TopologyConstraint | None
             ) -> tuple[tuple[Unit, ...], tuple[Gang, ...]]:
    """The constrained units (largest first) and the gangs placed anywhere.

    ``override`` (the workload's annotation) replaces every gang's own constraint, and
    also keeps each entry of independent pods (a Job's parallel pods, a Deployment's
    replicas) in one domain: the user asked for this workload's pods to be together. A
    definition's own constraint is a gang's only."""
    constrained: list[tuple[Gang, TopologyConstraint]] = []
    rest: list[Gang] = []
    for gang in demand.gangs:
        constraint = override if override is not None else \
            (None if gang.independent else gang.topology)
        if constraint is None or gang.pods <= 0:
            rest.append(gang)
        else:
            constrained.append((gang, constraint))
    groups: list[list[tuple[Gang, TopologyConstraint]]] = []
    owner: dict[tuple[str, str], int] = {}
    for gang, constraint in constrained:
        joined = sorted({owner[t] for t in gang.templates if t in owner})
        if not joined:
            index = len(groups)
            groups.append([(gang, constraint)])
        else:
            index = joined[0]
            groups[index].append((gang, constraint))
            for other in joined[1:]:  # this gang bridges two groups: merge them
                groups[index].extend(groups[other])
                for key, at in owner.items():
                    if at == other:
                        owner[key] = index
                groups[other] = []
        for template in gang.templates:
            owner[template] = index
    units = [Unit(gangs=tuple(g for g, _ in group), constraint=group[0][1])
             for group in groups if group]
    units.sort(key=lambda u: (-u.gpus, u.names))
    return tuple(units), tuple(rest)


@dataclass(frozen=True, slots=True)
class DomainFit:
    """The answer for one member: the packing (None: infeasible), the domain per unit,
    the numbers per domain (when asked, or for the unit that failed) and the reason:
    why not, or where each unit went."""

    result: PackResult | None
    domains: tuple[GangDomain, ...]
    rooms: tuple[DomainRoom, ...]
    reason: str


def _pinned(gang: Gang, label: str, value: str) -> Gang | None:
    """``gang`` with every pod shape's node selector requiring ``label=value``; None when
    a shape already requires another value of that label (no such domain for it)."""
    shapes: list[PodShape] = []
    for shape in gang.pod_shapes:
        current = shape.node_selector.get(label)
        if current is not None and current != value:
            return None
        shapes.append(replace(shape, node_selector={**shape.node_selector, label: value}))
    return replace(gang, pod_shapes=tuple(shapes))


def _groups(gangs: Sequence[Gang]) -> tuple[PodGroup, ...]:
    return pod_groups(Demand(gangs=tuple(gangs)))


def _domains(capacity: ClusterCapacity, label: str) -> dict[str, list[NodeClass]]:
    """Domain value -> the member's node classes in it (nodes without the label are in
    none)."""
    out: dict[str, list[NodeClass]] = {}
    for cls in capacity.classes():
        value = cls.label_map.get(label)
        if value is not None:
            out.setdefault(value, []).append(cls)
    return dict(sorted(out.items()))


def _usable_free(classes: Sequence[NodeClass], groups: Sequence[PodGroup]) -> int:
    """Free GPUs on the classes some GPU pod of ``groups`` may use (all of them when the
    unit has no GPU pods)."""
    gpu_groups = [g for g in groups if g.gpus > 0]
    total = 0
    for cls in classes:
        if not gpu_groups or any(eligible(cls, g) for g in gpu_groups):
            total += sum(free * len(names) for free, names in cls.free_nodes.items())
    return total


def _prefix(gang: Gang, pods: int) -> Gang:
    """The first ``pods`` pods of ``gang``, largest first (what a partial fit counts)."""
    shapes: list[PodShape] = []
    left = pods
    for shape in sorted(gang.pod_shapes, key=lambda s: -s.gpus):
        if left <= 0:
            break
        take = min(shape.count, left)
        shapes.append(replace(shape, count=take))
        left -= take
    return replace(gang, pods=pods, min_pods=min(gang.min_pods, pods), pod_shapes=tuple(shapes))


def _room(capacity: ClusterCapacity, placed: Sequence[Gang], unit: Unit, label: str,
          value: str) -> int:
    """How many of the unit's pods the packer places in domain ``value`` beside ``placed``
    (largest pods first; binary search, every answer backed by a packing)."""
    whole = Gang(name=unit.label, pods=unit.pods, min_pods=unit.pods,
                 pod_shapes=tuple(s for g in unit.gangs for s in g.pod_shapes))

    def packs(pods: int) -> bool:
        pinned = _pinned(_prefix(whole, pods), label, value)
        return pinned is not None and pack(capacity, _groups([*placed, pinned])) is not None

    low, high = 0, unit.pods
    if packs(high):
        return high
    high -= 1
    while low < high:
        mid = (low + high + 1) // 2
        if packs(mid):
            low = mid
        else:
            high = mid - 1
    return low


class _Fitter:
    """One member's greedy domain assignment (module docstring)."""

    def __init__(self, capacity: ClusterCapacity, levels: Sequence[TopologyLevel], *,
                 best_fit: bool, rooms: bool) -> None:
        self.capacity = capacity
        self.levels = levels
        self.best_fit = best_fit
        self.want_rooms = rooms
        self.placed: list[Gang] = []  # pinned gangs of the units placed so far
        self.taken: dict[tuple[str, str], int] = {}  # (label, value) -> GPUs placed there
        self.domains: list[GangDomain] = []
        self.rooms: list[DomainRoom] = []
        self.clauses: list[str] = []
        self.loose: list[Gang] = []  # preferred units that no domain holds

    def unit(self, unit: Unit) -> str | None:
        """Place one unit; the reason the member is infeasible, or None."""
        asked = unit.constraint
        level = resolve_level(asked.level, self.levels)
        if level is None:
            known = ", ".join(f"{lv.name} ({lv.node_label})" for lv in self.levels)
            why = (f"no topology level {asked.level!r} here ({asked.source or 'asked'}; "
                   f"levels: {known or 'none declared'})")
            return self._miss(unit, why)
        domains = _domains(self.capacity, level.node_label)
        if not domains:
            return self._miss(unit, f"no node has label {level.node_label} (topology level "
                                    f"{level.name})")
        ranked: list[tuple[tuple[int, str], str, int, int]] = []  # key, value, usable, free
        for value, classes in domains.items():
            pinned = _pinned_unit(unit, level.node_label, value)
            if pinned is None:
                continue
            usable = _usable_free(classes, _groups(pinned))
            free = usable - self.taken.get((level.node_label, value), 0)
            ranked.append(((free, value) if self.best_fit else (-free, value), value, usable,
                           free))
        ranked.sort(key=lambda item: item[0])
        chosen: tuple[str, list[Gang]] | None = None
        for _, value, usable, _ in ranked:
            if usable < unit.gpus:
                continue
            pinned = _pinned_unit(unit, level.node_label, value)
            assert pinned is not None
            if pack(self.capacity, _groups([*self.placed, *pinned])) is not None:
                chosen = (value, pinned)
                break
        if self.want_rooms or chosen is None:
            self._count_rooms(unit, level, ranked)
        if chosen is None:
            return self._miss(unit, self._no_domain(unit, level, len(domains)))
        value, pinned = chosen
        self.placed.extend(pinned)
        key = (level.node_label, value)
        self.taken[key] = self.taken.get(key, 0) + unit.gpus
        self.domains.append(GangDomain(gangs=unit.names, level=level.name,
                                       node_label=level.node_label, value=value))
        self.clauses.append(f"{unit.label} in {level.name} {value}")
        return None

    def _count_rooms(self, unit: Unit, level: TopologyLevel,
                     ranked: Sequence[tuple[tuple[int, str], str, int, int]]) -> None:
        for _, value, usable, free in ranked:
            pods = _room(self.capacity, self.placed, unit, level.node_label, value) \
                if usable > 0 or unit.gpus == 0 else 0
            self.rooms.append(DomainRoom(gangs=unit.names, level=level.name, value=value,
                                         free=max(free, 0), pods=pods, wanted=unit.pods))

    def _no_domain(self, unit: Unit, level: TopologyLevel, count: int) -> str:
        mine = [r for r in self.rooms if r.gangs == unit.names and r.level == level.name]
        mine.sort(key=lambda r: (-r.pods, -r.free, r.value))
        what = f"{unit.label} ({unit.pods} pods, {unit.gpus} GPUs)"
        plural = f"{count} {level.name}{'s' if count != 1 else ''}"
        total = f"{plural}, {self.capacity.free} GPUs free on the member"
        if not mine:
            return f"no {level.name} may hold {what}: node selectors exclude every one; {total}"
        best = mine[0]
        others = ", ".join(f"{r.value} {r.pods} of {r.wanted}" for r in mine[1:1 + _SHOWN])
        more = f"; then {others}" if others else ""
        if len(mine) > 1 + _SHOWN:
            more += f" and {len(mine) - 1 - _SHOWN} more"
        return (f"no {level.name} holds {what}: best {level.name} {best.value} holds "
                f"{best.pods} of {best.wanted} pods ({best.free} GPUs free there){more}; "
                f"{total}")

    def _miss(self, unit: Unit, why: str) -> str | None:
        if unit.constraint.required:
            return why
        self.loose.extend(unit.gangs)
        self.clauses.append(f"{unit.label} anywhere ({why}; preferred only)")
        return None


def _pinned_unit(unit: Unit, label: str, value: str) -> list[Gang] | None:
    out = []
    for gang in unit.gangs:
        pinned = _pinned(gang, label, value)
        if pinned is None:
            return None
        out.append(pinned)
    return out


def fit_domains(capacity: ClusterCapacity, levels: Sequence[TopologyLevel],
                units: Sequence[Unit], rest: Sequence[Gang], *, best_fit: bool,
                rooms: bool = False) -> DomainFit:
    """Place every unit in one domain of its level and the rest anywhere (module
    docstring); ``rooms`` also counts every domain's numbers (for explanations)."""
    fitter = _Fitter(capacity, levels, best_fit=best_fit, rooms=rooms)
    for unit in units:
        why = fitter.unit(unit)
        if why is not None:
            return DomainFit(result=None, domains=(), rooms=tuple(fitter.rooms), reason=why)
    others = [*fitter.loose, *rest]
    result = pack(capacity, _groups([*fitter.placed, *others]))
    clauses = "; ".join(fitter.clauses)
    if result is None:
        pods = sum(g.pods for g in others)
        return DomainFit(result=None, domains=(), rooms=tuple(fitter.rooms), reason=(
            f"{clauses}, but then the other {pods} pod(s) do not fit beside them: fits 0 "
            f"times"))
    return DomainFit(result=result, domains=tuple(fitter.domains), rooms=tuple(fitter.rooms),
                     reason=clauses)
