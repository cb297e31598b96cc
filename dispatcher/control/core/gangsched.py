"""Gangs the member cannot break: what a copy carries for its member's gang mechanism.

kube-scheduler binds pod by pod. Between the dispatcher's decision and the last binding,
pods submitted directly to the member can take part of the nodes: a gang half bound holds
GPUs and does no work. A member whose scheduler honours a gang mechanism
(``kube.gangapis``: the built-in Workload API, or scheduler-plugins coscheduling) binds a
gang all or nothing when the copy says which pods form it. Pure, on plain data:

- ``plan``: from the member's mechanism, the workload's resolved gangs, the definition's
  whole-component gangs (``workloads.gangs.gang_components``) and its
  ``copyDefinition.memberGangs`` (which mechanisms its controllers carry from template to
  pod), the objects to create on the member (one ``Workload`` with a pod group per gang,
  a built-in ``PodGroup`` per gang on 1.36+, or a coscheduling ``PodGroup`` per gang;
  on a member with hierarchical gangs, a definition's ``podGroup`` of two or more
  ``subGroups`` becomes a ``CompositePodGroup`` over a PodGroup per sub-group) and the pod
  templates to join to them, with the reason for every gang left alone;
- ``join``: the copy with those templates joined (``spec.workloadRef``,
  ``spec.schedulingGroup`` or the pod-group label) and the mechanism stamped on it
  (``MECHANISM_ANNOTATION``, so an update of the copy joins the same way, whatever the
  member reports later);
- ``owned``: a planned object made a child of the created copy (ownerReference: the
  member's garbage collector deletes it with the copy).

The objects are created *before* the copy (``control/gangwrites.py``): a pod whose
Workload is missing waits unschedulable forever, an object whose copy is missing only waits
for it. Gangs of one pod, independent units and gangs sharing a pod template with other
units are not joined (nothing to hold together, or no template to say it in).

A member gang is only what the operator creates together. The scheduler holds a gang's
pods until ``minCount`` of them exist, so a gang spanning pods the operator creates in
stages (a JobSet with ``startupPolicy: InOrder`` or ``dependsOn``, an MPIJob whose launcher
waits for its workers) deadlocks: the first stage waits for the second, which is created
only once the first is ready. The resolved instances say when their pods are created
(``Instance.stage``, ``Instance.waves``: ``scaleDefinition.creationStagePath`` and
``podWavesPath``): a gang is split into one pod group per stage, each joined through its
own instances' templates, and an instance whose pods come in waves is joined to none (its
last wave may be smaller than any minimum). Placement is not changed by this: it still
fits every pod of the workload at once (``workloads.gangs``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dispatcher.control.core.copies import object_key
from dispatcher.control.core.names import HUB_UID_ANNOTATION, ORIGIN_LABEL
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.gangapis import (
    API_OF,
    COMPOSITE_POD_GROUP,
    COMPOSITE_V1ALPHA3,
    COSCHEDULING,
    MECHANISMS,
    NONE,
    POD_GROUP_LABEL,
    WORKLOAD,
    WORKLOAD_API,
    WORKLOAD_V1BETA1,
    Mechanism,
    leaf,
)
from dispatcher.workloads.demand import Gang
from dispatcher.workloads.gangs import subtree_leaves
from dispatcher.workloads.model import Definition
from dispatcher.workloads.mutate import mutate_pods
from dispatcher.workloads.paths import Locator, in_process
from dispatcher.workloads.resolve import Instance

__all__ = ["GANG_OF_ANNOTATION", "MAX_POD_GROUPS", "MECHANISM_ANNOTATION", "GangPlan", "Join",
           "join", "mechanism_of", "owned", "plan"]

MECHANISM_ANNOTATION = "dispatcher.io/gang-mechanism"
"""On a copy: the mechanism its templates were joined for (absent: none)."""
GANG_OF_ANNOTATION = "dispatcher.io/gang-of"
"""On a Workload or PodGroup: ``Kind.group/name`` of the copy whose gangs it holds."""
MAX_POD_GROUPS = 8
"""``scheduling/v1alpha1.WorkloadMaxPodGroups``: pod groups one Workload may hold."""
_LABEL_MAX = 63
_SUBDOMAIN_MAX = 253
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, kw_only=True)
class Join:
    """The pod templates of ``components`` join one gang: through ``workload_ref``
    (``spec.workloadRef``), ``scheduling_group`` (``spec.schedulingGroup``) or ``labels``
    (the pod-group label). ``instances`` narrows a
    component to the templates of some of its instances (their indexes); a component
    not named there joins with every instance."""

    gang: str
    components: tuple[str, ...]
    workload_ref: Mapping[str, str] | None = None
    scheduling_group: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    instances: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Group:
    """One member gang to hold: a pod group of the Workload, or one PodGroup."""

    name: str
    min_count: int
    components: tuple[str, ...]
    instances: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def templates(self) -> set[tuple[str, int | None]]:
        """(component, instance index; None: all of them) it joins."""
        every: tuple[int | None, ...] = (None,)
        return {(c, i) for c in self.components for i in self.instances.get(c, every)}


@dataclass(frozen=True, kw_only=True)
class GangPlan:
    """What the copy carries for its member's gang mechanism.

    ``mechanism`` is the one used (``none`` when no gang was joined, whatever the member
    has); ``member_mechanism`` the member's; ``objects`` the Workload / PodGroups to create
    (stamped, no owner yet); ``joins`` the templates to join; ``skipped`` one line per gang
    left alone, for logs and ``dispatcher explain``.
    """

    mechanism: Mechanism
    member_mechanism: Mechanism
    objects: tuple[Mapping[str, Any], ...] = ()
    joins: tuple[Join, ...] = ()
    skipped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    """How a joined gang was held when it could have been held otherwise."""


def plan(*, mechanism: Mechanism, definition: Definition | None, gangs: Sequence[Gang],
         units: Mapping[str, Sequence[str]], copy: Mapping[str, Any], hub_id: str,
         instances: Sequence[Instance] = ()) -> GangPlan:
    """The plan for ``copy`` (the built member copy: its identity and stamps) on a member
    with ``mechanism``; ``units`` is ``gang_components`` of the definition, ``instances``
    the resolution's pod-creating instances (their creation stages split gangs)."""
    if mechanism == NONE or definition is None:
        return GangPlan(mechanism=NONE, member_mechanism=mechanism)
    if leaf(mechanism) not in definition.member_gangs:
        carried = ", ".join(definition.member_gangs) or "none"
        return GangPlan(mechanism=NONE, member_mechanism=mechanism, skipped=(
            f"{definition.kind}: its controllers do not carry {mechanism} from the pod "
            f"templates to the pods (copyDefinition.memberGangs: {carried})",))
    chosen: list[_Group] = []
    skipped: list[str] = []
    for gang in gangs:
        if gang.independent or gang.min_pods < 2:
            continue  # nothing to hold together
        if gang.name not in units:
            skipped.append(f"gang {gang.name}: shares its pod template with other units")
            continue
        if not _joinable(definition, units[gang.name], mechanism=mechanism):
            skipped.append(f"gang {gang.name}: a component describes no whole pod template")
            continue
        groups, left_out = _staged(gang, tuple(units[gang.name]), instances)
        chosen.extend(groups)
        skipped.extend(left_out)
    if mechanism == WORKLOAD_API and len(chosen) > MAX_POD_GROUPS:
        return GangPlan(mechanism=NONE, member_mechanism=mechanism, skipped=(
            f"{len(chosen)} gangs: a Workload holds at most {MAX_POD_GROUPS} pod groups",))
    if not chosen:
        return GangPlan(mechanism=NONE, member_mechanism=mechanism, skipped=tuple(skipped))
    if _overlap(chosen):
        return GangPlan(mechanism=NONE, member_mechanism=mechanism, skipped=(
            "gangs share a pod-creating component",))
    tree = _hierarchy(definition, chosen, instances)
    if mechanism == COMPOSITE_V1ALPHA3 and not isinstance(tree, str):
        return _composite_plan(copy, chosen[0], tree, hub_id=hub_id, skipped=tuple(skipped))
    notes: tuple[str, ...] = ()
    if tree and mechanism != COMPOSITE_V1ALPHA3:
        notes = (f"gang {chosen[0].name}: its sub-groups are held as one gang (the member "
                 f"serves no CompositePodGroup)",)
    elif tree:  # a reason (a list went to the composite plan above)
        notes = (str(tree),)
    if mechanism == WORKLOAD_API:
        held = _workload_plan(copy, chosen, hub_id=hub_id, skipped=tuple(skipped))
    else:
        held = _pod_group_plan(copy, chosen, mechanism=mechanism, hub_id=hub_id,
                               skipped=tuple(skipped))
    return replace(held, notes=notes)


