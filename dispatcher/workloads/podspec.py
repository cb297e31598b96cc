"""What one pod needs from a node, read from its pod spec (plain dict, core/v1 shape).

GPUs follow DESIGN.md: max(sum over containers, max over init containers) of
``nvidia.com/gpu`` (limits, else requests); restartable init containers ("sidecars") are
counted like the kubelet does. CPU and memory use the same rule on requests (else limits).
Raises ValueError with a field path for anything of the wrong type.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal, cast

from dispatcher.workloads.demand import TaintEffect, Toleration
from dispatcher.workloads.quantity import format_cpu, format_memory, parse_quantity, whole_count
from dispatcher.workloads.template import check_pod_spec

_MAP = (dict, Mapping)  # dict first: isinstance on the Mapping ABC is slow

__all__ = ["GPU_PRODUCT_LABEL", "GPU_RESOURCE", "PodNeeds", "effective", "pod_gpus", "pod_needs",
           "tolerations"]

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource every GPU count in the dispatcher is about (defined only here)."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The node label (and node selector key) naming the GPU model."""
_EMPTY: Mapping[str, str] = MappingProxyType({})
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")


@dataclass(frozen=True, kw_only=True)
class PodNeeds:
    """One pod's requirements: the fields of a ``PodShape`` except the count."""

    gpus: int = 0
    gpu_product: str | None = None
    cpu: str | None = None
    memory: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tolerations: tuple[Toleration, ...] = ()

    def key(self) -> tuple[Any, ...]:
        """Identity for grouping identical pods into one shape."""
        return (self.gpus, self.gpu_product, self.cpu, self.memory,
                tuple(sorted(self.node_selector.items())), self.tolerations)


_NOTHING = PodNeeds()


def pod_needs(spec: Any, *, required: tuple[str, ...] | None = None) -> PodNeeds:
    """Requirements of a pod whose spec is ``spec`` (None or {} -> nothing needed).

    ``required``: first check that the spec can make valid Pods
    (``template.check_pod_spec`` with these required container fields; TemplateProblem).
    Memoized on the spec's JSON (and ``required``): the same templates come back on every
    resolve of an object (status updates), and the key costs a fraction of the check and
    the computation. ``spec`` is JSON data as a definition's paths give it (so the memo's
    answer is the spec's own); a spec that fails is never kept.
    """
    if spec is None:
        return _NOTHING
    try:
        key = json.dumps(spec, separators=(",", ":"))
    except (TypeError, ValueError):
        return _checked_needs(spec, required)
    return _NEEDS.get(key, spec, required)


def _checked_needs(spec: Any, required: tuple[str, ...] | None) -> PodNeeds:
    if required is not None:
        check_pod_spec(spec, required=required)
    return _pod_needs(spec)


