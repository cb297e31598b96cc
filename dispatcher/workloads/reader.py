"""One definition document -> a ``Definition``, recording every problem on the way.

The reader walks the document once with typed accessors (``recorder.Recorder``) that note
(field path, message) instead of raising, so a lint run reports everything wrong with a
file. Structural rules follow upstream's validator (reference §2.1); status parsing is in
``statusdef``; the extensions are in docs/definitions.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from dispatcher.kube.gangapis import MECHANISMS, NONE
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.demand import TopologyConstraint
from dispatcher.workloads.errors import Issue
from dispatcher.workloads.holds import MANAGED_BY, Hold, parse_path
from dispatcher.workloads.jqrun import Batch
from dispatcher.workloads.model import (
    DEMAND_FRAGMENTS,
    FRAGMENT_FIELDS,
    GANG_PER,
    Component,
    Definition,
    Expr,
    GangGroup,
    GangScheduling,
    Scale,
    SpecSource,
)
from dispatcher.workloads.pathshape import path_shape_problem
from dispatcher.workloads.statusdef import StatusReader

__all__ = ["FORMATS", "DocReader", "structure_issues"]

FORMATS: frozenset[tuple[str, str]] = frozenset({
    ("optimization.nvidia.com/v1alpha1", "ResourceInterface"),
    ("run.ai/v1alpha1", "Karta"),
})

_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_SPEC = frozenset({"structureDefinition", "optimizationInstructions", "copyDefinition"})
_STRUCTURE = frozenset({"rootComponent", "childComponents", "additionalChildKinds"})
_COMPONENT = frozenset({"name", "kind", "ownerRef", "specDefinition", "scaleDefinition",
                        "statusDefinition", "instanceIdPath", "podSelector",
                        "suspendDefinition"})
_SPECDEF = frozenset({"podTemplateSpecPath", "podSpecPath", "metadataPath",
                      "fragmentedPodSpecDefinition"})
_SCALE = {"replicasPath": "replicas", "minReplicasPath": "min_replicas",
          "maxReplicasPath": "max_replicas", "podsPerReplicaPath": "pods_per_replica"}
_SELECTOR = frozenset({"componentTypeSelector", "componentInstanceSelector", "replicaSelector"})


class DocReader(StatusReader):
    """Reads one document; ``build()`` returns the Definition, ``issues`` every problem."""

    # -- document --------------------------------------------------------------------------

    def build(self) -> Definition | None:
        """The Definition, or None when the document is too broken to describe one."""
        where = f"document {self.index}"
        doc = self._mapping(self.document, where, allowed=_TOP)
        if doc is None:
            return None
        fmt = (str(doc.get("apiVersion")), str(doc.get("kind")))
        if fmt not in FORMATS:
            self._issue(where, f"apiVersion/kind {fmt[0]!r}/{fmt[1]!r} is not a definition "
                        "(want optimization.nvidia.com/v1alpha1 ResourceInterface or "
                        "run.ai/v1alpha1 Karta)")
            return None
        meta = self._mapping(doc.get("metadata"), "metadata") or {}
        spec = self._mapping(doc.get("spec"), "spec", required=True, allowed=_SPEC)
        structure = self._mapping((spec or {}).get("structureDefinition"),
                                  "spec.structureDefinition", required=True,
                                  allowed=_STRUCTURE)
        if structure is None:
            return None
        raw_root = self._mapping(structure.get("rootComponent"),
                                 "spec.structureDefinition.rootComponent", required=True,
                                 allowed=_COMPONENT)
        if raw_root is None:
            return None
        name = self._string(meta.get("name"), "metadata.name")
        root_kind = raw_root.get("kind")
        if not name and isinstance(root_kind, Mapping) and isinstance(root_kind.get("kind"), str):
            name = root_kind["kind"].lower()
        self.name = name or f"#{self.index}"
        self.issues = [Issue(source=i.source, definition=self.name, field=i.field,
                             message=i.message) for i in self.issues]

        root = self._component(raw_root, "spec.structureDefinition.rootComponent", root=True)
        components = [root]
        for i, raw in enumerate(self._list(structure.get("childComponents"),
                                           "spec.structureDefinition.childComponents")):
            field = f"spec.structureDefinition.childComponents[{i}]"
            child = self._mapping(raw, field, required=True, allowed=_COMPONENT)
            if child is not None:
                components.append(self._component(child, field, root=False))
        self._list(structure.get("additionalChildKinds"),
                   "spec.structureDefinition.additionalChildKinds")
        status = self._status(raw_root.get("statusDefinition"),
                              "spec.structureDefinition.rootComponent.statusDefinition",
                              used=True)
        if raw_root.get("statusDefinition") is None:
            self._issue("spec.structureDefinition.rootComponent",
                        "root component must have status definition")
        for field, message in structure_issues(components):
            self._issue(field, message)
        instructions = self._mapping((spec or {}).get("optimizationInstructions"),
                                     "spec.optimizationInstructions",
                                     allowed=frozenset({"gangScheduling"})) or {}
        gangs = self._gangs(instructions.get("gangScheduling"),
                            "spec.optimizationInstructions.gangScheduling",
                            names={c.name for c in components})
        server_set = self._server_set((spec or {}).get("copyDefinition"),
                                      "spec.copyDefinition")
        hold = self._hold(((spec or {}).get("copyDefinition") or {}).get("hubHold")
                          if isinstance((spec or {}).get("copyDefinition"), Mapping) else None,
                          "spec.copyDefinition.hubHold")
        member_gangs = self._member_gangs((spec or {}).get("copyDefinition"),
                                          "spec.copyDefinition.memberGangs")
        self._compile_checks()
        if self.issues:
            return None
        try:
            demand_batch = Batch(self._texts["demand"], lazy=True)
            status_batch = Batch(self._texts["status"], lazy=True)
            full_batch = Batch(self._texts["demand"] + self._texts["status"])
        except ValueError as error:
            self._issue("spec", f"paths do not compile together: {' '.join(str(error).split())}"
                        " (a comment ending in a backslash?)")
            return None
        kind = root.kind or GroupVersionKind("", "", "")
        return Definition(
            name=self.name, source=self.source, format=f"{fmt[0]}/{fmt[1]}",
            group=kind.group, version=kind.version, kind=kind.kind, components=tuple(components),
            status=status, gangs=gangs, demand_batch=demand_batch, status_batch=status_batch,
            full_batch=full_batch, server_set=server_set,
            server_set_fields=frozenset(
                ".".join(parts) for e in server_set if (parts := parse_path(e.text.strip()))),
            hold=hold, member_gangs=member_gangs, document=dict(doc))

    # -- components ------------------------------------------------------------------------

    def _component(self, raw: Mapping[str, Any], field: str, *, root: bool) -> Component:
        name = self._string(raw.get("name"), f"{field}.name") or ""
        if not name:
            self._issue(f"{field}.name", "component name is empty")
        kind = self._gvk(raw.get("kind"), f"{field}.kind")
        if root:
            if kind is None or not kind.version or not kind.kind \
                    or (not kind.group and kind.kind != "Pod"):
                self._issue(f"{field}.kind",
                            "root component must have full kind (group, version, kind)")
            if "ownerRef" in raw:
                self._issue(f"{field}.ownerRef", "root component cannot have owner ref")
            owner = None
        else:
            owner = self._string(raw.get("ownerRef"), f"{field}.ownerRef")
        spec = self._spec(raw.get("specDefinition"), f"{field}.specDefinition", name=name)
        scale = self._scale(raw.get("scaleDefinition"), f"{field}.scaleDefinition")
        if not root and raw.get("statusDefinition") is not None:
            self._status(raw.get("statusDefinition"), f"{field}.statusDefinition", used=False)
        instance_ids = self._expr(raw.get("instanceIdPath"), f"{field}.instanceIdPath")
        selector = self._mapping(raw.get("podSelector"), f"{field}.podSelector",
                                 allowed=_SELECTOR) or {}
        has_instance_selector = self._selectors(selector, f"{field}.podSelector")
        if instance_ids is not None and not has_instance_selector:
            self._issue(f"{field}.podSelector", f"component '{name}' has instance id path "
                        "but no pod component instance selector")
        if instance_ids is None and has_instance_selector:
            self._issue(f"{field}.instanceIdPath", f"component '{name}' has pod component "
                        "instance selector but no instance id path")
        self._suspend(raw.get("suspendDefinition"), f"{field}.suspendDefinition")
        return Component(name=name, kind=kind, owner=owner, instance_ids=instance_ids,
                         spec=spec, scale=scale)

    def _gvk(self, value: Any, field: str) -> GroupVersionKind | None:
        raw = self._mapping(value, field, allowed=frozenset({"group", "version", "kind"}))
        if raw is None:
            return None
        parts = [self._string(raw.get(k), f"{field}.{k}") or "" for k in
                 ("group", "version", "kind")]
        return GroupVersionKind(parts[0], parts[1], parts[2])

    def _spec(self, value: Any, field: str, *, name: str) -> SpecSource | None:
        raw = self._mapping(value, field, allowed=_SPECDEF)
        if raw is None:
            return None
        patterns = [k for k in ("podTemplateSpecPath", "podSpecPath",
                                "fragmentedPodSpecDefinition") if raw.get(k) is not None]
        if len(patterns) > 1:
            self._issue(field, f"component '{name}' has multiple pod spec definitions")
        metadata = self._expr(raw.get("metadataPath"), f"{field}.metadataPath", section=None)
        if "fragmentedPodSpecDefinition" in patterns:
            frag_field = f"{field}.fragmentedPodSpecDefinition"
            frag = self._mapping(raw["fragmentedPodSpecDefinition"], frag_field,
                                 allowed=frozenset(FRAGMENT_FIELDS)) or {}
            fragments = []
            for key in FRAGMENT_FIELDS:
                section: Literal["demand"] | None = "demand" if key in DEMAND_FRAGMENTS else None
                expr = self._expr(frag.get(key), f"{frag_field}.{key}", section=section)
                if expr is not None:
                    fragments.append((key, expr))
            return SpecSource(pattern="fragmented", metadata=metadata,
                              fragments=tuple(fragments))
        if "podTemplateSpecPath" in patterns:
            return SpecSource(pattern="template", metadata=metadata, path=self._expr(
                raw["podTemplateSpecPath"], f"{field}.podTemplateSpecPath"))
        if "podSpecPath" in patterns:
            return SpecSource(pattern="podspec", metadata=metadata, path=self._expr(
                raw["podSpecPath"], f"{field}.podSpecPath"))
        return None

    def _scale(self, value: Any, field: str) -> Scale | None:
        raw = self._mapping(value, field, allowed=frozenset(_SCALE))
        if raw is None:
            return None
        paths = {attr: self._expr(raw.get(key), f"{field}.{key}",
                                  section=None if key == "maxReplicasPath" else "demand")
                 for key, attr in _SCALE.items()}
        return Scale(**paths)

    def _selectors(self, selector: Mapping[str, Any], field: str) -> bool:
        type_sel = self._mapping(selector.get("componentTypeSelector"),
                                 f"{field}.componentTypeSelector",
                                 allowed=frozenset({"keyPath", "value", "matchLabels"}))
        if type_sel is not None:
            self._pod_side(type_sel.get("keyPath"), f"{field}.componentTypeSelector.keyPath")
            self._string(type_sel.get("value"), f"{field}.componentTypeSelector.value")
            self._mapping(type_sel.get("matchLabels"),
                          f"{field}.componentTypeSelector.matchLabels")
        for key in ("componentInstanceSelector", "replicaSelector"):
            attr = "idPath" if key == "componentInstanceSelector" else "keyPath"
            sub = self._mapping(selector.get(key), f"{field}.{key}",
                                allowed=frozenset({attr}))
            if sub is not None:
                self._pod_side(sub.get(attr), f"{field}.{key}.{attr}")
        return selector.get("componentInstanceSelector") is not None

    def _suspend(self, value: Any, field: str) -> None:
        raw = self._mapping(value, field,
                            allowed=frozenset({"suspendActions", "resumeActions"}))
        if raw is None:
            return
        for key in ("suspendActions", "resumeActions"):
            for i, action in enumerate(self._list(raw.get(key), f"{field}.{key}")):
                item = self._mapping(action, f"{field}.{key}[{i}]",
                                     allowed=frozenset({"path", "value"})) or {}
                self._expr(item.get("path"), f"{field}.{key}[{i}].path", section=None)

    def _server_set(self, value: Any, field: str) -> tuple[Expr, ...]:
        """``copyDefinition.serverSetPaths``: jq path expressions removed from a copy."""
        raw = self._mapping(value, field,
                            allowed=frozenset({"serverSetPaths", "hubHold", "memberGangs"})) or {}
        out = []
        for i, item in enumerate(self._list(raw.get("serverSetPaths"), f"{field}.serverSetPaths")):
            expr = self._expr(item, f"{field}.serverSetPaths[{i}]", section=None)
            if expr is None:
                continue
            problem = path_shape_problem(expr.text)  # never run at load: tenants write it
            if problem:
                self._issue(expr.field, f"not a path expression: {problem}")
            else:
                out.append(expr)
        return tuple(out)

    def _member_gangs(self, value: Any, field: str) -> tuple[str, ...]:
        """``copyDefinition.memberGangs``: the member gang mechanisms whose pod fields
        (``workloadRef``, the pod-group label) this kind's controllers copy from its pod
        templates to its pods; only those are written into a copy (docs/definitions.md)."""
        raw = value.get("memberGangs") if isinstance(value, Mapping) else None
        out: list[str] = []
        for i, item in enumerate(self._list(raw, field)):
            if item not in MECHANISMS or item == NONE:
                self._issue(f"{field}[{i}]", f"must be one of "
                            f"{', '.join(m for m in MECHANISMS if m != NONE)}, not {item!r}")
            elif item not in out:
                out.append(item)
        return tuple(out)

    def _hold(self, value: Any, field: str) -> Hold | None:
        """``copyDefinition.hubHold``: exactly one of ``managedBy: {path}``,
        ``pause: {path, value}`` or ``refuse: REASON`` (``workloads/holds.py``)."""
        raw = self._mapping(value, field, allowed=frozenset({"managedBy", "pause", "refuse"}))
        if raw is None:
            return None
        if len(raw) != 1:
            self._issue(field, "give exactly one of managedBy, pause, refuse")
            return None
        (kind, body), = raw.items()
        if kind == "refuse":
            reason = self._string(body, f"{field}.refuse") or ""
            if not reason:
                self._issue(f"{field}.refuse", "say why nothing can hold this kind")
            return Hold(kind="refuse", reason=reason)
        allowed = frozenset({"path"} if kind == "managedBy" else {"path", "value"})
        item = self._mapping(body, f"{field}.{kind}", required=True, allowed=allowed) or {}
        path = parse_path(str(item.get("path") or ""))
        if path is None:
            self._issue(f"{field}.{kind}.path",
                        "must be a plain field path like .spec.managedBy (no indexes, no jq)")
            return None
        if kind == "managedBy":
            return Hold(kind="managedBy", path=path, value=MANAGED_BY)
        if item.get("value") is None or isinstance(item.get("value"), (dict, list)):
            self._issue(f"{field}.pause.value", "must be a scalar (e.g. true)")
            return None
        return Hold(kind="pause", path=path, value=item["value"])

    # -- gangs -----------------------------------------------------------------------------

    def _gangs(self, value: Any, field: str, *, names: set[str]) -> GangScheduling | None:
        raw = self._mapping(value, field,
                            allowed=frozenset({"podGroups", "podGroup", "gangsPath"}))
        if raw is None:
            return None
        forms = [k for k in ("podGroups", "podGroup", "gangsPath") if raw.get(k) is not None]
        if len(forms) > 1:
            self._issue(field, f"use one of podGroups, podGroup, gangsPath, not {forms}")
        if raw.get("gangsPath") is not None:
            path = self._expr(raw["gangsPath"], f"{field}.gangsPath")
            return GangScheduling(form="gangsPath", groups=(), path=path) if path else None
        if raw.get("podGroup") is not None:
            where = f"{field}.podGroup"
            group = self._mapping(raw["podGroup"], where, allowed=frozenset(
                {"name", "topology", "subGroups", "minPodsPath"})) or {}
            members = []
            for i, sub in enumerate(self._list(group.get("subGroups"), f"{where}.subGroups")):
                item = self._mapping(sub, f"{where}.subGroups[{i}]", allowed=frozenset(
                    {"componentName", "topology"})) or {}
                member = self._member(item, f"{where}.subGroups[{i}]", names=names,
                                      label="sub-group")
                # validated; a sub-group's own domain is not enforced (the whole gang's is)
                self._topology(item.get("topology"), f"{where}.subGroups[{i}].topology")
                if member:
                    members.append(member)
            return GangScheduling(form="podGroup", groups=(GangGroup(
                topology=self._topology(group.get("topology"), f"{where}.topology"),
                name=self._string(group.get("name"), f"{where}.name", required=True) or "",
                members=tuple(members),
                min_pods=self._expr(group.get("minPodsPath"), f"{where}.minPodsPath")),))
        groups = []
        seen: set[str] = set()
        for i, entry in enumerate(self._list(raw.get("podGroups"), f"{field}.podGroups")):
            where = f"{field}.podGroups[{i}]"
            item = self._mapping(entry, where, required=True, allowed=frozenset(
                {"name", "members", "minPodsPath", "gangPer", "gangPerPath"})) or {}
            name = self._string(item.get("name"), f"{where}.name", required=True) or ""
            if name in seen:
                self._issue(f"{where}.name", f"pod group {name} is not unique")
            seen.add(name)
            members = []
            for j, raw_member in enumerate(self._list(item.get("members"), f"{where}.members")):
                mfield = f"{where}.members[{j}]"
                member_raw = self._mapping(raw_member, mfield, allowed=frozenset(
                    {"componentName", "groupByKeyPaths", "filters"})) or {}
                member = self._member(member_raw, mfield, names=names, label="pod-group member")
                for key in ("groupByKeyPaths", "filters"):
                    for k, path in enumerate(self._list(member_raw.get(key), f"{mfield}.{key}")):
                        self._pod_side(path, f"{mfield}.{key}[{k}]")
                if member:
                    members.append(member)
            per = next((p for p in GANG_PER if p == item.get("gangPer", "workload")), None)
            if per is None:
                self._issue(f"{where}.gangPer", f"must be one of {', '.join(GANG_PER)}")
                per = "workload"
            per_path = self._expr(item.get("gangPerPath"), f"{where}.gangPerPath")
            if per_path is not None and "gangPer" in item:
                self._issue(f"{where}.gangPerPath", "use gangPer or gangPerPath, not both")
            min_pods = self._expr(item.get("minPodsPath"), f"{where}.minPodsPath")
            if min_pods is not None and (per != "workload" or per_path is not None):
                self._issue(f"{where}.minPodsPath", "only allowed with gangPer: workload")
            groups.append(GangGroup(name=name, members=tuple(members), per=per,
                                    min_pods=min_pods, per_path=per_path))
        return GangScheduling(form="podGroups", groups=tuple(groups))

    def _topology(self, value: Any, field: str) -> TopologyConstraint | None:
        """``podGroup.topology``: ``{topologyName, requiredTopologyLevel,
        preferredTopologyLevel}`` (upstream's CRD; KAI needs one of the two levels). A level
        is a node label key; each member resolves it against its own topology levels. The
        required level wins; a preferred one alone is a preference. ``topologyName`` names
        the scheduler's Topology object: the member's declared levels play that part here."""
        raw = self._mapping(value, field, allowed=frozenset(
            {"topologyName", "requiredTopologyLevel", "preferredTopologyLevel"}))
        if raw is None:
            return None
        self._string(raw.get("topologyName"), f"{field}.topologyName")
        required = self._string(raw.get("requiredTopologyLevel"),
                                f"{field}.requiredTopologyLevel")
        preferred = self._string(raw.get("preferredTopologyLevel"),
                                 f"{field}.preferredTopologyLevel")
        if not required and not preferred:
            self._issue(field, "give requiredTopologyLevel or preferredTopologyLevel")
            return None
        source = f"definition {self.name or '?'} {field}"
        if required:
            return TopologyConstraint(level=required, required=True, source=source)
        return TopologyConstraint(level=preferred or "", required=False, source=source)

    def _member(self, item: Mapping[str, Any], field: str, *, names: set[str],
                label: str) -> str | None:
        name = self._string(item.get("componentName"), f"{field}.componentName",
                            required=True)
        if name and name not in names:
            self._issue(f"{field}.componentName", f"{label} component '{name}' is not "
                        "defined (should be a root or child component)")
            return None
        return name or None


def structure_issues(components: list[Component]) -> list[tuple[str, str]]:
    """Upstream's structural rules over components: (field, message) pairs.

    Unique names first (a duplicate stops the rest, as upstream); then children's owner
    refs; then ownership cycles (only when the owner refs are fine).
    """
    seen: set[str] = set()
    duplicates: list[tuple[str, str]] = []
    for comp in [*components[1:], components[0]]:
        if comp.name and comp.name in seen:
            duplicates.append(("spec.structureDefinition",
                               f"component name {comp.name} is not unique"))
        seen.add(comp.name)
    if duplicates:
        return duplicates
    problems: list[tuple[str, str]] = []
    names = {c.name for c in components}
    for index, comp in enumerate(components[1:]):
        where = f"spec.structureDefinition.childComponents[{index}].ownerRef"
        if not comp.owner:
            problems.append((where, f"child component '{comp.name}' has no owner ref"))
        elif comp.owner not in names:
            problems.append((where, f"child component '{comp.name}' has owner ref to "
                                    f"non-existing component '{comp.owner}'"))
    if problems:
        return problems
    owners = {c.name: c.owner for c in components}
    for comp in components[1:]:
        visited: set[str] = set()
        current: str | None = comp.name
        while current is not None:
            if current in visited:
                return [("spec.structureDefinition",
                         f"ownership cycle detected involving component {current}")]
            visited.add(current)
            current = owners.get(current)
    return problems
