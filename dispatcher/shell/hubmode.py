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

__all__ = ["HubEvidence", "hub_warnings", "mode_warnings", "read_evidence"]

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
    nodes: bool = False  # at least one Node
    operator_webhooks: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()


async def _names(client: KubeClient, path: str, *, limit: int = 0) -> list[str] | None:
    try:
        body = await client.request("GET", path,
                                    query=[("limit", str(limit))] if limit else ())
    except KubeError:
        return None
    return [str((i.get("metadata") or {}).get("name") or "") for i in body.get("items") or ()]


async def read_evidence(client: KubeClient, *, own_webhook: str) -> HubEvidence:
    """Read the traces listed in the module docstring (each one skipped if forbidden)."""
    unreadable = []
    accounts = await _names(client, _ACCOUNTS.collection("kube-system"))
    if accounts is None:
        unreadable.append("kube-system serviceaccounts")
    nodes = await _names(client, NODES.collection(), limit=1)  # whether any, not how many
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
                       nodes=bool(nodes), operator_webhooks=tuple(sorted(set(hooks))),
                       unreadable=tuple(unreadable))


async def hub_warnings(client: KubeClient, *, mode: str, own_webhook: str) -> list[str]:
    """``mode_warnings`` for the hub behind ``client``; nothing is read for a shared hub
    (there is nothing to warn about)."""
    if mode != "dedicated":
        return []
    return mode_warnings(mode, await read_evidence(client, own_webhook=own_webhook))


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
        found.append("it has nodes to run their pods on")
    if not found:
        return []
    return [f"hub.mode is dedicated, but the hub looks shared: {'; '.join(found)}. Every "
            f"dispatched workload of those kinds would also run on the hub. Set hub.mode: "
            f"shared (the webhook then holds them there), or run a dedicated hub "
            f"(docs/operator-guide.md, \"Hub topologies\")"]
