"""Member copies: how a hub workload is written on a member, and whose a member object is.

Fed by ``decide`` (SUBMIT, DELETE_COPY, orphan sweep), feeds the member apiserver. A copy
is the hub object with server-owned metadata and status removed, stamped with our origin
label and the hub uid (label, for listing, and annotation), and with the configured
pod-template mutations applied through the workload's definition. Ownership is stamped
and checked: ``owner_state`` reads it, and ``submit.delete_if_owned`` is the only way the
controller deletes anything on a member; it refuses objects without our stamps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dispatcher.control.core.decide import CopyState
from dispatcher.control.core.names import (
    HUB_GENERATION_ANNOTATION,
    HUB_OBJECT_ANNOTATION,
    HUB_UID_ANNOTATION,
    ORIGIN_LABEL,
    PREFIX,
)
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.holds import HOLD_ANNOTATION, clear_hold
from dispatcher.workloads.model import Definition
from dispatcher.workloads.mutate import mutate_pods
from dispatcher.workloads.paths import Locator, in_process, strip_server_set
from dispatcher.workloads.plaincopy import plain_copy

__all__ = ["PodMutations", "Rejection", "build_copy", "object_key",
           "owner_state", "stamped", "written_generation"]

_SERVER_OWNED = ("uid", "resourceVersion", "generation", "creationTimestamp",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                 "ownerReferences", "finalizers", "selfLink")
_HUB_ONLY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", HOLD_ANNOTATION)
_NO_STRINGS: Mapping[str, str] = MappingProxyType({})
_MESSAGE_LIMIT = 600


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A member refused the copy, or the copy could not be built: retrying cannot help.

    ``status`` is the HTTP status (0: the copy could not be built here); ``reason`` the
    Kubernetes reason (``Invalid``, ``Forbidden``, ...); ``message`` the server's own words,
    on one line and bounded (it may quote the object, never our credentials).
    """

    member: str
    status: int
    reason: str
    message: str

    @classmethod
    def of(cls, member: str, *, status: int, reason: str, message: str) -> Rejection:
        text = " ".join(message.split())
        if len(text) > _MESSAGE_LIMIT:
            text = text[:_MESSAGE_LIMIT - 1] + "…"
        return cls(member=member, status=status, reason=reason, message=text)

    def describe(self) -> str:
        """``HTTP 422 Invalid: ...`` (or the reason alone when nothing was sent)."""
        code = f"HTTP {self.status} {self.reason}" if self.status else self.reason
        return f"{code}: {self.message}"


@dataclass(frozen=True, kw_only=True)
class PodMutations:
    """Pod-template changes applied to every copy (``submit.podTemplate`` in the config)."""

    labels: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    annotations: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    scheduler_name: str | None = None
    priority_class_name: str | None = None


def object_key(obj: Mapping[str, Any]) -> str:
    """``Kind.group/name`` of an object (``Kind/name`` in the core group)."""
    gvk = GroupVersionKind.of_object(obj)
    name = str((obj.get("metadata") or {}).get("name") or "")
    return f"{gvk.kind}.{gvk.group}/{name}" if gvk.group else f"{gvk.kind}/{name}"


def stamped(obj: Mapping[str, Any], *, hub_id: str) -> str | None:
    """The hub uid a member object was stamped with by hub ``hub_id``, else None.

    The object must also be the one the stamp names (``HUB_OBJECT_ANNOTATION`` equals its
    own kind, group and name): stamps an operator copied onto a child object, or that a
    workload smuggled into a nested template, never make that object a copy.
    """
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if not hub_id or labels.get(ORIGIN_LABEL) != hub_id:
        return None
    if annotations.get(HUB_OBJECT_ANNOTATION) != object_key(obj):
        return None
    uid = annotations.get(HUB_UID_ANNOTATION) or labels.get(HUB_UID_LABEL)
    return str(uid) if uid else None


def written_generation(obj: Mapping[str, Any]) -> int:
    """The hub generation a copy was written from (0 when not stamped)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(
        HUB_GENERATION_ANNOTATION)
    try:
        return int(value or 0)
    except ValueError:
        return 0


def owner_state(obj: Mapping[str, Any] | None, *, hub_id: str, hub_uid: str) -> CopyState:
    """ABSENT (no object), OURS (our origin and this uid), else FOREIGN."""
    if obj is None:
        return CopyState.ABSENT
    return CopyState.OURS if hub_uid and stamped(obj, hub_id=hub_id) == hub_uid \
        else CopyState.FOREIGN


def build_copy(workload: Mapping[str, Any], *, hub_id: str, definition: Definition | None,
               mutations: PodMutations = PodMutations(),
               locate: Locator = in_process) -> dict[str, Any]:
    """The object to create on the member (the input is not modified).

    What the hub's apiserver or controllers set and the member sets for itself is left
    out: server-owned metadata (``_SERVER_OWNED``), hub-only annotations, the status, and
    what the definition declares in ``copyDefinition.serverSetPaths`` (Job: the generated
    selector and its template labels), and the hub hold (``copyDefinition.hubHold``), so
    the member's controller runs what the hub's may not.
    Pods of the copy get the hub uid label too, so the member's pods can be matched to the
    workload (reservations shrink as they appear). Raises MutationError when a configured
    mutation cannot be written through the definition. ``locate`` evaluates the
    definition's paths (``bounded.Evaluator.locator``: bounded for untrusted definitions).
    """
    meta = workload.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    out = {k: plain_copy(v) for k, v in workload.items() if k not in ("status", "metadata")}
    _strip_nested_stamps(out)
    new_meta = {k: plain_copy(v) for k, v in meta.items() if k not in _SERVER_OWNED}
    labels = dict(new_meta.get("labels") or {})
    labels[ORIGIN_LABEL] = hub_id
    labels[HUB_UID_LABEL] = uid
    annotations = {k: v for k, v in (new_meta.get("annotations") or {}).items()
                   if k not in _HUB_ONLY_ANNOTATIONS}
    annotations[HUB_UID_ANNOTATION] = uid
    annotations[HUB_OBJECT_ANNOTATION] = object_key(workload)
    if meta.get("generation"):
        annotations[HUB_GENERATION_ANNOTATION] = str(meta["generation"])
    new_meta["labels"] = labels
    new_meta["annotations"] = annotations
    out["metadata"] = new_meta
    if definition is None:
        return out
    strip_server_set(out, definition, locate=locate)
    clear_hold(out, definition.hold, hub_annotations=meta.get("annotations") or {})
    pod_labels = {**mutations.labels, HUB_UID_LABEL: uid}
    return mutate_pods(out, definition, labels=pod_labels,
                       annotations=dict(mutations.annotations) or None,
                       scheduler_name=mutations.scheduler_name,
                       priority_class_name=mutations.priority_class_name, locate=locate,
                       in_place=True)  # ``out`` is this function's own copy


def _strip_nested_stamps(node: Any) -> None:
    """Remove ``dispatcher.io/`` labels and annotations from every nested ``metadata``
    (templates of child objects and pods), so a workload cannot make its children carry
    another workload's stamps. The copy's own metadata is stamped afterwards."""
    if isinstance(node, list):
        for item in node:
            _strip_nested_stamps(item)
        return
    if not isinstance(node, dict):
        return
    meta = node.get("metadata")
    if isinstance(meta, dict):
        for key in ("labels", "annotations"):
            values = meta.get(key)
            if isinstance(values, dict):
                meta[key] = {k: v for k, v in values.items()
                             if not (isinstance(k, str) and k.startswith(PREFIX))}
    for value in node.values():
        _strip_nested_stamps(value)
