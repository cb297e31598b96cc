"""Asking a member's admission about a copy's pods, before the copy is created.

The Pods to send and the memo of pods admitted moments ago are ``control/core/dryrun`` (pure);
this sends them with ``dryRun=All`` and turns the member's answer into a ``Rejection``
(refused), nothing (admitted, or not the admission's word), or an error to retry. The same
pod asked about while its question is in flight joins it (``Admission``): a burst of
identical copies into one namespace asks once, not once per worker that got there first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from dispatcher.aiotasks import SingleFlight
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.dryrun import AdmittedPods
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Forbidden, Invalid, ServerError
from dispatcher.kube.resources import PODS

__all__ = ["Admission", "admit"]

log = structlog.get_logger("dispatcher")


class Admission:
    """The pods admitted moments ago and the questions in flight (one per controller)."""

    def __init__(self) -> None:
        self.admitted = AdmittedPods()
        self.asking: SingleFlight[None] = SingleFlight()


async def admit(client: KubeClient, admission: Admission, *, cluster: str, namespace: str,
                pods: Sequence[Mapping[str, Any]], now: Callable[[], float]
                ) -> Rejection | None:
    """The member's admission verdict on each pod template (``dryRun=All``): a
    Rejection on a refusal (403); a pod invalid as such (422: an operator completes
    it) is not the admission's word and passes. A pod admitted there moments ago is
    not asked again (``dryrun.AdmittedPods``)."""
    admitted = admission.admitted
    for pod in pods:
        if admitted.admitted(cluster, namespace, pod, now=now()):
            continue

        async def ask(pod: Mapping[str, Any] = pod) -> None:
            await client.request("POST", PODS.collection(namespace), body=pod,
                                 query=[("dryRun", "All")])
            admitted.remember(cluster, namespace, pod, now=now())
        try:
            await admission.asking.do(admitted.key(cluster, namespace, pod), ask)
        except (Forbidden, Invalid) as exc:
            if isinstance(exc, Invalid):
                continue
            if 'cannot create resource "pods"' in exc.detail:
                # RBAC, not admission: this identity cannot ask (deploy/member grants
                # it); the copy is still created, and the log says what was skipped
                log.warning("admission.unchecked", member=cluster, namespace=namespace,
                            message=exc.detail[:300])
                return None
            if 'serviceaccount "default" not found' in exc.detail:
                # a namespace seconds old: the member's controller-manager creates its
                # default ServiceAccount shortly; try again (worker back-off)
                raise ServerError(f"{cluster}: {exc.detail}", status=503,
                                  reason="ServiceAccountPending") from None
            return Rejection.of(cluster, status=exc.status, reason="PodNotAdmitted",
                                message=f"a pod of this workload would not be admitted "
                                        f"in namespace {namespace}: {exc.detail}")
    return None