def _staged(gang: Gang, components: tuple[str, ...], instances: Sequence[Instance]
            ) -> tuple[list[_Group], list[str]]:
    """The member gangs of one whole-component ``gang``: itself when its operator creates
    all its pods at once, else one per creation stage (named ``<gang>-<stage>``; the
    first stage keeps the gang's name), without the instances whose pods come in waves;
    a stage of fewer than two pods holds nothing. The lines say what was left out."""
    mine = [(i, index) for c in components
            for index, i in enumerate(x for x in instances if x.component == c)]
    if not any(i.stage or i.waves for i, _ in mine):
        return [_Group(name=gang.name, min_count=gang.min_pods, components=components)], []
    notes = [f"gang {gang.name}: {i.component} {i.id or '(one instance)'}'s pods come in "
             f"waves: no gang can wait for its last one" for i, _ in mine if i.waves]
    stages: dict[str, list[tuple[Instance, int]]] = {}
    for each in mine:
        if not each[0].waves:
            stages.setdefault(each[0].stage, []).append(each)
    out: list[_Group] = []
    for stage, members in stages.items():
        name = f"{gang.name}-{stage}" if stage else gang.name
        count = min(sum(i.min_pods for i, _ in members), gang.min_pods)
        if count < 2:
            if len(stages) > 1:
                notes.append(f"gang {gang.name}: stage {stage or '(first)'} has "
                             f"{count} pod: nothing to hold together")
            continue
        indexes: dict[str, list[int]] = {}
        for i, index in members:
            indexes.setdefault(i.component, []).append(index)
        out.append(_Group(name=name, min_count=count, components=tuple(indexes),
                          instances={c: tuple(v) for c, v in indexes.items()}))
    return out, notes


