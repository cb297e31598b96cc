"""Pod Security admission's namespace labels, read the way kube-apiserver reads them.

A hub namespace's ``pod-security.kubernetes.io/*`` labels are the hub operator's word on
what that tenant's pods may do. Workload objects (Jobs, JobSets, ...) are admitted on the
hub whatever their pod templates say: only the member, where the pods are created, can
enforce that word, so the member namespace must be at least as strict. This module is the
one place that says what "at least as strict" means; every path that makes or checks a
member namespace (``control/submit``, ``fleet/identity``, ``clusters add``) uses it.

Semantics follow kube-apiserver's PodSecurity plugin
(``k8s.io/pod-security-admission/api``, ``PolicyToEvaluate``): per mode (enforce, audit,
warn) a level (privileged < baseline < restricted) and a version (``v1.N`` or ``latest``,
latest being newest). An absent label is the cluster's default, taken here as the built-in
default ``privileged`` (a member whose AdmissionConfiguration sets a stricter default looks
weaker than it is: label the namespace, or opt out). An unparseable enforce level is
``restricted`` (the plugin fails closed), unparseable audit/warn levels are ``privileged``
(it fails open), an unparseable version is ``latest``.

A policy is never weaker than another when its level is at least the other's and, unless
the other is ``privileged`` (no checks, so no version), its version is not older: a newer
version may add a check (the baseline of v1.34 refuses host probes that of v1.25 lets
through), so ``restricted:v1.25`` is *not* at least ``baseline:latest`` (conservative:
most later version changes relax a check, for user namespaces or new sysctls). The member
labels are the least upper bound of their inputs in that order, per mode.

A label's version is read by the member's own plugin, which knows no check newer than its
Kubernetes minor: ``baseline:latest`` on a 1.33 member is 1.33's baseline. ``TIGHTENED``
lists the checks added since v1.25 (pod-security-admission v0.37.2, ``policy/check_*.go``:
every other versioned check since relaxes); ``unenforced`` runs on a pod spec the ones a
member's minor lacks, so that what the member cannot refuse the dispatcher does.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LEVELS", "MODES", "PREFIX", "TIGHTENED", "Policy", "Tightening", "describe",
           "lacking", "member_labels", "policy", "required", "unenforced", "weaker"]

PREFIX = "pod-security.kubernetes.io/"
LEVELS: tuple[str, ...] = ("privileged", "baseline", "restricted")
MODES: tuple[str, ...] = ("enforce", "audit", "warn")
_VERSION = re.compile(r"v1\.(0|[1-9][0-9]*)")


@dataclass(frozen=True, order=False)
class Policy:
    """One mode's level and version; ``minor`` None is ``latest``."""

    level: str
    minor: int | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown Pod Security level {self.level!r}")

    @property
    def rank(self) -> int:
        return LEVELS.index(self.level)

    @property
    def version(self) -> str:
        return "latest" if self.minor is None else f"v1.{self.minor}"

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"

    def covers(self, other: Policy) -> bool:
        """Whether this policy refuses at least every pod ``other`` refuses."""
        if other.level == "privileged":
            return True
        return self.rank >= other.rank and not _older(self.minor, other.minor)


PRIVILEGED = Policy("privileged")


def _older(a: int | None, b: int | None) -> bool:
    """Version ``a`` is older than ``b`` (None: latest, newer than any)."""
    return a is not None and (b is None or a < b)


def _parse_version(value: str | None) -> int | None:
    if value is None or value == "latest":
        return None
    match = _VERSION.fullmatch(value)
    return int(match.group(1)) if match else None  # unparseable: latest, as the plugin


def policy(labels: Mapping[str, str] | None) -> dict[str, Policy]:
    """Each mode's policy as the PodSecurity plugin evaluates ``labels`` (a namespace's),
    the cluster default being ``privileged:latest``."""
    labels = labels or {}
    out: dict[str, Policy] = {}
    for mode in MODES:
        raw = labels.get(f"{PREFIX}{mode}")
        if raw is None:
            level = "privileged"
        elif raw in LEVELS:
            level = str(raw)
        else:
            level = "restricted" if mode == "enforce" else "privileged"
        out[mode] = Policy(level, _parse_version(labels.get(f"{PREFIX}{mode}-version")))
    return out


def _join(policies: Iterable[Policy]) -> Policy:
    """The weakest policy covering every one of ``policies``: the highest level and, over
    the non-privileged ones (a privileged policy checks nothing, whatever its version), the
    newest version."""
    chosen = list(policies)
    level = max(chosen, key=lambda p: p.rank).level
    checking = [p.minor for p in chosen if p.level != "privileged"]
    minor = None if not checking or None in checking else max(m for m in checking
                                                              if m is not None)
    return Policy(level, minor)


