"""One definition document -> a ``Definition``, recording every problem on the way.

The reader walks the document once with typed accessors (``recorder.Recorder``) that note
(field path, message) instead of raising, so a lint run reports everything wrong with a
file. Structural rules follow upstream's validator (reference §2.1); status parsing is in
``statusdef``; the extensions are in docs/definitions.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.copydef import CopyReader
from dispatcher.workloads.errors import Issue
from dispatcher.workloads.gangdef import GangReader
from dispatcher.workloads.holds import parse_path
from dispatcher.workloads.jqrun import Batch
from dispatcher.workloads.model import (
    DEMAND_FRAGMENTS,
    FRAGMENT_FIELDS,
    Component,
    Definition,
    Scale,
    SpecSource,
)
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
          "maxReplicasPath": "max_replicas", "podsPerReplicaPath": "pods_per_replica",
          "creationStagePath": "creation_stage", "podWavesPath": "pod_waves"}
_SELECTOR = frozenset({"componentTypeSelector", "componentInstanceSelector", "replicaSelector"})


class DocReader(StatusReader, GangReader, CopyReader):
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
        self._name(meta, raw_root)
        components = self._components(raw_root, structure)
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
        server_set, hold, member_gangs = self._copy_definition(spec or {})
        self._compile_checks()
        batches = None if self.issues else self._batches()
        if batches is None:
            return None
        kind = components[0].kind or GroupVersionKind("", "", "")
        return Definition(
            name=self.name, source=self.source, format=f"{fmt[0]}/{fmt[1]}",
            group=kind.group, version=kind.version, kind=kind.kind, components=tuple(components),
            status=status, gangs=gangs, demand_batch=batches[0], status_batch=batches[1],
            full_batch=batches[2], server_set=server_set,
            server_set_fields=frozenset(
                ".".join(parts) for e in server_set if (parts := parse_path(e.text.strip()))),
            hold=hold, member_gangs=member_gangs, document=dict(doc))

    def _name(self, meta: Mapping[str, Any], raw_root: Mapping[str, Any]) -> None:
        """``metadata.name``, else the root kind in lower case, else ``#index``; the issues
        recorded so far are given the name."""
        name = self._string(meta.get("name"), "metadata.name")
        root_kind = raw_root.get("kind")
        if not name and isinstance(root_kind, Mapping) and isinstance(root_kind.get("kind"), str):
            name = root_kind["kind"].lower()
        self.name = name or f"#{self.index}"
        self.issues = [Issue(source=i.source, definition=self.name, field=i.field,
                             message=i.message) for i in self.issues]

    def _components(self, raw_root: Mapping[str, Any], structure: Mapping[str, Any]
                    ) -> list[Component]:
        """The root component, then every child component that is a mapping."""
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
        return components

    def _batches(self) -> tuple[Batch, Batch, Batch] | None:
        """The demand, status and full jq batches (None, with the issue, when the paths do
        not compile together)."""
        try:
            return (Batch(self._texts["demand"], lazy=True),
                    Batch(self._texts["status"], lazy=True),
                    Batch(self._texts["demand"] + self._texts["status"]))
        except ValueError as error:
            self._issue("spec", f"paths do not compile together: {' '.join(str(error).split())}"
                        " (a comment ending in a backslash?)")
            return None

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