def _hierarchy(definition: Definition, chosen: Sequence[_Group],
               instances: Sequence[Instance]) -> list[_Group] | str:
    """The child gangs of the definition's ``podGroup`` when it is held whole with two or
    more ``subGroups``: one per sub-group, of the pod-creating components under it, its
    ``minCount`` the sum of their instances' minimums. A reason instead ("" when the
    definition has no such sub-groups) when the sub-groups cannot be the whole gang's
    children: a stage split it, a ``minPodsPath`` sets the minimum of the whole, there are
    more than a template holds, or they leave a component out, share one, or hold no
    pod."""
    rules = definition.gangs
    if rules is None or rules.form != "podGroup" or len(rules.groups[0].members) < 2:
        return ""
    group = rules.groups[0]
    whole = f"gang {group.name}: sub-groups not held as a CompositePodGroup"
    if len(chosen) != 1 or chosen[0].instances or chosen[0].name != group.name:
        return f"{whole}: its pods are created in stages"
    if group.min_pods is not None:
        return f"{whole}: minPodsPath sets the minimum of the whole gang only"
    if len(group.members) > MAX_POD_GROUPS:  # a composite template holds at most 8
        return f"{whole}: {len(group.members)} sub-groups, at most {MAX_POD_GROUPS}"
    out: list[_Group] = []
    taken: set[str] = set()
    for sub in group.members:
        under = subtree_leaves(definition, sub)
        mine = tuple(c for c in chosen[0].components if c in under)
        count = sum(i.min_pods for i in instances if i.component in mine)
        if taken & set(mine) or count < 1:
            return f"{whole}: sub-group {sub} " + (
                "shares a component with another" if taken & set(mine) else "holds no pod")
        taken |= set(mine)
        out.append(_Group(name=sub, min_count=count, components=mine))
    left = [c for c in chosen[0].components if c not in taken]
    if left:
        return f"{whole}: {', '.join(left)} in no sub-group"
    return out


