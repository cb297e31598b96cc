"""The dev fleet as one operation: build binaries, start control planes, provision them.

Used by ``dispatcher dev up``, the pytest fixtures and the dispatch benchmark, so they all
get the same hub + members. Two member profiles:

- **light** (``real=False``, the default here): one kube-apiserver per member, Nodes created
  Ready; nothing schedules or runs pods, so tests can patch member objects by hand.
- **real** (``real=True``, what ``dispatcher dev up`` starts unless ``--light``): each member
  also runs kube-controller-manager, kube-scheduler and kwok, so Jobs get pods, pods get bound
  to nodes of the right GPU product, run and (for Jobs) succeed, and the workload operators
  (JobSet, ...: ``binaries.OPERATORS``) with their webhooks; the hub and members get those
  operators' real CRDs.

And two hub modes (``hub=``, ``HUB_MODES``):

- **dedicated** (the default, with either member profile): a hub of intents, as Karmada and
  Elotl Nova run it: kube-apiserver and a kube-controller-manager limited to
  ``controlplane.DEDICATED_CONTROLLERS``, so namespace deletion cascades and the garbage
  collector removes dependents of deleted owners, but no workload controller, scheduler,
  kwok, operator or Node: a Job created there gets no pod and no status from the hub.
- **shared** (needs real members): the hub is a full cluster like a real member, all
  controllers, kube-scheduler, kwok with the fleet file's ``hub`` Nodes, and the same
  operators with their webhooks, as when the dispatcher runs on a normal cluster that
  also runs workloads (MultiKueue's manager cluster). The dispatcher's own webhook is not
  registered here: the dispatcher registers it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, get_args

from dispatcher.devfleet import kueue as kueue_run
from dispatcher.devfleet import memberkueue, multikueue, operators, provision
from dispatcher.devfleet.binaries import OperatorBinary, ensure_binaries, ensure_peers
from dispatcher.devfleet.controlplane import JOB_SECONDS, ControlPlanes, FleetState, free_port
from dispatcher.devfleet.state import ClusterInfo
from dispatcher.fleet.fleetfile import HUB_NAME, FleetSpec
from dispatcher.kube import pki

__all__ = ["HUB", "HUB_MODES", "KUEUE_NAMESPACES", "HubMode", "default_root", "down", "up"]

HUB = HUB_NAME
HubMode = Literal["dedicated", "shared"]
HUB_MODES: tuple[HubMode, ...] = get_args(HubMode)
"""How the hub runs (module docstring); ``dedicated`` is the default."""
KUEUE_NAMESPACES = ("default",)
"""Namespaces given a LocalQueue ``gpus`` on every side by the Kueue profile."""


def default_root() -> Path:
    """State directory of ``dispatcher dev``: ``$DISPATCHER_DEVFLEET`` or a per-user cache."""
    override = os.environ.get("DISPATCHER_DEVFLEET")
    return Path(override) if override else Path.home() / ".cache" / "dispatcher" / "devfleet"


def up(*, root: Path, fleet: FleetSpec, real: bool = False, hub: HubMode = "dedicated",
       job_seconds: float = JOB_SECONDS,
       kueue: kueue_run.ClientLimits | None = None,
       member_kueue: bool = False) -> FleetState:
    """Start (or reuse) a hub plus one apiserver per fleet member, provisioned.

    ``real`` gives every member kube-controller-manager, kube-scheduler and kwok, and returns
    once their Nodes are Ready; ``job_seconds`` is then how long a Job's pod runs. ``hub``
    is the hub mode (module docstring; ``shared`` needs ``real``), recorded as
    ``FleetState.hub_mode``. Safe to call twice: a running healthy fleet of the same
    profile and hub mode is reused and provisioning is idempotent; one of another member
    profile or hub mode is restarted. ``kueue`` (needs ``real``) adds the Kueue profile
    with those client limits on every Kueue instance; ``member_kueue`` (needs ``real``,
    not with ``kueue``) the member-Kueue profile: each member runs its own Kueue (no
    MultiKueue, nothing on the hub) with the queues of its fleet file ``kueue`` objects, or
    a ClusterQueue ``gpus`` of its node GPUs and LocalQueues ``gpus`` when it lists none.
    A running fleet of another Kueue profile is restarted.
    """
    if hub not in HUB_MODES:
        raise ValueError(f"hub mode {hub!r} is not one of {', '.join(HUB_MODES)}")
    if (kueue is not None or member_kueue) and not real:
        raise ValueError("the Kueue profiles need real members (not --light)")
    if kueue is not None and member_kueue:
        raise ValueError("--with-kueue (MultiKueue) and --member-kueue are two profiles: "
                         "choose one")
    if hub == "shared" and not real:
        raise ValueError("a shared hub runs the same operators as real members: it needs "
                         "real members (not --light)")
    members = [m.name for m in fleet.members]
    if HUB in members:
        raise ValueError(f"a member may not be called {HUB!r}: that is the dev fleet's hub")
    planes = ControlPlanes(root=root, binaries=ensure_binaries(members=real),
                           job_seconds=job_seconds)
    peers = ensure_peers() if kueue is not None or member_kueue else ()
    profile = "members" if member_kueue else _limits_key(kueue)
    existing = planes.state()
    if existing is not None and _kueue_config(existing) != profile:
        planes.down()
    state = planes.up(names=[HUB, *members],
                      real=[*members, HUB] if hub == "shared" else members if real else (),
                      dedicated=[HUB] if hub == "dedicated" else (),
                      kubernetes={HUB: fleet.hub.kubernetes,
                                  **{m.name: m.kubernetes for m in fleet.members}})
    if state.hub_mode != hub:
        state = replace(state, hub_mode=hub)
        state.write()

    def real_crds(cluster: str) -> list[dict[str, Any]]:
        minor = planes.binaries.at(state.cluster(cluster).kubernetes or None).minor
        return operators.hub_crds(planes.binaries.operators, minor) if real else []

    provision.provision_hub(state.cluster(HUB).rest(), real_crds=real_crds(HUB),
                            nodes=fleet.hub if hub == "shared" else None)
    for member in fleet.members:
        provision.provision_member(state.cluster(member.name).rest(), member, real=real,
                                   real_crds=real_crds(member.name))
    if hub == "shared":
        provision.wait_nodes_ready(state.cluster(HUB).rest(), fleet.hub)
    if real:
        for member in fleet.members:
            provision.wait_nodes_ready(state.cluster(member.name).rest(), member)
    started = any(p.role == "kueue" for c in state.clusters for p in c.components)
    if kueue is not None and not started:
        state = _start_kueue(planes, state, fleet, peers[0], kueue)
    if member_kueue and not started:
        state = _start_member_kueue(planes, state, fleet, peers[0])
    return state


def _limits_key(limits: kueue_run.ClientLimits | None) -> str | None:
    if limits is None:
        return None
    key = f"{limits.qps}/{limits.burst}"
    return key if limits.dispatcher_name is None else f"{key}/{limits.dispatcher_name}"


def _kueue_config(state: FleetState) -> str | None:
    """The client limits the running fleet's Kueue was started with (None: no Kueue)."""
    marker = Path(state.root) / "kueue-profile"
    return marker.read_text() if marker.exists() else None


