"""Does the hub run workload controllers? Evidence read from the hub, and what it means for
the configured ``hub.mode``.

A dedicated hub must run none: there, a Job or Deployment the dispatcher copies to a member
would also run on the hub. Nothing in the API names the controllers a kube-controller-manager
runs, but real clusters leave traces the dispatcher can read without extra rights beyond
``list`` on them (``run --check`` uses the caller's kubeconfig):

- ``kube-system`` ServiceAccounts named after workload controllers (``job-controller``,
  ``replicaset-controller``, ...): kube-controller-manager creates one per controller it
  starts when it runs with ``--use-service-account-credentials`` (kubeadm, managed clusters);
- Nodes: a hub with nodes can run pods at all;
- webhook configurations of workload operators (JobSet, LWS, KubeRay, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import NODES, ResourceRef

__all__ = ["HubEvidence", "mode_warnings", "read_evidence"]

_CONTROLLERS = ("job-controller", "replicaset-controller", "deployment-controller",
                "statefulset-controller", "cronjob-controller")
_ACCOUNTS = ResourceRef(group="", version="v1", kind="ServiceAccount",
                        plural="serviceaccounts", namespaced=True)
_WEBHOOKS = tuple(ResourceRef(group="admissionregistration.k8s.io", version="v1", kind=kind,
                              plural=plural, namespaced=False)
                  for kind, plural in (("MutatingWebhookConfiguration",
                                        "mutatingwebhookconfigurations"),
                                       ("ValidatingWebhookConfiguration",
                                        "validatingwebhookconfigurations")))
_OPERATORS = ("jobset", "lws", "leaderworkerset", "kuberay", "ray", "training-operator",
              "kubeflow", "mpi-operator", "kserve", "knative", "kueue")


@dataclass(frozen=True, kw_only=True)
class HubEvidence:
    """What was found (empty tuples: nothing, or not readable: see ``unreadable``)."""

    controllers: tuple[str, ...] = ()
    nodes: int = 0
    operator_webhooks: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()


async def _names(client: KubeClient, path: str) -> list[str] | None:
    try:
        body = await client.request("GET", path)
    except KubeError:
        return None
    return [str((i.get("metadata") or {}).get("name") or "") for i in body.get("items") or ()]


async def read_evidence(client: KubeClient, *, own_webhook: str) -> HubEvidence:
    """Read the traces listed in the module docstring (each one skipped if forbidden)."""
    unreadable = []
    accounts = await _names(client, _ACCOUNTS.collection("kube-system"))
    if accounts is None:
        unreadable.append("kube-system serviceaccounts")
    nodes = await _names(client, NODES.collection())
    if nodes is None:
        unreadable.append("nodes")
    hooks: list[str] = []
    for ref in _WEBHOOKS:
        found = await _names(client, ref.collection())
        if found is None:
            unreadable.append(ref.plural)
        hooks += [h for h in found or () if h != own_webhook
                  and any(op in h.lower() for op in _OPERATORS)]
    return HubEvidence(controllers=tuple(a for a in accounts or () if a in _CONTROLLERS),
                       nodes=len(nodes or ()), operator_webhooks=tuple(sorted(set(hooks))),
                       unreadable=tuple(unreadable))


def mode_warnings(mode: str, evidence: HubEvidence) -> list[str]:
    """What an operator must hear about ``mode`` given ``evidence`` (pure)."""
    if mode != "dedicated":
        return []
    found = []
    if evidence.controllers:
        found.append(f"workload controllers have run there ({', '.join(evidence.controllers)}"
                     f" ServiceAccounts in kube-system)")
    if evidence.operator_webhooks:
        found.append(f"workload operators are installed ({', '.join(evidence.operator_webhooks)})")
    if evidence.nodes and found:
        found.append(f"it has {evidence.nodes} node(s) to run their pods on")
    if not found:
        return []
    return [f"hub.mode is dedicated, but the hub looks shared: {'; '.join(found)}. Every "
            f"dispatched workload of those kinds would also run on the hub. Set hub.mode: "
            f"shared (the webhook then holds them there), or run a dedicated hub "
            f"(docs/operator-guide.md, \"Hub topologies\")"]