def _composite_plan(copy: Mapping[str, Any], gang: _Group, children: Sequence[_Group], *,
                    hub_id: str, skipped: tuple[str, ...]) -> GangPlan:
    """A hierarchical gang (1.37 ``CompositePodGroup``): the Workload whose composite
    template names the child templates (what every group's ``workloadRef`` points to),
    the CompositePodGroup that needs all its children, and a v1beta1 PodGroup per child
    naming it as parent; each child's pod templates join their own PodGroup."""
    meta = copy.get("metadata") or {}
    where = {"namespace": meta["namespace"]} if meta.get("namespace") else {}
    stamps = _stamps(copy, hub_id=hub_id)
    base = _base(copy)
    workload = _name(base, _SUBDOMAIN_MAX)
    root_template = _name(gang.name, _LABEL_MAX)
    root = _name(f"{base}-{gang.name}", _SUBDOMAIN_MAX)
    templates = {c.name: _name(c.name, _LABEL_MAX) for c in children}
    all_of = {"gang": {"minGroupCount": len(children)}}
    objects: list[Mapping[str, Any]] = [
        {"apiVersion": WORKLOAD_V1BETA1.api_version, "kind": WORKLOAD_V1BETA1.kind,
         "metadata": {"name": workload, **where, **stamps},
         "spec": {"controllerRef": _controller_ref(copy), "compositePodGroupTemplates": [{
             "name": root_template, "schedulingPolicy": all_of,
             "podGroupTemplates": [{"name": templates[c.name], "schedulingPolicy": {
                 "gang": {"minCount": c.min_count}}} for c in children]}]}},
        {"apiVersion": COMPOSITE_POD_GROUP.api_version, "kind": COMPOSITE_POD_GROUP.kind,
         "metadata": {"name": root, **where, **stamps},
         "spec": {"workloadRef": {"workloadName": workload, "templateName": root_template},
                  "schedulingPolicy": all_of}}]
    joins = []
    pod_group = API_OF[leaf(COMPOSITE_V1ALPHA3)]
    for child in children:
        name = _name(f"{base}-{gang.name}-{child.name}", _SUBDOMAIN_MAX)
        objects.append({
            "apiVersion": pod_group.api_version, "kind": pod_group.kind,
            "metadata": {"name": name, **where, **stamps},
            "spec": {"parentCompositePodGroupName": root,
                     "workloadRef": {"workloadName": workload,
                                     "templateName": templates[child.name]},
                     "schedulingPolicy": {"gang": {"minCount": child.min_count}}}})
        joins.append(Join(gang=f"{gang.name}/{child.name}", components=child.components,
                          scheduling_group={"podGroupName": name}))
    parts = ", ".join(f"{c.name} ({c.min_count})" for c in children)
    return GangPlan(mechanism=COMPOSITE_V1ALPHA3, member_mechanism=COMPOSITE_V1ALPHA3,
                    objects=tuple(objects), joins=tuple(joins), skipped=skipped,
                    notes=(f"gang {gang.name}: a CompositePodGroup {root} that needs all "
                           f"{len(children)} of its sub-group gangs: {parts}",))


def _workload_plan(copy: Mapping[str, Any], chosen: Sequence[_Group], *, hub_id: str,
                   skipped: tuple[str, ...]) -> GangPlan:
    """One Workload (the Workload API) holding a pod group per chosen gang."""
    meta = copy.get("metadata") or {}
    namespace = meta.get("namespace")
    name = _name(_base(copy), _SUBDOMAIN_MAX)
    groups = {g.name: _name(g.name, _LABEL_MAX) for g in chosen}
    workload = {
        "apiVersion": WORKLOAD.api_version, "kind": WORKLOAD.kind,
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {}),
                     **_stamps(copy, hub_id=hub_id)},
        "spec": {"controllerRef": _controller_ref(copy),
                 "podGroups": [{"name": groups[g.name],
                                "policy": {"gang": {"minCount": g.min_count}}}
                               for g in chosen]}}
    joins = tuple(Join(gang=g.name, components=g.components, instances=g.instances,
                       workload_ref={"name": name, "podGroup": groups[g.name]})
                  for g in chosen)
    return GangPlan(mechanism=WORKLOAD_API, member_mechanism=WORKLOAD_API,
                    objects=(workload,), joins=joins, skipped=skipped)


def _pod_group_plan(copy: Mapping[str, Any], chosen: Sequence[_Group], *,
                    mechanism: Mechanism, hub_id: str, skipped: tuple[str, ...]) -> GangPlan:
    """A PodGroup per chosen gang: the built-in one of 1.36+ (``schedulingPolicy.gang``,
    pods joined by ``spec.schedulingGroup``) or coscheduling's (``minMember``, pods joined
    by label)."""
    namespace = (copy.get("metadata") or {}).get("namespace")
    base = _base(copy)
    stamps = _stamps(copy, hub_id=hub_id)
    gvk = API_OF[leaf(mechanism)]
    objects = []
    joins_list = []
    for group in chosen:
        if mechanism == COSCHEDULING:
            name = _name(f"{base}-{group.name}", _LABEL_MAX)  # a label value
            spec: dict[str, Any] = {"minMember": group.min_count}
            how: dict[str, Any] = {"labels": {POD_GROUP_LABEL: name}}
        else:
            name = _name(f"{base}-{group.name}", _SUBDOMAIN_MAX)
            spec = {"schedulingPolicy": {"gang": {"minCount": group.min_count}}}
            how = {"scheduling_group": {"podGroupName": name}}
        objects.append({
            "apiVersion": gvk.api_version, "kind": gvk.kind,
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {}),
                         **stamps},
            "spec": spec})
        joins_list.append(Join(gang=group.name, components=group.components,
                               instances=group.instances, **how))
    return GangPlan(mechanism=mechanism, member_mechanism=mechanism,
                    objects=tuple(objects), joins=tuple(joins_list), skipped=skipped)


