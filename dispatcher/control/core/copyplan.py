"""The member copy as a plan: everything a submit or an update writes, decided on plain data.

Fed by the workload, its resolution (the one placing used), the member's gang mechanism,
the decision's topology domains and planned nodes; feeds the member writer
(``control.submit``), which only sends what the plan holds, and ``dispatcher explain
--show-copy``, which prints it. The plan is the copy body (stamped, pod mutations applied,
in the member's queue, kept to the chosen domains and preferring the planned nodes, its
gangs joined), the gang objects to create before it
(``control.core.gangsched``), the pods to dry-run against the member's admission
(``control.core.dryrun``) and the namespace it goes to. A copy that may not or cannot be
built is a ``Rejection`` instead: a pod template setting a refused scheduling field
(``control.core.podpolicy``, the rule placing applied) or a field the member's Kubernetes
minor would drop (``control.core.skew``), a pod the hub namespace's Pod Security level
refuses by a check the member's minor lacks (``kube.podsecurity.unenforced``), a workload
that cannot be resolved, a mutation the definition cannot write.

No I/O here. ``locate`` evaluates the definition's path expressions: in-process for a
trusted definition, in the bounded workers for a tenant's (the shell runs the whole plan on
the evaluator's threads then: ``control.planner``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.control.core import dryrun, gangsched, skew
from dispatcher.control.core.copies import PodMutations, Rejection, build_copy
from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.podpolicy import PodFieldPolicy, refusal
from dispatcher.control.core.topology import Domains
from dispatcher.fleet.queueing import QUEUE_LABEL, Queueing
from dispatcher.kube import podsecurity
from dispatcher.kube.gangapis import NONE, Mechanism
from dispatcher.placement.model import GangDomain
from dispatcher.workloads.bounded import (
    DefinitionQuarantined,
    EvaluationUnavailable,
    ObjectQuarantined,
)
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.gangs import gang_components
from dispatcher.workloads.model import Definition
from dispatcher.workloads.mutate import PodTemplate, pod_templates
from dispatcher.workloads.paths import Locator, in_process
from dispatcher.workloads.resolve import Resolution

__all__ = ["CopyPlan", "PlanInput", "namespace_of", "plan"]


def namespace_of(workload: Mapping[str, Any]) -> str:
    """The namespace the copy goes to: the hub object's (``default`` when unset, as the
    apiserver reads a namespaced object without one)."""
    return str((workload.get("metadata") or {}).get("namespace") or "default")


@dataclass(frozen=True, kw_only=True)
class PlanInput:
    """What a plan is computed from. ``resolution``: the workload's (an error when it
    cannot be resolved now); ``mechanism``: the member gang mechanism to join (a submit:
    the member's; an update: the one the copy was created with); ``queueing``: the queue
    label it carries (``fleet.queueing``); ``dry_run``: compute
    the pods for the member's admission dry-run (a submit with ``submit.admissionCheck``)."""

    uid: str
    member: str
    workload: Mapping[str, Any]
    definition: Definition | None
    resolution: Resolution | WorkloadError
    hub_id: str
    mechanism: Mechanism = NONE
    queueing: Queueing = field(default_factory=Queueing)
    """How the member queues batch work (its snapshot's: system resolved)."""
    domains: tuple[GangDomain, ...] = ()
    nodes: tuple[str, ...] = ()
    """The decision's planned nodes: the copy's GPU pods prefer them
    (``control.core.topology``); empty: no preference."""
    mutations: PodMutations = field(default_factory=PodMutations)
    pod_fields: PodFieldPolicy = field(default_factory=PodFieldPolicy)
    dry_run: bool = True
    member_version: str | None = None
    """The member's Kubernetes version (``/version``): pod fields it does not know refuse
    the copy there (``control.core.skew``). None: not known, nothing refused."""
    pod_security: podsecurity.Policy | None = None
    """The enforce policy the hub namespace asks of the member (``podsecurity.required``),
    read only for a member whose minor lacks one of its checks; None: nothing to check."""


@dataclass(frozen=True, kw_only=True)
class CopyPlan:
    """The copy of ``uid`` for ``member``: ``body`` to create (or whose spec an update
    writes), ``gangs`` (objects created before it, joins, what was skipped), ``pods`` to
    dry-run first, and the ``namespace``."""

    uid: str
    member: str
    namespace: str
    body: Mapping[str, Any]
    gangs: gangsched.GangPlan
    pods: tuple[Mapping[str, Any], ...] = ()

    @property
    def api_version(self) -> str:
        return str(self.body["apiVersion"])

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    def to_dict(self) -> dict[str, Any]:
        """What ``explain --show-copy -o json|yaml`` prints."""
        return {"member": self.member, "namespace": self.namespace,
                "gangMechanism": self.gangs.mechanism,
                "memberGangMechanism": self.gangs.member_mechanism,
                "object": dict(self.body), "gangObjects": [dict(o) for o in self.gangs.objects],
                "gangsSkipped": list(self.gangs.skipped), "gangNotes": list(self.gangs.notes),
                "dryRunPods": len(self.pods)}


def plan(given: PlanInput, *, locate: Locator = in_process) -> CopyPlan | Rejection:
    """The copy to write for ``given``, or the ``Rejection`` saying why none may be.

    A busy evaluator (``EvaluationUnavailable``) and a definition quarantined meanwhile
    (``DefinitionQuarantined``) raise: neither is a verdict on this copy."""
    namespace = namespace_of(given.workload)
    resolution = given.resolution
    if isinstance(resolution, WorkloadError):
        return Rejection.of(given.member, status=0, reason=PendingReason.POD_TEMPLATE_REFUSED,
                            message="pod templates cannot be checked: "
                                    f"{str(resolution).splitlines()[0][:500]}")
    refused = refusal(resolution.scheduling, namespace=namespace, policy=given.pod_fields)
    if refused is not None:
        return Rejection.of(given.member, status=0, reason=PendingReason.POD_TEMPLATE_REFUSED,
                            message=refused)
    try:
        body, gang_plan = _joined(given, resolution, locate=locate)
        templates = pod_templates(body, given.definition, built=resolution.built,
                                  locate=locate) \
            if given.definition is not None and (given.dry_run or given.member_version) \
            else []
        unknown = skew.unknown_fields(templates, given.member_version)
        if unknown:
            return Rejection.of(given.member, status=0, reason="FieldUnknownToMember",
                                message=f"Kubernetes {given.member_version} would drop "
                                        f"pod field(s) {'; '.join(unknown)}")
        unenforced = _unenforced(given, templates)
        if unenforced is not None:
            return unenforced
        pods = dryrun.dry_run_pods(templates if given.dry_run else [], namespace=namespace)
    except (EvaluationUnavailable, DefinitionQuarantined):
        raise
    except WorkloadError as exc:
        reason = "Quarantined" if isinstance(exc, ObjectQuarantined) else "CopyInvalid"
        return Rejection.of(given.member, status=0, reason=reason, message=str(exc))
    return CopyPlan(uid=given.uid, member=given.member, namespace=namespace, body=body,
                    gangs=gang_plan, pods=tuple(pods))


def _unenforced(given: PlanInput, templates: list[PodTemplate]) -> Rejection | None:
    """A Rejection when a template does what the hub namespace's Pod Security level refuses
    by a check the member's Kubernetes minor does not have (its plugin would admit it)."""
    wanted = given.pod_security
    if wanted is None:
        return None
    at = skew.minor(given.member_version)
    failed = [f"{t.component}: {line}" for t in templates
              for line in podsecurity.unenforced(wanted, at, t.spec)]
    if not failed:
        return None
    checks = ", ".join(t.check for t in podsecurity.lacking(wanted, at))
    return Rejection.of(given.member, status=0, reason="PodSecurityUnenforced",
                        message=f"hub namespace {namespace_of(given.workload)} enforces Pod "
                                f"Security {wanted}, and Kubernetes {given.member_version} "
                                f"on {given.member} lacks its check(s) {checks}: its pods "
                                f"would be admitted there: {'; '.join(failed)}")


def _queued(body: dict[str, Any], queueing: Queueing) -> dict[str, Any]:
    """The copy with the queue label the member expects (``Queueing.label``): the declared
    LocalQueue, the hub's own value on a Kueue member, never the hub's elsewhere."""
    meta = body["metadata"]
    labels = dict(meta.get("labels") or {})
    wanted = queueing.label(namespace_of(body), labels.pop(QUEUE_LABEL, None))
    if wanted:
        labels[QUEUE_LABEL] = wanted
    meta["labels"] = labels
    return body


def _joined(given: PlanInput, resolution: Resolution, *, locate: Locator
            ) -> tuple[dict[str, Any], gangsched.GangPlan]:
    """The copy, kept to the domains and preferring the planned nodes, with the
    resolution's gangs joined to the mechanism (``gangsched``: its instances' creation
    stages split them)."""
    workload, definition = given.workload, given.definition
    body = _queued(build_copy(workload, hub_id=given.hub_id, definition=definition,
                              mutations=given.mutations, locate=locate), given.queueing)
    if (given.domains or given.nodes) and definition is not None:
        body = Domains.of(given.domains, resolution, nodes=given.nodes).apply(
            body, definition, locate=locate)
    joined = given.mechanism != NONE and definition is not None
    units = gang_components(definition, default_name=str(
        workload["metadata"].get("name") or definition.root.name)) \
        if joined and definition is not None else {}
    gang_plan = gangsched.plan(
        mechanism=given.mechanism, definition=definition,
        gangs=resolution.demand.gangs if joined else (), units=units, copy=body,
        hub_id=given.hub_id,
        instances=[i for c in resolution.components for i in c.instances] if joined else ())
    return gangsched.join(body, definition, gang_plan, locate=locate), gang_plan
