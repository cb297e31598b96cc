"""Member health as plain values: what went wrong, since when, and the two conditions.

Pure (no I/O, no clock: ``now`` is passed in). ``connection`` feeds it outcomes (connected,
synced, answered a probe, failed with an exception); ``status`` renders it as the
MemberCluster's ``Reachable`` and ``Ready`` conditions. Rules:

- ``Ready`` means "placement may trust this member's live picture": credentials work, the
  server answers, and Nodes and Pods are listed and watched. Any failure turns it False at
  once, with a reason an operator can act on.
- ``Reachable`` is about the network: it turns False only when the member has not answered
  for ``unreachable_after`` (measured from the *first* loss, kept across failed
  reconnects, as Kueue's connectionState does), so a blip does not flap it. A server that
  answers 401/403 is reachable; a kubeconfig that cannot be read says nothing (Unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from dispatcher.fleet.kubeconfigs import KubeconfigProblem
from dispatcher.kube import errors
from dispatcher.kube.client import KubeconfigError

__all__ = ["Health", "Problem", "Reason", "classify", "connected", "expire", "failed",
           "initial", "probed", "spec_invalid", "synced", "unreachable_deadline"]


class Reason(StrEnum):
    """Condition reasons; each names what to check."""

    CONNECTING = "Connecting"
    SYNCING = "Syncing"
    CONNECTED = "Connected"
    ANSWERING = "APIServerAnswering"
    AUTHENTICATION_FAILED = "AuthenticationFailed"  # token/cert rejected or expired (401)
    FORBIDDEN = "Forbidden"  # RBAC on the member denies the dispatcher's identity (403)
    TLS_ERROR = "TLSError"  # CA mismatch, bad serving certificate
    TIMEOUT = "Timeout"  # no answer in time: firewall, overloaded apiserver
    CONNECTION_REFUSED = "ConnectionRefused"  # nothing listens: apiserver down, wrong address
    SERVER_ERROR = "ServerError"  # 5xx or an unexpected answer
    KUBECONFIG_INVALID = "KubeconfigInvalid"  # malformed, missing context, bad credentials
    SECRET_MISSING = "SecretMissing"  # the referenced Secret or its key does not exist
    DUPLICATE_CLUSTER = "DuplicateCluster"  # another member is the same cluster
    SPEC_INVALID = "SpecInvalid"  # the MemberCluster's spec cannot be used as written


# Reasons that say the server answered (so it is reachable) versus the network failed.
_ANSWERED = frozenset({Reason.AUTHENTICATION_FAILED, Reason.FORBIDDEN, Reason.SERVER_ERROR})
_NETWORK = frozenset({Reason.TLS_ERROR, Reason.TIMEOUT, Reason.CONNECTION_REFUSED})


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a member is not Ready: a reason and a message free of credentials."""

    reason: Reason
    message: str


@dataclass(frozen=True, kw_only=True)
class Health:
    """The health of one member at a point in time.

    ``reachable`` is None while unknown (never contacted, or no usable kubeconfig).
    ``first_loss`` is when the current failure streak began (None when healthy).
    """

    reachable: bool | None
    ready: bool
    reason: Reason
    message: str
    last_seen: datetime | None = None
    first_loss: datetime | None = None

    @property
    def reachable_reason(self) -> str:
        """Reason of the Reachable condition."""
        if self.reachable:
            return Reason.ANSWERING
        return self.reason


def duplicate(health: Health, *, of: str, cluster_id: str) -> Health:
    """The member is the same cluster as member ``of`` (registered twice): not Ready, so
    nothing is placed through it and its copies are ``of``'s."""
    return replace(health, ready=False, reason=Reason.DUPLICATE_CLUSTER,
                   message=f"the same cluster as member {of} (kube-system namespace uid "
                           f"{cluster_id}); unregister one of them")


