"""Set pod fields (labels, scheduler, node selector, ...) through a definition's paths.

Used before submitting a workload to a member: the dispatcher stamps its labels and
annotations, and may pin scheduler, node selector, tolerations or priority class on every
pod template. Locations come from jq ``path(...)`` of the definition's read paths, so only
real path expressions can be written (``.a // 1`` or ``to_entries`` cannot: a
MutationError names the component and path). The input object is never modified.

The ``path(...)`` evaluation goes through a ``Locator``: in-process for the trusted
catalog, the bounded worker pool (``bounded.Evaluator.locator``) for any other definition,
all of one object's paths in one call.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.workloads.demand import Toleration
from dispatcher.workloads.errors import MutationError
from dispatcher.workloads.instances import SPEC_FIELDS, builds_containers
from dispatcher.workloads.model import Component, Definition, Expr
from dispatcher.workloads.paths import Locator, expr_locations, in_process, value_at
from dispatcher.workloads.pathshape import path_shape_problem
from dispatcher.workloads.plaincopy import plain_copy

__all__ = ["PodTemplate", "mutate_pods", "pod_templates"]

# pod field -> (where it lives in a template, in a pod spec, fragment path name)
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "labels": (("metadata", "labels"), ("labels",), "labelsPath"),
    "annotations": (("metadata", "annotations"), ("annotations",), "annotationsPath"),
    "schedulerName": (("spec", "schedulerName"), ("schedulerName",), "schedulerNamePath"),
    "nodeSelector": (("spec", "nodeSelector"), ("nodeSelector",), "nodeSelectorPath"),
    "tolerations": (("spec", "tolerations"), ("tolerations",), "tolerationsPath"),
    "priorityClassName": (("spec", "priorityClassName"), ("priorityClassName",),
                          "priorityClassNamePath"),
    # whole objects, replaced: the member gang a pod joins (kube/gangapis: 1.35's
    # Workload API; 1.36+'s PodGroup)
    "workloadRef": (("spec", "workloadRef"), ("workloadRef",), "workloadRefPath"),
    "schedulingGroup": (("spec", "schedulingGroup"), ("schedulingGroup",),
                        "schedulingGroupPath"),
}
_MERGED = ("labels", "annotations", "nodeSelector")


def mutate_pods(obj: Mapping[str, Any], definition: Definition, *,
                labels: Mapping[str, str] | None = None,
                annotations: Mapping[str, str] | None = None,
                scheduler_name: str | None = None,
                node_selector: Mapping[str, str] | None = None,
                tolerations: Sequence[Toleration | Mapping[str, Any]] | None = None,
                priority_class_name: str | None = None,
                workload_ref: Mapping[str, str] | None = None,
                scheduling_group: Mapping[str, str] | None = None,
                components: Iterable[str] | None = None,
                instances: Mapping[str, Collection[int]] | None = None,
                locate: Locator = in_process, in_place: bool = False) -> dict[str, Any]:
    """A copy of ``obj`` with the given fields set on the pods of every instance
    (``in_place``: ``obj`` itself, a dict the caller has just built and owns).

    Maps (labels, annotations, nodeSelector) are merged over what the template has;
    tolerations are appended unless already present; strings, ``workload_ref`` and
    ``scheduling_group`` are replaced. ``components`` limits the change to those
    pod-creating components (all by default), ``instances`` a component to the templates
    of those instances (indexes in the order its instance id path gives them: the order of
    its spec path's results).
    """
    wanted: dict[str, Any] = {}
    for key, value in (("labels", labels), ("annotations", annotations),
                       ("schedulerName", scheduler_name), ("nodeSelector", node_selector),
                       ("priorityClassName", priority_class_name)):
        if value is not None:
            wanted[key] = dict(value) if isinstance(value, Mapping) else value
    if tolerations is not None:
        wanted["tolerations"] = [_toleration(t) for t in tolerations]
    if workload_ref is not None:
        wanted["workloadRef"] = dict(workload_ref)
    if scheduling_group is not None:
        wanted["schedulingGroup"] = dict(scheduling_group)
    targets = _targets(definition, components)
    out: dict[str, Any] = obj if in_place and isinstance(obj, dict) else plain_copy(dict(obj))
    if not wanted:
        return out
    plan = [(comp, key, value, *_where(definition, comp, key=key))
            for comp in targets for key, value in wanted.items()]
    found = expr_locations([expr for *_, expr, _ in plan], obj, locate=locate, verb="written",
                           where=lambda i: f"definition {definition.name}: component "
                                           f"{plan[i][0].name}")
    for (comp, key, value, expr, suffix), each in zip(plan, found, strict=True):
        only = (instances or {}).get(comp.name)
        for index, location in enumerate(each):
            if only is None or index in only:
                _apply(out, [*location, *suffix], key=key, value=value,
                       where=f"component {comp.name}: {expr.field}")
    return out


@dataclass(frozen=True, kw_only=True)
class PodTemplate:
    """One pod template of an object: what a Pod built from it would carry."""

    component: str
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]


def _whole_spec_path(comp: Component) -> Expr | None:
    """The path to a component's pod spec: its spec path, or for fragments the
    ``containersPath`` (whose locations' parents are the pod spec the fragments are of)."""
    spec = comp.spec
    if spec is None:
        return None
    if spec.pattern == "fragmented":
        # one that builds its list (KServe's model container) locates nothing: ``_built``
        return None if builds_containers(comp) else spec.fragment("containersPath")
    return spec.path


def _component_where(definition: str, component: str, _index: int) -> str:
    return f"definition {definition}: component {component}"


def _built(obj: Mapping[str, Any], definition: Definition,
           built: Sequence[tuple[str, Mapping[str, Any]]], *, locate: Locator
           ) -> list[PodTemplate]:
    """The pods of components whose containers list is built: the object its path-shaped
    fragments share as their pod spec (KServe's predictor inlines a PodSpec: host
    namespaces, volumes and the pod's securityContext are there), with the built
    containers; the assembled fragments alone when they share none."""
    out: list[PodTemplate] = []
    for comp in definition.components:
        specs = [spec for name, spec in built if name == comp.name]
        if not specs or comp.spec is None:
            continue
        frags = [(expr, SPEC_FIELDS[key]) for key, expr in comp.spec.fragments
                 if key in SPEC_FIELDS and not path_shape_problem(expr.text)]
        found = expr_locations([expr for expr, _ in frags], obj, locate=locate,
                               verb="written", where=functools.partial(
                                   _component_where, definition.name, comp.name))
        bases = {tuple(at[:-len(suffix)]) for (_, suffix), each in zip(frags, found,
                                                                       strict=True)
                 for at in each if len(at) > len(suffix)
                 and tuple(at[-len(suffix):]) == suffix}
        base = value_at(obj, next(iter(bases))) if len(bases) == 1 else None
        for spec in specs:
            whole = {**base, **spec} if isinstance(base, Mapping) else dict(spec)
            out.append(PodTemplate(component=comp.name, metadata={}, spec=whole))
    return out


def pod_templates(obj: Mapping[str, Any], definition: Definition, *,
                  built: Sequence[tuple[str, Mapping[str, Any]]] = (),
                  locate: Locator = in_process) -> list[PodTemplate]:
    """Every pod template of ``obj``, in definition order: templates and pod specs as
    written; for a component declared in fragments, the whole object its containers list
    is in (a kind like LLMInferenceService keeps a full pod spec there: what the member
    must judge is all of it, host namespaces and volumes included, not only the fields the
    fragments name). A fragmented component without ``containersPath`` describes no pod
    spec and is left out; one whose containers list is built takes it from ``built``
    (``Resolution.built``, per instance)."""
    out: list[PodTemplate] = []
    comps = [(c, path) for c in _targets(definition, None)
             if (path := _whole_spec_path(c)) is not None]
    found = expr_locations([path for _, path in comps], obj, locate=locate,
                           verb="written",
                           where=lambda i: f"definition {definition.name}: component "
                                           f"{comps[i][0].name}")
    for (comp, _), each in zip(comps, found, strict=True):
        spec = comp.spec
        assert spec is not None
        for at in each:
            if spec.pattern == "fragmented" and (not at or at[-1] != "containers"):
                continue  # not a pod spec's containers: nothing whole to judge
            found = value_at(obj, at[:-1] if spec.pattern == "fragmented" else at)
            if not isinstance(found, Mapping):
                continue
            if spec.pattern == "template":
                meta, pod = found.get("metadata") or {}, found.get("spec") or {}
            else:
                meta, pod = {}, found
            if isinstance(meta, Mapping) and isinstance(pod, Mapping):
                out.append(PodTemplate(component=comp.name, metadata=meta, spec=pod))
    return out + _built(obj, definition, built, locate=locate) if built else out


def _targets(definition: Definition, names: Iterable[str] | None) -> list[Component]:
    pods = [c for c in definition.components if c.spec is not None]
    if names is None:
        return pods
    chosen = set(names)
    unknown = chosen - {c.name for c in pods}
    if unknown:
        raise MutationError(f"definition {definition.name}: no pod-creating component "
                            f"{', '.join(sorted(unknown))} (have "
                            f"{', '.join(c.name for c in pods) or 'none'})")
    return [c for c in pods if c.name in chosen]


def _where(definition: Definition, comp: Component, *, key: str
           ) -> tuple[Expr, tuple[str, ...]]:
    """The path expression to write ``key`` through, and the suffix below its locations."""
    spec = comp.spec
    assert spec is not None
    in_template, in_spec, fragment = _FIELDS[key]
    problem = f"definition {definition.name}: component {comp.name}: cannot set {key}"
    if spec.pattern == "template":
        if spec.path is None:
            raise MutationError(f"{problem}: empty podTemplateSpecPath")
        return spec.path, in_template
    if spec.pattern == "podspec":
        if key in ("labels", "annotations"):
            if spec.metadata is None:
                raise MutationError(f"{problem}: podSpecPath without metadataPath")
            return spec.metadata, in_spec
        if spec.path is None:
            raise MutationError(f"{problem}: empty podSpecPath")
        return spec.path, in_spec
    expr = spec.fragment(fragment)
    if expr is None:
        raise MutationError(f"{problem}: fragmentedPodSpecDefinition has no {fragment}")
    return expr, ()


def _apply(root: dict[str, Any], path: Sequence[str | int], *, key: str, value: Any,
           where: str) -> None:
    """Set ``value`` at ``path``, creating missing objects on the way (like jq assign)."""
    node: Any = root
    for step, nxt in itertools.pairwise(path):
        node = _child(node, step, create_object=not isinstance(nxt, int), where=where)
    last = path[-1] if path else None
    if last is None:
        raise MutationError(f"{where}: the path addresses the whole object")
    current = _get(node, last, where=where)
    if key in _MERGED:
        if current is not None and not isinstance(current, Mapping):
            raise MutationError(f"{where}: {key} is not an object")
        _set(node, last, value={**(current or {}), **value}, where=where)
    elif key == "tolerations":
        if current is not None and not isinstance(current, list):
            raise MutationError(f"{where}: tolerations is not a list")
        merged = list(current or [])
        merged.extend(t for t in value if t not in merged)
        _set(node, last, value=merged, where=where)
    else:
        _set(node, last, value=value, where=where)


def _child(node: Any, step: str | int, *, create_object: bool, where: str) -> Any:
    current = _get(node, step, where=where)
    if current is None:
        current = {} if create_object else []
        _set(node, step, value=current, where=where)
    return current


def _get(node: Any, step: str | int, *, where: str) -> Any:
    if isinstance(step, int):
        if not isinstance(node, list):
            raise MutationError(f"{where}: cannot index {type(node).__name__} with {step}")
        return node[step] if -len(node) <= step < len(node) else None
    if not isinstance(node, dict):
        raise MutationError(f"{where}: cannot set key {step!r} in {type(node).__name__}")
    return node.get(step)


def _set(node: Any, step: str | int, *, value: Any, where: str) -> None:
    if isinstance(step, int):
        if not isinstance(node, list) or not -len(node) <= step < len(node):
            raise MutationError(f"{where}: index {step} is out of range")
        node[step] = value
    else:
        node[step] = value


def _toleration(item: Toleration | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(item, Toleration):
        out = {"key": item.key, "operator": item.operator, "value": item.value,
               "effect": item.effect}
        return {k: v for k, v in out.items() if v}
    return dict(item)
