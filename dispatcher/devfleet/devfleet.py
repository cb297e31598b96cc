"""The dev fleet as one operation: build binaries, start control planes, provision them.

Used by ``dispatcher dev up``, the pytest fixtures and the dispatch benchmark, so they all
get the same hub + members. Two profiles:

- **light** (``real=False``, the default here): one kube-apiserver per cluster, Nodes created
  Ready; nothing schedules or runs pods, so tests can patch member objects by hand.
- **real** (``real=True``, what ``dispatcher dev up`` starts unless ``--light``): each member
  also runs kube-controller-manager, kube-scheduler and kwok, so Jobs get pods, pods get bound
  to nodes of the right GPU product, run and (for Jobs) succeed, and the workload operators
  (JobSet, ...: ``binaries.OPERATORS``) with their webhooks; the hub and members get those
  operators' real CRDs. The hub never runs any of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from dispatcher.devfleet import operators, provision
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import JOB_SECONDS, ControlPlanes, FleetState
from dispatcher.fleet.fleetfile import FleetSpec

__all__ = ["HUB", "default_root", "down", "up"]

HUB = "hub"


def default_root() -> Path:
    """State directory of ``dispatcher dev``: ``$DISPATCHER_DEVFLEET`` or a per-user cache."""
    override = os.environ.get("DISPATCHER_DEVFLEET")
    return Path(override) if override else Path.home() / ".cache" / "dispatcher" / "devfleet"


def up(*, root: Path, fleet: FleetSpec, real: bool = False,
       job_seconds: float = JOB_SECONDS) -> FleetState:
    """Start (or reuse) a hub plus one apiserver per fleet member, provisioned.

    ``real`` gives every member kube-controller-manager, kube-scheduler and kwok, and returns
    once their Nodes are Ready; ``job_seconds`` is then how long a Job's pod runs. Safe to
    call twice: a running healthy fleet of the same profile is reused and provisioning is
    idempotent.
    """
    planes = ControlPlanes(root=root, binaries=ensure_binaries(members=real),
                           job_seconds=job_seconds)
    members = [m.name for m in fleet.members]
    state = planes.up(names=[HUB, *members], real=members if real else ())
    real_crds = operators.hub_crds(planes.binaries.operators) if real else []
    provision.provision_hub(state.cluster(HUB).rest(), real_crds=real_crds)
    for member in fleet.members:
        provision.provision_member(state.cluster(member.name).rest(), member, real=real,
                                   real_crds=real_crds)
    if real:
        for member in fleet.members:
            provision.wait_nodes_ready(state.cluster(member.name).rest(), member)
    return state


def down(*, root: Path) -> None:
    """Stop everything started under ``root`` and remove its state (builds nothing)."""
    ControlPlanes(root=root, binaries=None).down()
