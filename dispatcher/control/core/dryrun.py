"""The pod dry-run: what a copy may do on a member, never more than its hub namespace allows.

A hub namespace's Pod Security level is the hub operator's word on what that tenant's pods
may do; the member namespace is made or checked to be at least as strict first
(``control/namespaces``, ``kube/podsecurity``). Before a copy is created, each of
its pod templates is sent to the member as a Pod with ``dryRun=All``: the member's own
admission (Pod Security, ServiceAccount, quotas, LimitRanges, policy webhooks) judges it,
and a refusal is a rejection with the member's reason instead of a copy whose pods can
never start (workload objects are admitted even when their pods would not be).

Pure: the shell (``control/submit.MemberWrites``) does the requests. Not the queue's
admission (``control/core/placing``): this is the member's own admission of the copy's pods.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from dispatcher.control.core.names import PREFIX
from dispatcher.workloads.mutate import PodTemplate

__all__ = ["AdmittedPods", "dry_run_pods"]

_PLACEHOLDER_IMAGE = "dispatcher.invalid/admission-check"


def dry_run_pods(templates: Sequence[PodTemplate], *, namespace: str
                 ) -> list[dict[str, Any]]:
    """One Pod per distinct template, to be created with ``dryRun=All`` in ``namespace``.

    Unnamed containers get a name and image-less ones a placeholder image, so that pod
    validation (which an operator's defaults would satisfy) does not stop admission from
    running; nothing that changes what the pod may do is added.
    """
    out: list[dict[str, Any]] = []
    seen: list[Any] = []
    for template in templates:
        spec = _completed(template.spec)
        key = (dict(template.metadata.get("labels") or {}), spec)
        if key in seen:
            continue
        seen.append(key)
        meta: dict[str, Any] = {"generateName": "dispatcher-admission-check-",
                                "namespace": namespace}
        for field in ("labels", "annotations"):
            value = template.metadata.get(field)
            if isinstance(value, Mapping) and value:
                meta[field] = dict(value)
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return out


def _completed(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        out[field] = [{"name": f"{field[:4].lower()}-{i}", "image": _PLACEHOLDER_IMAGE,
                       **item} if isinstance(item, Mapping) else item
                      for i, item in enumerate(items)]
    return out


class AdmittedPods:
    """Pods the member's admission accepted a moment ago, so a burst of identical
    workloads asks once per member, namespace and pod body, not once per workload.

    Only acceptances are remembered, for ``ttl_s`` (refusals are always asked again).
    The price: a namespace whose policy is tightened gets, for at most ``ttl_s``, copies
    whose pods the member then refuses at pod creation, as it would without the check.
    """

    def __init__(self, *, ttl_s: float = 30.0, size: int = 4096) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._until: OrderedDict[tuple[str, str, str], float] = OrderedDict()

    @staticmethod
    def key(member: str, namespace: str, pod: Mapping[str, Any]) -> tuple[str, str, str]:
        """The pod without the dispatcher's own stamps (the hub uid on every pod of a copy
        differs per workload and is nothing admission judges)."""
        meta = dict(pod.get("metadata") or {})
        for field in ("labels", "annotations"):
            if isinstance(meta.get(field), Mapping):
                meta[field] = {k: v for k, v in meta[field].items()
                               if not str(k).startswith(PREFIX)}
        body = json.dumps({**pod, "metadata": meta}, sort_keys=True, default=str).encode()
        return (member, namespace, hashlib.sha256(body).hexdigest())

    def admitted(self, member: str, namespace: str, pod: Mapping[str, Any], *,
                 now: float) -> bool:
        """The same pod was admitted there less than ``ttl_s`` ago."""
        key = self.key(member, namespace, pod)
        until = self._until.get(key)
        if until is None:
            return False
        if until <= now:
            del self._until[key]
            return False
        return True

    def remember(self, member: str, namespace: str, pod: Mapping[str, Any], *,
                 now: float) -> None:
        key = self.key(member, namespace, pod)
        self._until[key] = now + self.ttl_s
        self._until.move_to_end(key)
        while len(self._until) > self.size:
            self._until.popitem(last=False)
