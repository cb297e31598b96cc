"""The member namespace a copy goes into: never weaker than its hub namespace.

Workload objects are admitted on the hub whatever their pod templates say; only the
member, where the pods are created, enforces the hub namespace's Pod Security level, and
only if its own namespace is labelled at least as strictly (``kube/podsecurity``). So,
before the admission dry-run:

- a namespace the dispatcher creates (``submit.createNamespaces``) carries
  ``podsecurity.member_labels`` of the hub namespace's labels and
  ``submit.podSecurityFloor``. The hub namespace must be readable (the hub ClusterRole
  grants ``get`` on namespaces): a refused read is a rejection naming the error, never a
  namespace with the floor alone;
- a namespace that exists on the member with a weaker ``enforce`` policy than the hub
  namespace's (no label counts as ``privileged``) is a rejection naming both policies,
  unless ``submit.weakerMemberNamespaces: allow`` (then nothing is read: the member
  identity may lack ``get`` on namespaces, as before this check). A member namespace the
  identity cannot read is a rejection too: unverified is not verified.

A member whose Kubernetes minor lacks a check the hub namespace's level has
(``podsecurity.lacking``: ``baseline:latest`` on a 1.33 member has no 1.34 host-probe check)
cannot refuse what that check refuses, however its namespace is labelled; the copy planner
runs those checks itself on the copy's pods (``copyplan``), from ``required``: the hub
namespace's level, read for such members only and kept ``ttl_s``.

A namespace found strong enough is not read again for ``ttl_s``, and a check or create
already in flight for a member and namespace is joined, not repeated (a burst asks, and
creates, once per member and namespace); the price, as for ``admission.AdmittedPods``: a namespace
weakened, or a hub namespace tightened, is seen up to ``ttl_s`` late. A refusal is logged
once, as the ``workload.rejected`` line of every rejection; a namespace created here is
logged ``namespace.created`` with its enforce level.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

from dispatcher.aiotasks import SingleFlight
from dispatcher.control.core.copies import Rejection
from dispatcher.control.settings import ControlSettings
from dispatcher.kube import podsecurity
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Conflict, Forbidden, KubeError, NotFound
from dispatcher.kube.resources import NAMESPACES

__all__ = ["MemberNamespaces", "namespace_missing"]

log = structlog.get_logger("dispatcher")


def namespace_missing(exc: NotFound, namespace: str) -> bool:
    """The 404 says the namespace itself is missing (not an object in it)."""
    return f'namespaces "{namespace}" not found' in exc.detail


class MemberNamespaces:
    """Checks and creates member namespaces for the copies (one instance, all workers)."""

    def __init__(self, *, settings: ControlSettings, hub: KubeClient,
                 monotonic: Callable[[], float], ttl_s: float = 30.0,
                 size: int = 4096) -> None:
        self.settings = settings
        self.hub = hub
        self.monotonic = monotonic
        self.ttl_s = ttl_s
        self.size = size
        self._until: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._checks: SingleFlight[Rejection | None] = SingleFlight()
        self._creates: SingleFlight[Rejection | None] = SingleFlight()
        self._required: OrderedDict[str, tuple[float, podsecurity.Policy]] = OrderedDict()
        self._reads: SingleFlight[podsecurity.Policy | Rejection] = SingleFlight()

    @property
    def checking(self) -> bool:
        """Existing member namespaces are compared (anything but an explicit ``allow``)."""
        return self.settings.weaker_member_namespaces != "allow"

    async def check(self, client: KubeClient, *, cluster: str, namespace: str
                    ) -> Rejection | None:
        """A Rejection when ``namespace`` on ``cluster`` is weaker than the hub's (or
        either cannot be read); None when it is strong enough or not checked. A missing
        member namespace raises the member's NotFound (``namespace_missing``), for the
        caller to create it or refuse."""
        if not self.checking or self._verified(cluster, namespace):
            return None
        return await self._checks.do((cluster, namespace), lambda: self._check(
            client, cluster=cluster, namespace=namespace))

    async def _check(self, client: KubeClient, *, cluster: str, namespace: str
                     ) -> Rejection | None:
        try:
            found = await client.request("GET", NAMESPACES.item(namespace))
        except Forbidden as exc:
            return Rejection.of(
                cluster, status=exc.status, reason="MemberNamespaceUnreadable",
                message=f"cannot read namespace {namespace} on {cluster} to compare its "
                        f"Pod Security level with the hub namespace's: {exc.detail} (the "
                        f"member identity of deploy/member grants get on the namespaces "
                        f"it writes in: re-run clusters add --create-identity; or set "
                        f"submit.weakerMemberNamespaces: allow)")
        hub = await self._hub_labels(cluster, namespace)
        if isinstance(hub, Rejection):
            return hub
        theirs = (found.get("metadata") or {}).get("labels") or {}
        gap = podsecurity.weaker(theirs, hub)
        if gap is not None:
            return Rejection.of(
                cluster, status=0, reason="NamespaceWeaker",
                message=f"namespace {namespace} on {cluster} enforces Pod Security "
                        f"{podsecurity.describe(theirs)}, weaker than hub namespace "
                        f"{namespace}'s {gap[1]}: its pods could do there what the hub "
                        f"refuses (label it pod-security.kubernetes.io/enforce="
                        f"{gap[1].level} on the member, or set "
                        f"submit.weakerMemberNamespaces: allow)")
        self._remember(cluster, namespace)
        return None

    async def create(self, client: KubeClient, *, cluster: str, namespace: str
                     ) -> Rejection | None:
        """Create ``namespace`` on ``cluster`` with the hub namespace's Pod Security labels,
        never below the floor; a Rejection (nothing created) when the hub namespace cannot
        be read. One created meanwhile by someone else is left as it is (``check`` judges
        it on the next attempt)."""
        if self._verified(cluster, namespace):
            return None  # created (or found strong enough) a moment ago
        return await self._creates.do((cluster, namespace), lambda: self._create(
            client, cluster=cluster, namespace=namespace))

    async def _create(self, client: KubeClient, *, cluster: str, namespace: str
                      ) -> Rejection | None:
        hub = await self._hub_labels(cluster, namespace)
        if isinstance(hub, Rejection):
            return hub
        labels = podsecurity.member_labels(hub, floor=self.settings.pod_security_floor)
        try:
            await client.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels}})
        except Conflict:
            return None
        log.info("namespace.created", member=cluster, namespace=namespace,
                 enforce=labels.get(f"{podsecurity.PREFIX}enforce", "(member default)"))
        self._remember(cluster, namespace)
        return None

    async def required(self, cluster: str, namespace: str
                       ) -> podsecurity.Policy | Rejection:
        """The enforce policy the hub namespace asks of ``cluster``'s copies
        (``podsecurity.required``, the floor included), read at most once per ``ttl_s``
        (a burst of copies to old members joins the one read in flight)."""
        kept = self._required.get(namespace)
        if kept is not None and kept[0] > self.monotonic():
            return kept[1]
        return await self._reads.do(namespace, lambda: self._read_required(cluster, namespace))

    async def _read_required(self, cluster: str, namespace: str
                             ) -> podsecurity.Policy | Rejection:
        now = self.monotonic()
        hub = await self._hub_labels(cluster, namespace)
        if isinstance(hub, Rejection):
            return hub
        wanted = podsecurity.required(hub, floor=self.settings.pod_security_floor)
        self._required[namespace] = (now + self.ttl_s, wanted)
        self._required.move_to_end(namespace)
        while len(self._required) > self.size:
            self._required.popitem(last=False)
        return wanted

    async def _hub_labels(self, cluster: str, namespace: str
                          ) -> dict[str, Any] | Rejection:
        """The hub namespace's labels; a Rejection when the hub refuses the read for good
        (a transient failure raises, for the worker's back-off)."""
        try:
            found = await self.hub.request("GET", NAMESPACES.item(namespace))
        except KubeError as exc:
            if not exc.permanent:
                raise
            return Rejection.of(
                cluster, status=exc.status, reason="HubNamespaceUnreadable",
                message=f"cannot read hub namespace {namespace}, so its Pod Security "
                        f"level cannot be carried to {cluster}; no namespace is created "
                        f"and no copy made: {exc.detail} (the hub ClusterRole of "
                        f"deploy/base/rbac.yaml grants get on namespaces)")
        return dict((found.get("metadata") or {}).get("labels") or {})

    def _verified(self, cluster: str, namespace: str) -> bool:
        until = self._until.get((cluster, namespace))
        if until is None:
            return False
        if until <= self.monotonic():
            del self._until[(cluster, namespace)]
            return False
        return True

    def _remember(self, cluster: str, namespace: str) -> None:
        key = (cluster, namespace)
        self._until[key] = self.monotonic() + self.ttl_s
        self._until.move_to_end(key)
        while len(self._until) > self.size:
            self._until.popitem(last=False)