def _install_kueue(planes: ControlPlanes, state: FleetState, op: OperatorBinary,
                   clusters: list[ClusterInfo], *,
                   limits: kueue_run.ClientLimits | None = None,
                   member: bool = False) -> None:
    """Install Kueue on ``clusters`` in order and start one instance on each (``limits``:
    its client's; None: Kueue's defaults)."""
    ca = pki.load_ca(Path(state.root))
    for cluster in clusters:
        run = kueue_run.prepare(op, home=Path(state.root) / cluster.name,
                                kubeconfig=cluster.kubeconfig, ca=ca, free_port=free_port,
                                limits=limits or kueue_run.ClientLimits(), member=member)
        operators.install(cluster.rest(), run)
        planes.add_processes(cluster.name, [run])


def _start_kueue(planes: ControlPlanes, state: FleetState, fleet: FleetSpec,
                 op: OperatorBinary, limits: kueue_run.ClientLimits) -> FleetState:
    """Install and start Kueue on every cluster (workers first: the manager connects to
    them), then the workers' and the manager's queues; returns once all are Active."""
    _install_kueue(planes, state, op, [*state.clusters[1:], state.cluster(HUB)],
                   limits=limits)
    for member in fleet.members:
        rest = state.cluster(member.name).rest()
        multikueue.configure_worker(rest, member, namespaces=KUEUE_NAMESPACES)
        multikueue.wait_active(rest, multikueue.worker_paths())
    hub = state.cluster(HUB).rest()
    multikueue.configure_manager(
        hub, fleet, namespaces=KUEUE_NAMESPACES,
        kubeconfigs={m.name: Path(state.cluster(m.name).kubeconfig).read_bytes()
                     for m in fleet.members})
    multikueue.wait_active(hub, multikueue.manager_paths(fleet))
    (Path(state.root) / "kueue-profile").write_text(str(_limits_key(limits)))
    return planes.state() or state


def _start_member_kueue(planes: ControlPlanes, state: FleetState, fleet: FleetSpec,
                        op: OperatorBinary) -> FleetState:
    """Install and start each member's own Kueue and its queues; returns once every
    ClusterQueue is Active."""
    _install_kueue(planes, state, op, [state.cluster(m.name) for m in fleet.members],
                   member=True)
    for member in fleet.members:
        rest = state.cluster(member.name).rest()
        if member.kueue:
            memberkueue.apply_objects(rest, member.kueue)
            multikueue.wait_active(rest, memberkueue.cluster_queue_paths(member.kueue))
        else:
            multikueue.configure_worker(rest, member, namespaces=KUEUE_NAMESPACES)
            multikueue.wait_active(rest, multikueue.worker_paths())
    (Path(state.root) / "kueue-profile").write_text("members")
    return planes.state() or state


def down(*, root: Path) -> None:
    """Stop everything started under ``root`` and remove its state (builds nothing)."""
    ControlPlanes(root=root, binaries=None).down()