def spec_invalid(health: Health, *, message: str, running: bool) -> Health:
    """The MemberCluster's spec is invalid (``message`` says which field): not Ready, so
    nothing new is placed through it. ``running``: a connection made from its last valid
    spec goes on (its copies are still mirrored; reachability is kept, so they are not
    failed over for an edit), until the spec is fixed or the object deleted."""
    kept = "; the last valid spec is still used for the copies already there" \
        if running else ""
    return replace(health, ready=False, reason=Reason.SPEC_INVALID,
                   message=f"{message}{kept}")


def initial() -> Health:
    """A member not contacted yet."""
    return Health(reachable=None, ready=False, reason=Reason.CONNECTING,
                  message="connecting to the member's apiserver")


def connected(health: Health, *, now: datetime, version: str) -> Health:
    """The server answered with valid credentials; caches are being filled."""
    return Health(reachable=True, ready=False, reason=Reason.SYNCING,
                  message=f"connected to Kubernetes {version}; listing nodes and pods",
                  last_seen=now, first_loss=None)


def synced(health: Health, *, now: datetime) -> Health:
    """Nodes and Pods are listed and watched: the member is Ready."""
    return Health(reachable=True, ready=True, reason=Reason.CONNECTED,
                  message="nodes and pods are watched", last_seen=now, first_loss=None)


def probed(health: Health, *, now: datetime) -> Health:
    """A probe succeeded: only ``last_seen`` moves."""
    return replace(health, last_seen=now)


def failed(health: Health, *, now: datetime, problem: Problem,
           unreachable_after: timedelta) -> Health:
    """A connect, probe or watch failed with ``problem``; keeps the first loss time."""
    first_loss = health.first_loss or now
    last_seen: datetime | None
    if problem.reason in _ANSWERED:
        reachable: bool | None = True
        last_seen = now
    elif problem.reason in _NETWORK:
        lost_for = now - first_loss
        was = health.reachable if health.reachable is not None else False
        reachable = was and lost_for < unreachable_after
        last_seen = health.last_seen
    else:
        reachable = None
        last_seen = health.last_seen
    return Health(reachable=reachable, ready=False, reason=problem.reason,
                  message=problem.message, last_seen=last_seen, first_loss=first_loss)


def expire(health: Health, *, now: datetime, unreachable_after: timedelta) -> Health:
    """Re-evaluate Reachable as time passes without an answer (no new outcome)."""
    deadline = unreachable_deadline(health, unreachable_after=unreachable_after)
    if deadline is not None and now >= deadline:
        return replace(health, reachable=False)
    return health


def unreachable_deadline(health: Health, *, unreachable_after: timedelta) -> datetime | None:
    """When ``expire`` will turn this health unreachable, or None if it never will."""
    if health.reachable and not health.ready and health.first_loss is not None \
            and health.reason in _NETWORK:
        return health.first_loss + unreachable_after
    return None


def classify(exc: BaseException) -> Problem:
    """The operator-facing reason for an exception raised while talking to a member.

    Messages come from ``dispatcher.kube`` errors, which never include request headers or
    kubeconfig content; anything else is reduced to its type name.
    """
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    if isinstance(exc, KubeconfigProblem):
        return Problem(Reason(exc.reason), text)
    if isinstance(exc, KubeconfigError):
        return Problem(Reason.KUBECONFIG_INVALID, text)
    if isinstance(exc, errors.Unauthorized):
        return Problem(Reason.AUTHENTICATION_FAILED, text)
    if isinstance(exc, errors.Forbidden):
        return Problem(Reason.FORBIDDEN, text)
    if isinstance(exc, errors.Unreachable):
        if "TLS" in text or "SSL" in text or "certificate" in text:
            return Problem(Reason.TLS_ERROR, text)
        if "timed out" in text or "Timeout" in text:
            return Problem(Reason.TIMEOUT, text)
        return Problem(Reason.CONNECTION_REFUSED, text)
    if isinstance(exc, TimeoutError):
        return Problem(Reason.TIMEOUT, "request timed out")
    if isinstance(exc, errors.KubeError):
        return Problem(Reason.SERVER_ERROR, text)
    return Problem(Reason.SERVER_ERROR, f"unexpected {type(exc).__name__}")