def _base(copy: Mapping[str, Any]) -> str:
    """``kind-name`` of the copy: the stem of its gang objects' names."""
    meta = copy.get("metadata") or {}
    return f"{str(copy.get('kind') or '').lower()}-{meta.get('name') or ''}"


def join(copy: Mapping[str, Any], definition: Definition | None, gang_plan: GangPlan, *,
         locate: Locator = in_process) -> dict[str, Any]:
    """``copy`` with the plan's templates joined and its mechanism stamped (a new dict;
    a stamp the hub object carried is replaced). MutationError when a template cannot be
    written through the definition."""
    out = dict(copy)
    meta = dict(out.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != MECHANISM_ANNOTATION}
    if gang_plan.joins:
        annotations[MECHANISM_ANNOTATION] = gang_plan.mechanism
    meta["annotations"] = annotations
    out["metadata"] = meta
    if definition is None:
        return out
    for each in gang_plan.joins:
        out = mutate_pods(out, definition, components=each.components, labels=each.labels,
                          workload_ref=each.workload_ref,
                          scheduling_group=each.scheduling_group, instances=each.instances,
                          locate=locate)
    return out


def mechanism_of(copy: Mapping[str, Any]) -> Mechanism:
    """The mechanism a copy on a member was joined for (``MECHANISM_ANNOTATION``)."""
    value = ((copy.get("metadata") or {}).get("annotations") or {}).get(MECHANISM_ANNOTATION)
    return next((m for m in MECHANISMS if m == value), NONE)


def owned(created: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes a planned object a child of ``created`` (the copy as
    the member returned it: its uid). Not a controller reference: the object is not the
    copy's operator's to manage, only to be collected with the copy."""
    meta = created.get("metadata") or {}
    return {"metadata": {"ownerReferences": [{
        "apiVersion": str(created.get("apiVersion") or ""), "kind": str(created.get("kind")),
        "name": str(meta.get("name") or ""), "uid": str(meta.get("uid") or ""),
        "blockOwnerDeletion": False}]}}


def _joinable(definition: Definition, components: Sequence[str], *, mechanism: Mechanism
              ) -> bool:
    """Whether every component's pods can be joined through its pod template: a whole
    template or pod spec (a fragmented one has no place for the field), with a metadata
    path when the join is a label."""
    for name in components:
        comp = definition.component(name)
        if comp is None or comp.spec is None or comp.spec.pattern == "fragmented":
            return False
        if comp.spec.pattern == "podspec" and comp.spec.metadata is None \
                and mechanism == COSCHEDULING:
            return False
    return True


def _overlap(groups: Sequence[_Group]) -> bool:
    """Whether two groups would write the same pod template."""
    seen: set[tuple[str, int | None]] = set()
    for group in groups:
        mine = group.templates()
        if any((c, i) in seen or (c, None) in seen or (i is None and any(
                c == other for other, _ in seen)) for c, i in mine):
            return True
        seen |= mine
    return False


def _stamps(copy: Mapping[str, Any], *, hub_id: str) -> dict[str, Any]:
    """The copy's ownership stamps (origin, hub uid), and which copy it belongs to; never
    the hub-object stamp, so ``copies.stamped`` never takes it for a copy."""
    meta = copy.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    uid = str(annotations.get(HUB_UID_ANNOTATION) or labels.get(HUB_UID_LABEL) or "")
    return {"labels": {ORIGIN_LABEL: hub_id, HUB_UID_LABEL: uid},
            "annotations": {HUB_UID_ANNOTATION: uid, GANG_OF_ANNOTATION: object_key(copy)}}


def _controller_ref(copy: Mapping[str, Any]) -> dict[str, str]:
    group = str(copy.get("apiVersion") or "").rpartition("/")[0]
    ref = {"kind": str(copy.get("kind") or ""),
           "name": str((copy.get("metadata") or {}).get("name") or "")}
    return {"apiGroup": group, **ref} if group else ref


def _name(text: str, limit: int) -> str:
    """``text`` as a DNS label / subdomain part: lower case, invalid runs as ``-``; too
    long or changed, cut and suffixed with a hash of the original (deterministic: a
    retried submit names the same object)."""
    clean = _NOT_DNS.sub("-", text.lower()).strip("-") or "gang"
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[:limit - 9].rstrip('-')}-{digest}"