class _Memo:
    """``PodNeeds`` by a spec's JSON text, at most ``size`` of them (the oldest go first).
    A miss computes from the spec at hand, not from the key parsed back."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._known: dict[tuple[str, tuple[str, ...] | None], PodNeeds] = {}

    def get(self, key: str, spec: Any, required: tuple[str, ...] | None) -> PodNeeds:
        found = self._known.get((key, required))
        if found is None:
            found = _checked_needs(spec, required)  # ValueError: nothing kept
            with self._lock:
                if len(self._known) >= self.size:
                    self._known.pop(next(iter(self._known)), None)
                self._known[key, required] = found
        return found

    def cache_clear(self) -> None:
        """Forget every entry (as ``functools.lru_cache``'s, for benchmarks and tests)."""
        with self._lock:
            self._known.clear()


_NEEDS = _Memo(4096)


def _pod_needs(spec: Any) -> PodNeeds:
    if not isinstance(spec, _MAP):
        raise ValueError(f"pod spec must be an object, not {_type(spec)}")
    containers = _containers(spec.get("containers"), "containers")
    inits = _containers(spec.get("initContainers"), "initContainers")
    gpus = effective(containers, inits, _strict(GPU_RESOURCE, "limits"))
    cpu = effective(containers, inits, _strict("cpu", "requests"))
    memory = effective(containers, inits, _strict("memory", "requests"))
    if not isinstance(gpus, int) and gpus.denominator != 1:
        raise ValueError(f"{GPU_RESOURCE} must be a whole number, not {float(gpus):g}")
    selector = _string_map(spec.get("nodeSelector"), "nodeSelector")
    product = selector.get(GPU_PRODUCT_LABEL) or _affinity_product(spec.get("affinity"))
    others = {k: v for k, v in selector.items() if k != GPU_PRODUCT_LABEL}
    return PodNeeds(
        gpus=int(gpus), gpu_product=product,
        cpu=format_cpu(cpu) if cpu else None,
        memory=format_memory(memory) if memory else None,
        node_selector=MappingProxyType(others) if others else _EMPTY,
        tolerations=tolerations(spec.get("tolerations")))


def _type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _containers(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, not {_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, _MAP):
            raise ValueError(f"{where}[{i}] must be an object, not {_type(item)}")
    return cast(list[Mapping[str, Any]], value)


def _amount(container: Mapping[str, Any], *, resource: str, prefer: str, where: str
            ) -> Fraction | int:
    """One container's amount of ``resource``: the preferred block, else the other."""
    resources = container.get("resources")
    if not resources:
        return 0
    if not isinstance(resources, _MAP):
        raise ValueError(f"{where}.resources must be an object, not {_type(resources)}")
    other = "requests" if prefer == "limits" else "limits"
    for block in (prefer, other):
        values = resources.get(block)
        if values is None:
            continue
        if not isinstance(values, _MAP):
            raise ValueError(f"{where}.resources.{block} must be an object")
        if resource in values:
            try:
                return parse_quantity(values[resource])
            except ValueError as error:
                raise ValueError(f"{where}.resources.{block}[{resource!r}]: {error}") from None
    return 0


Amount = Callable[[Mapping[str, Any], str], Fraction | int]
"""One container's amount of a resource; the second argument is its field path."""


def _strict(resource: str, prefer: str) -> Amount:
    def amount(container: Mapping[str, Any], where: str) -> Fraction | int:
        return _amount(container, resource=resource, prefer=prefer, where=where)
    return amount


def effective(containers: Sequence[Mapping[str, Any]], inits: Sequence[Mapping[str, Any]],
              amount: Amount) -> Fraction | int:
    """The kubelet's effective request: containers + sidecars vs. the largest init step.

    The one rule for a pod's resources: the workload resolver (``pod_needs``) and the
    fleet's accounting of bound pods (``pod_gpus``) both use it, so a workload is never
    sized by one rule and charged by another.
    """
    total: Fraction | int = 0
    for i, container in enumerate(containers):
        total += amount(container, f"containers[{i}]")
    if not inits:
        return total
    sidecars: Fraction | int = 0
    peak: Fraction | int = 0
    for i, init in enumerate(inits):
        step = amount(init, f"initContainers[{i}]")
        if init.get("restartPolicy") == "Always":
            sidecars += step
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + step)
    return max(total + sidecars, peak)


def _container_gpus(container: Mapping[str, Any], where: str) -> int:
    """``nvidia.com/gpu`` limits, else requests, as a whole count; 0 when unusable."""
    resources = container.get("resources")
    if not isinstance(resources, _MAP):
        return 0
    for block in ("limits", "requests"):
        values = resources.get(block)
        if isinstance(values, _MAP) and GPU_RESOURCE in values:
            return whole_count(values[GPU_RESOURCE])
    return 0


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs a live pod holds on its node, by the same rule as ``pod_needs``.

    Never raises: a Pod the apiserver accepted is valid, and a value this code cannot read
    counts as 0 rather than breaking the member's pod watch.
    """
    containers = [c for c in spec.get("containers") or () if isinstance(c, _MAP)]
    inits = [c for c in spec.get("initContainers") or () if isinstance(c, _MAP)]
    return int(effective(containers, inits, _container_gpus))


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, _MAP):
        raise ValueError(f"{where} must be an object, not {_type(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{where}[{key!r}] must be a string, not {_type(item)}")
        out[str(key)] = item
    return out


def _affinity_product(affinity: Any) -> str | None:
    """The GPU product when every required node-affinity term pins one and the same value."""
    if not isinstance(affinity, _MAP):
        return None
    node = affinity.get("nodeAffinity")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node, _MAP) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, _MAP) else None
    if not isinstance(terms, list) or not terms:
        return None
    found: set[str] = set()
    for term in terms:
        expressions = term.get("matchExpressions") if isinstance(term, _MAP) else None
        if not isinstance(expressions, list):
            expressions = []  # absent or malformed: pins nothing
        pinned = [e.get("values") for e in expressions
                  if isinstance(e, _MAP) and e.get("key") == GPU_PRODUCT_LABEL
                  and e.get("operator") == "In"]
        if len(pinned) != 1 or not isinstance(pinned[0], list) or len(pinned[0]) != 1 \
                or not isinstance(pinned[0][0], str):
            return None
        found.add(pinned[0][0])
    return found.pop() if len(found) == 1 else None


def tolerations(value: Any) -> tuple[Toleration, ...]:
    """A pod spec's (or a ResourceFlavor's) ``tolerations``; ValueError when malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"tolerations must be a list, not {_type(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, _MAP):
            raise ValueError(f"tolerations[{i}] must be an object, not {_type(item)}")
        operator = item.get("operator") or "Equal"
        effect = item.get("effect") or ""
        if operator not in ("Exists", "Equal"):
            raise ValueError(f"tolerations[{i}].operator must be Exists or Equal")
        if effect not in _EFFECTS:
            raise ValueError(f"tolerations[{i}].effect {effect!r} is not a taint effect")
        out.append(Toleration(key=str(item.get("key") or ""),
                              operator=cast(Literal["Exists", "Equal"], operator),
                              value=str(item.get("value") or ""),
                              effect=cast(TaintEffect, effect)))
    return tuple(out)
