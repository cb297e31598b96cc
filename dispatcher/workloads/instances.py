"""A component's instances and their pod specs, read from its definition's paths.

``instance_ids`` are the ids the instance id path yields (strings, unique, non-empty);
``pod_specs`` the pod spec of each instance by the component's spec pattern (a pod template,
a pod spec, or fragments assembled into a pod spec by ``assemble``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.workloads.batchvalues import BatchValues
from dispatcher.workloads.model import Component, Expr
from dispatcher.workloads.pathshape import path_shape_problem

__all__ = ["MAPPINGS", "SPEC_FIELDS", "SPEC_IN", "assemble", "builds_containers",
           "instance_ids", "pod_specs"]

MAPPINGS = (dict, Mapping)  # dict first: isinstance on the Mapping ABC is slow
SPEC_IN = {"template": "spec", "podspec": "", "fragmented": "", "": ""}
"""Where the pod spec is below the spec path's result, per spec pattern."""


def instance_ids(comp: Component, values: BatchValues) -> list[str]:
    if comp.instance_ids is None:
        return [""]
    raw = values.all(comp.instance_ids)
    ids = []
    for value in raw:
        if value is not None and not isinstance(value, str):
            raise values.fail(comp.instance_ids, f"instance ids must be strings, not "
                                                 f"{type(value).__name__} {value!r}")
        ids.append(value or "")
    if "" in ids:
        raise values.fail(comp.instance_ids,
                          f"instance id path contained empty string values [{','.join(ids)}]")
    if len(set(ids)) != len(ids):
        # upstream keeps the last (a map by id) and silently loses pods; the frameworks'
        # own validation rejects such objects, so say so instead
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        raise values.fail(comp.instance_ids, f"duplicate instance ids {duplicates}")
    return ids


def builds_containers(comp: Component) -> bool:
    """The component's pod spec is in fragments and its containers list is built by the
    expression (not a path: KServe's model container joined to ``.containers``)."""
    spec = comp.spec
    containers = spec.fragment("containersPath") if spec is not None \
        and spec.pattern == "fragmented" else None
    return containers is not None and bool(path_shape_problem(containers.text))



def pod_specs(comp: Component, values: BatchValues, *, count: int
           ) -> list[tuple[Expr, Mapping[str, Any] | None]]:
    """Per instance: the path the spec came from (for errors) and the pod spec."""
    spec = comp.spec
    assert spec is not None
    if spec.pattern == "fragmented":
        frags = tuple((key, e) for key, e in spec.fragments if e.slot >= 0)
        if not frags:
            return [(Expr(text="", field="fragmentedPodSpecDefinition", slot=-1), None)] * count
        columns = values.padded([e for _, e in frags], count)
        out: list[tuple[Expr, Mapping[str, Any] | None]] = []
        for index in range(count):
            parts = {key: column[index] for (key, _), column in zip(frags, columns, strict=True)}
            try:
                out.append((frags[0][1], assemble(parts)))
            except ValueError as error:
                raise values.fail(frags[0][1], str(error)) from None
        return out
    if spec.path is None:
        return [(Expr(text="", field="specDefinition", slot=-1), None)] * count
    expr = spec.path
    result: list[tuple[Expr, Mapping[str, Any] | None]] = []
    for value in values.aligned(expr, count):
        if value is not None and not isinstance(value, MAPPINGS):
            raise values.fail(expr, f"must be an object, not {type(value).__name__}")
        pod = value
        if spec.pattern == "template" and value is not None:
            pod = value.get("spec")
            if pod is not None and not isinstance(pod, MAPPINGS):
                raise values.fail(expr, "pod template .spec must be an object")
        result.append((expr, pod))
    return result


_SIMPLE = {"schedulerNamePath": "schedulerName", "priorityClassNamePath": "priorityClassName",
           "nodeNamePath": "nodeName",
           "nodeSelectorPath": "nodeSelector", "tolerationsPath": "tolerations",
           "initContainersPath": "initContainers", "resourceClaimsPath": "resourceClaims"}
_AFFINITY = (("nodeAffinityPath", "nodeAffinity"), ("podAffinityPath", "podAffinity"))
SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    **{key: (target,) for key, target in _SIMPLE.items()},
    **{key: ("affinity", target) for key, target in _AFFINITY}}
"""Where each fragment ``assemble`` reads sits in a pod spec (the containers aside)."""


def assemble(parts: Mapping[str, Any]) -> dict[str, Any]:
    """A pod spec from fragmented fields (docs/definitions.md §2, per-pod resources)."""
    spec: dict[str, Any] = {}
    for key, target in _SIMPLE.items():
        if parts.get(key) is not None:
            spec[target] = parts[key]
    containers = parts.get("containersPath")
    if containers is not None and not isinstance(containers, list):
        raise ValueError("containersPath must give a list of containers")
    listed = list(containers or [])
    main = parts.get("containerPath")
    if main is not None and not isinstance(main, MAPPINGS):
        raise ValueError("containerPath must give a container object")
    resources = parts.get("resourcesPath")
    if resources is not None:
        main = {**(main or {"name": "main"}), "resources": resources}
    if main is not None:
        names = [c.get("name") for c in listed if isinstance(c, MAPPINGS)]
        if main.get("name") in names:
            at = names.index(main.get("name"))
            if resources is not None:
                listed[at] = {**listed[at], "resources": resources}
        else:
            listed.append(main)
    if listed:
        spec["containers"] = listed
    affinity = {k: parts[p] for p, k in _AFFINITY if parts.get(p) is not None}
    if affinity:
        spec["affinity"] = affinity
    return spec
