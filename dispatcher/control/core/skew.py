"""Pod fields a member's Kubernetes minor does not know: what a copy must not carry there.

An apiserver drops a pod field it does not know, with only a warning header (create and
update default to ``fieldValidation=Warn``): a template asking for a newer minor's field is
accepted by an older member and silently loses it, and 1.36 tombstoned 1.35's
``workloadRef``. Such a copy is refused on that member (``copyplan`` returns a Rejection,
so the workload goes to another member or waits with the reason), never sent to lose the
field. Pure.

The table is the diff of ``k8s.io/api`` core/v1 ``PodSpec`` and ``Container`` between
v0.32.3 and v0.37.2 (types.go at each tag; a field commented out is gone): first minor that
serves it, and the last one, for a field removed since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dispatcher.kube.gangapis import minor_number
from dispatcher.workloads.mutate import PodTemplate

__all__ = ["CONTAINER_FIELDS", "POD_FIELDS", "minor", "unknown_fields"]

POD_FIELDS: Mapping[str, tuple[int, int | None]] = {
    "hostnameOverride": (34, None),
    "workloadRef": (35, 35),
    "schedulingGroup": (36, None),
    "evictionResponders": (37, None),
}
"""Pod spec field -> (first minor, last minor or None)."""
CONTAINER_FIELDS: Mapping[str, tuple[int, int | None]] = {
    "restartPolicyRules": (34, None),
}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


minor = minor_number


def _served(span: tuple[int, int | None], at: int) -> bool:
    first, last = span
    return first <= at and (last is None or at <= last)


def _span(span: tuple[int, int | None]) -> str:
    first, last = span
    if last is None:
        return f"1.{first}+"
    return f"1.{first} only" if first == last else f"1.{first}-1.{last}"


def unknown_fields(templates: Iterable[PodTemplate], version: str | None) -> list[str]:
    """One line per pod-template field Kubernetes ``version`` does not serve (``component:
    spec.field (1.36+)``); empty when the version is not known."""
    at = minor(version)
    if at is None:
        return []
    out: list[str] = []
    for template in templates:
        spec: Mapping[str, Any] = template.spec
        for name, span in POD_FIELDS.items():
            if spec.get(name) is not None and not _served(span, at):
                out.append(f"{template.component}: spec.{name} ({_span(span)})")
        for key in _CONTAINER_LISTS:
            for container in spec.get(key) or ():
                if not isinstance(container, Mapping):
                    continue
                for name, span in CONTAINER_FIELDS.items():
                    if container.get(name) is not None and not _served(span, at):
                        out.append(f"{template.component}: spec.{key}"
                                   f"[{container.get('name')}].{name} ({_span(span)})")
    return sorted(set(out))
