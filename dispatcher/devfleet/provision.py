"""Fill freshly started control planes: CRDs on every cluster, GPU Nodes on members.

The hub gets the dispatcher's own CRDs (``deploy/base/crds/``); every cluster gets CRDs for the
catalog's workload kinds, since users create workloads on the hub and the dispatcher creates
copies on members: on a real fleet the real CRDs of the kinds whose operator the members run
(JobSet, ...; the members' operators install them, the hub gets the same ones), open-schema
stand-ins for every other kind and everywhere on a light fleet. Members get the Nodes of
their fleet-file pools: on a light member they are created Ready (nothing would ever change
them); on a real member they carry the ``kwok.x-k8s.io/node=fake`` annotation and no
conditions, and that member's kwok makes them Ready and keeps them alive, keeping the
pool's capacity (``nvidia.com/gpu``). A shared hub (a full cluster) gets the Nodes of the fleet
file's ``hub`` section the same way as a real member.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import workload_crds
from dispatcher.devfleet.controlplane import KWOK_NODE_ANNOTATION
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.devfleet.workload_crds import CRD_PATH, install_crds
from dispatcher.fleet.fleetfile import MemberSpec, node_manifests
from dispatcher.sources import source_path
from dispatcher.workloads.podspec import GPU_RESOURCE

__all__ = ["crds_dir", "install_crds", "member_nodes", "provision_hub", "provision_member",
           "wait_nodes_ready"]

def crds_dir() -> Path:
    """The dispatcher's CRDs in the source tree (``deploy/base/crds``)."""
    return source_path("deploy", "base", "crds")


def dispatcher_crds() -> list[dict[str, Any]]:
    """The CRDs of deploy/base/crds/*.yaml."""
    docs: list[dict[str, Any]] = []
    for path in sorted(crds_dir().glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _workload_crds(rest: Rest, real: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """``real`` CRDs, plus a stand-in for every other workload kind unless the cluster already
    serves a real CRD of that name (an operator installed it: never replace it)."""
    real = list(real)
    have = {crd["metadata"]["name"] for crd in real}
    crds = list(real)
    for name, standin in workload_crds.crds_for(workload_crds.WORKLOAD_KINDS).items():
        if name in have:
            continue
        try:
            current = rest.get(f"{CRD_PATH}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            if "dispatcher.io/devfleet-standin" not in current["metadata"].get("labels", {}):
                continue
        crds.append(standin)
    return crds


def provision_hub(rest: Rest, *, real_crds: Iterable[dict[str, Any]] = (),
                  nodes: MemberSpec | None = None) -> int:
    """Dispatcher CRDs, workload CRDs (``real_crds``, stand-ins for the other kinds) and the
    dispatcher-system namespace on the hub; on a shared hub (``nodes``: the fleet file's
    ``hub`` pools) also its kwok Nodes. Returns the number of nodes created."""
    install_crds(rest, dispatcher_crds() + _workload_crds(rest, real_crds), timeout=60.0)
    rest.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "dispatcher-system"}})
    if nodes is None:
        return 0
    return sum(rest.ensure("/api/v1/nodes", node) is not None
               for node in member_nodes(nodes, real=True))


def member_nodes(member: MemberSpec, *, real: bool = False) -> list[dict[str, Any]]:
    """The Node objects to create on ``member``: Ready ones, or kwok's ones when ``real``."""
    nodes = node_manifests(member)
    if not real:
        return nodes
    key, value = KWOK_NODE_ANNOTATION
    for node in nodes:
        node["metadata"].setdefault("annotations", {})[key] = value
        node["status"].pop("conditions", None)  # kwok's node-initialize stage sets them
    return nodes


def provision_member(rest: Rest, member: MemberSpec, *, real: bool = False,
                     real_crds: Iterable[dict[str, Any]] = ()) -> int:
    """Workload CRDs (``real_crds`` and whatever real CRD the member's operators installed,
    stand-ins for the other kinds) and the member's GPU Nodes; returns the number of nodes
    created."""
    install_crds(rest, _workload_crds(rest, real_crds), timeout=60.0)
    created = 0
    for node in member_nodes(member, real=real):
        if rest.ensure("/api/v1/nodes", node) is not None:
            created += 1
    return created


def _node_problem(node: dict[str, Any], expected: dict[str, Any]) -> str | None:
    name = node["metadata"]["name"]
    status = node.get("status", {})
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    if not ready or ready[0].get("status") != "True":
        return f"node {name} not Ready"
    if any(t.get("key", "").startswith("node.kubernetes.io/") for t in
           node.get("spec", {}).get("taints") or []):
        return f"node {name} still has a node.kubernetes.io/ taint"
    want = expected["status"]["allocatable"].get(GPU_RESOURCE)
    have = status.get("allocatable", {}).get(GPU_RESOURCE)
    if want != have:
        return f"node {name}: allocatable {GPU_RESOURCE} {have!r}, expected {want!r}"
    return None


def wait_nodes_ready(rest: Rest, member: MemberSpec, *, timeout: float = 60.0) -> None:
    """Wait until every Node of ``member`` (or of a shared hub) is Ready, untainted by the
    node lifecycle controller and still has its pool's ``nvidia.com/gpu`` allocatable (a
    real cluster: kwok and kube-controller-manager at work)."""
    expected = {n["metadata"]["name"]: n for n in node_manifests(member)}
    deadline = time.monotonic() + timeout
    while True:
        nodes = {n["metadata"]["name"]: n for n in rest.get("/api/v1/nodes")["items"]}
        problems = [p for p in (f"node {name} missing" if name not in nodes
                                else _node_problem(nodes[name], want)
                                for name, want in expected.items()) if p]
        if not problems:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{member.name}: nodes not ready after {timeout:.0f}s: "
                               f"{'; '.join(problems[:5])}")
        time.sleep(0.25)