def member_labels(hub_labels: Mapping[str, str] | None, *, floor: str) -> dict[str, str]:
    """The Pod Security labels of a member namespace made for a hub namespace's workloads.

    ``enforce``: the hub's, never below ``floor`` (whose version is ``latest``). ``audit``
    and ``warn``: the hub's, never below the enforce level chosen (so what the member
    refuses is also what it warns about and audits). A mode that ends ``privileged`` gets
    no label: the member's own default applies, which is never weaker than privileged.
    Every label is a valid value, so the member's PodSecurity plugin reads back exactly
    this (``policy(member_labels(h, floor=f))`` covers ``policy(h)`` in every mode).
    """
    hub = policy(hub_labels)
    enforce = _join([hub["enforce"], Policy(floor)])
    chosen = {"enforce": enforce, "audit": _join([hub["audit"], enforce]),
              "warn": _join([hub["warn"], enforce])}
    out: dict[str, str] = {}
    for mode, value in chosen.items():
        if value.level == "privileged":
            continue
        out[f"{PREFIX}{mode}"] = value.level
        out[f"{PREFIX}{mode}-version"] = value.version
    return out


def weaker(member: Mapping[str, str] | None, hub: Mapping[str, str] | None
           ) -> tuple[Policy, Policy] | None:
    """(member's enforce, hub's enforce) when a member namespace with labels ``member``
    would admit pods a hub namespace with labels ``hub`` refuses; None when it would not."""
    theirs, ours = policy(member)["enforce"], policy(hub)["enforce"]
    return None if theirs.covers(ours) else (theirs, ours)


def describe(labels: Mapping[str, str] | None) -> str:
    """``restricted:latest``, or ``privileged:latest (no label)`` when enforce is unset."""
    text = str(policy(labels)["enforce"])
    return text if f"{PREFIX}enforce" in (labels or {}) else f"{text} (no label)"


def required(hub_labels: Mapping[str, str] | None, *, floor: str) -> Policy:
    """The enforce policy a member must apply to a hub namespace's pods: the hub's, never
    below ``floor`` (as ``member_labels`` writes it)."""
    return _join([policy(hub_labels)["enforce"], Policy(floor)])


@dataclass(frozen=True)
class Tightening:
    """A check the plugin added at ``minor`` for ``level`` (and the levels above it);
    ``find`` names what a pod spec does that it refuses (empty: nothing)."""

    check: str
    level: str
    minor: int
    find: Callable[[Mapping[str, Any]], list[str]]


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or ():
            if isinstance(container, Mapping):
                yield container


def _hosts(handler: Any) -> list[str]:
    """The ``host`` of a probe's or lifecycle handler's httpGet/tcpSocket, when set."""
    if not isinstance(handler, Mapping):
        return []
    out = []
    for action in ("httpGet", "tcpSocket"):
        found = handler.get(action)
        if isinstance(found, Mapping) and found.get("host"):
            out.append(str(found["host"]))
    return out


def _host_probes(spec: Mapping[str, Any]) -> list[str]:
    """The 1.34 baseline check ``hostProbesAndHostLifecycle``: probes and postStart/preStop
    handlers must not set ``host`` (any container list)."""
    out = []
    for container in _containers(spec):
        lifecycle = container.get("lifecycle")
        handlers = [container.get(p) for p in ("livenessProbe", "readinessProbe",
                                                "startupProbe")]
        if isinstance(lifecycle, Mapping):
            handlers += [lifecycle.get("postStart"), lifecycle.get("preStop")]
        hosts = sorted({h for handler in handlers for h in _hosts(handler)})
        if hosts:
            out.append(f"container {container.get('name')!r} uses probe or lifecycle "
                       f"host(s) {', '.join(repr(h) for h in hosts)}")
    return out


TIGHTENED: tuple[Tightening, ...] = (
    Tightening("hostProbesAndHostLifecycle", "baseline", 34, _host_probes),
)


def lacking(wanted: Policy, member_minor: int | None) -> list[Tightening]:
    """The checks ``wanted`` applies that a member of Kubernetes minor ``member_minor``
    knows nothing of (none when the minor is not known)."""
    if member_minor is None or wanted.level == "privileged":
        return []
    return [t for t in TIGHTENED
            if LEVELS.index(t.level) <= wanted.rank and member_minor < t.minor
            and (wanted.minor is None or t.minor <= wanted.minor)]


def unenforced(wanted: Policy, member_minor: int | None, spec: Mapping[str, Any]
               ) -> list[str]:
    """What pod ``spec`` does that ``wanted`` refuses and a member of ``member_minor``
    would admit: one line per lacking check it fails (``check (1.N+): detail``)."""
    return [f"{t.check} (1.{t.minor}+): {'; '.join(found)}"
            for t in lacking(wanted, member_minor) if (found := t.find(spec))]
