"""Control-loop settings: what ``dispatcher.config`` builds from the config file.

Every field has a safe default; durations are seconds. Field docstrings say what each knob
does; the config file's keys are the camelCase of these names (see ``config/default.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.control.core.copies import PodMutations
from dispatcher.control.core.decide import Rules
from dispatcher.control.core.podpolicy import PodFieldPolicy
from dispatcher.control.core.priority import PriorityPolicy
from dispatcher.kube.podsecurity import LEVELS

__all__ = ["HUB_MODES", "MODES", "MULTIKUEUE_DISPATCHER", "ControlSettings", "LeaderSettings",
           "ServerSettings", "WebhookSettings"]

HUB_MODES = ("dedicated", "shared")


@dataclass(frozen=True, kw_only=True)
class LeaderSettings:
    """Leader election on a coordination.k8s.io Lease on the hub."""

    enabled: bool = True
    """Off only for a single replica you are sure of (tests, local runs)."""
    namespace: str = "dispatcher-system"
    """Namespace of the Lease."""
    name: str = "dispatcher"
    """Lease name; replicas sharing it elect one leader."""
    lease_duration_s: float = 15.0
    """How long a Lease is honoured without renewal (failover time after a crash)."""
    renew_every_s: float = 5.0
    """How often the leader renews (must be well below the duration)."""


MODES = ("dispatch", "multikueue-dispatcher")
MULTIKUEUE_DISPATCHER = "multikueue-dispatcher"


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """The /metrics, /healthz and /readyz HTTP server."""

    address: str = "127.0.0.1"
    """Listen address: loopback unless set (in a pod, deploy/ sets 0.0.0.0: the probes and
    Prometheus reach the pod's IP, the NetworkPolicy fences who may)."""
    port: int = 8080
    """Listen port (0: no server)."""
    fleet_view: bool = False
    """Also serve the read-only fleet view (``/fleet``: members, queue, recent decisions)
    on this port. Off by default: it shows tenants' workload names and reasons to anyone
    who reaches the port, as ``/metrics`` shows member names."""


@dataclass(frozen=True, kw_only=True)
class WebhookSettings:
    """The mutating admission webhook that holds workloads on a shared hub
    (``control/core/hubhold.py``; served only with ``hub.mode: shared``)."""

    address: str = "127.0.0.1"
    """Listen address of the HTTPS server (in a pod, deploy/ sets 0.0.0.0)."""
    port: int = 9443
    """Listen port."""
    cert_dir: str | None = None
    """``tls.crt`` and ``tls.key`` read from here (cert-manager, a mounted Secret); None:
    self-managed (a CA and serving certificate kept in ``secret_name``)."""
    secret_name: str = "dispatcher-webhook-cert"
    """Self-managed certificates: the Secret (in ``leaderElection.namespace``) holding them."""
    configuration: str = "dispatcher"
    """The MutatingWebhookConfiguration the controller keeps current (rules, caBundle)."""
    service_name: str = "dispatcher-webhook"
    """How the hub's apiserver reaches the webhook: this Service in the controller's namespace."""
    url: str | None = None
    """Instead of the Service: a URL (a controller running outside the hub)."""
    hosts: tuple[str, ...] = ()
    """Extra names or IPs the self-managed serving certificate is valid for."""
    drain_s: float = 5.0
    """A stopping replica keeps serving this long, unready, so the Service stops sending it
    calls before it closes (a call refused meanwhile is a refused create)."""


@dataclass(frozen=True, kw_only=True)
class ControlSettings:
    """How the control loop watches, places, submits and fails over."""

    mode: str = "dispatch"
    """``dispatch`` (copies of our own, a Dispatch per workload) or
    ``multikueue-dispatcher`` (``MULTIKUEUE_DISPATCHER``: the hub's Kueue MultiKueue makes
    the copies, we nominate where: ``control.nominator``)."""
    multikueue_admit_within_s: float = 300.0
    """MultiKueue dispatcher: a nominee that has not admitted a copy within this long gets
    another worker added beside it (0: never)."""
    hub_id: str = "hub"
    """This hub's id, stamped on every member copy as ``dispatcher.io/origin``. Must be
    unique per hub sharing a member, and stable: copies are owned by it."""
    namespaces: tuple[str, ...] = ()
    """Hub namespaces to watch (empty: all)."""
    label_selector: str = ""
    """Only hub workloads matching this label selector are dispatched."""
    default_policy: str = "most-free"
    """Placement policy when a workload has no ``dispatcher.io/policy`` annotation."""
    create_namespaces: bool = False
    """Create the workload's namespace on the member when it does not exist (with the hub
    namespace's Pod Security labels). Off: only namespaces the member's operator prepared
    are used, and a missing one is a rejection."""
    pod_security_floor: str = "baseline"
    """The weakest Pod Security level of a namespace the dispatcher creates on a member."""
    weaker_member_namespaces: str = "refuse"
    """``refuse``: a member namespace that exists with a weaker Pod Security ``enforce``
    level than its hub namespace (or none) gets no copy, the Dispatch says why;
    ``allow``: the member's namespace is taken as it is (``control/namespaces``)."""
    admission_check: bool = True
    """Dry-run each pod template as a Pod on the member before creating the copy, so a
    pod the member would not admit is a rejection with its reason."""
    prefer_planned_nodes: bool = True
    """The copy's GPU pods prefer (soft node affinity) the nodes placement planned and
    reserved for them, so the member's scheduler (its default scoring blind to GPUs) does
    not scatter them over nodes planned for others (``control.core.topology``)."""
    pod_mutations: PodMutations = field(default_factory=PodMutations)
    """Pod-template changes applied to every copy (labels, scheduler, ...)."""
    pod_fields: PodFieldPolicy = field(default_factory=PodFieldPolicy)
    """Which scheduling fields a tenant's pod template may set (``submit.podTemplate
    .allowedPriorityClasses``, ``allowedSchedulers``, ``byNamespace``); ``nodeName`` and
    ``priority`` never. Read it through ``pod_policy`` (the forced values added)."""
    backfill_limit: int = 50
    """How many later workloads of its namespace may be placed ahead of a waiting one before
    it blocks them (other namespaces are never blocked by it)."""
    claim_after_s: float = 300.0
    """A workload waiting this long claims a member: nothing behind it, of any namespace,
    is placed there until it fits (``queue.claimAfter``; 0: never, and a workload at its
    backfill limit then holds its whole namespace instead of one member for it)."""
    priority: PriorityPolicy = field(default_factory=PriorityPolicy)
    """How ``dispatcher.io/priority`` is honoured (``queue.priority``)."""
    reservation_ttl_s: float = 300.0
    """GPUs of a decision stay reserved this long unless the pods show up first."""
    rules: Rules = field(default_factory=Rules)
    """Failover and stuck detection (``failover.*``)."""
    sweep_interval_s: float = 60.0
    """How often member copies whose hub object is gone (or moved) are deleted."""
    workers: int = 64
    """Workloads reconciled at the same time."""
    record_events: bool = True
    """Write a Kubernetes Event on the hub workload at every transition."""
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    log_level: str = "info"
    """Log level: debug, info, warning, error."""
    hub_mode: str = "dedicated"
    """``dedicated``: the hub runs no workload controllers (Karmada/Nova style); ``shared``:
    the hub's controllers and operators run, and every dispatched workload is held there by
    the webhook (``webhook``)."""
    webhook: WebhookSettings = field(default_factory=WebhookSettings)

    @property
    def pod_policy(self) -> PodFieldPolicy:
        """``pod_fields`` with the values ``pod_mutations`` forces on every pod (a tenant
        value equal to a forced one is allowed, any other refused)."""
        return self.pod_fields.with_forced(
            priority_class=self.pod_mutations.priority_class_name,
            scheduler=self.pod_mutations.scheduler_name)

    def __post_init__(self) -> None:
        if not self.hub_id:
            raise ValueError("hubId must not be empty")
        if self.pod_security_floor not in LEVELS:
            raise ValueError(f"podSecurityFloor must be one of {', '.join(LEVELS)}, got "
                             f"{self.pod_security_floor!r}")
        if self.weaker_member_namespaces not in ("refuse", "allow"):
            raise ValueError(f"weakerMemberNamespaces must be refuse or allow, got "
                             f"{self.weaker_member_namespaces!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.backfill_limit < 0:
            raise ValueError(f"queue.backfillLimit must be >= 0, got {self.backfill_limit}")
        if self.claim_after_s < 0:
            raise ValueError(f"queue.claimAfter must be >= 0, got {self.claim_after_s}")
        if self.reservation_ttl_s <= 0:
            raise ValueError("reservations.ttl must be > 0")
        if self.rules.max_attempts < 1:
            raise ValueError("failover.maxAttempts must be >= 1")
        if self.rules.pending_refresh_s < 0:
            raise ValueError("queue.pendingRefresh must be >= 0")
        if self.leader.renew_every_s >= self.leader.lease_duration_s:
            raise ValueError("leaderElection.renewEvery must be below leaseDuration")
