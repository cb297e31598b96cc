"""Fleet files: member clusters described as node pools (``clusters/*.yaml``).

One format serves three consumers: ``dispatcher dev up`` creates these Nodes on real
apiservers, ``dispatcher explain --fleet`` and ``dispatcher simulate`` build capacity from
them offline. Pools expand into real ``v1.Node`` objects (``node_manifests``), so offline
capacity goes through the same code path as Nodes read from a live cluster.

Format::

    apiVersion: dispatcher.io/v1alpha1
    kind: Fleet
    members:
    - name: member-1
      labels: {region: us-east}          # MemberCluster labels (selectors match these)
      topologyLevels:                    # optional (MemberCluster spec.topologyLevels)
      - {name: rack, nodeLabel: example.com/rack}
      queueing: {system: kueue, localQueue: team-a}   # optional (spec.queueing)
      kueue:                             # optional: the member's Kueue queues, as objects
      - {kind: ResourceFlavor, metadata: {name: h100},
         spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}}
      - {kind: ClusterQueue, metadata: {name: team-a}, spec: {namespaceSelector: {},
         resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: h100,
         resources: [{name: nvidia.com/gpu, nominalQuota: 16}]}]}]},
         status: {flavorsReservation: [...]}}   # status: offline only (quota in use)
      - {kind: LocalQueue, metadata: {name: team-a, namespace: team-a},
         spec: {clusterQueue: team-a}}
      kubernetes:                        # optional: what `dispatcher dev up` runs there
        version: "1.37"                  # a minor the dev fleet builds (default: 1.35)
        featureGates: {GenericWorkload: false}   # over the dev fleet's own gates
      nodePools:
      - name: h100                       # node names: <member>-<pool>-<index>
        count: 4
        gpus: 8                          # nvidia.com/gpu allocatable per node
        gpuProduct: NVIDIA-H100-80GB-HBM3   # nvidia.com/gpu.product label (optional)
        cpu: "96"                        # optional, default "64"
        memory: 1Ti                      # optional, default "512Gi"
        labels: {topology.kubernetes.io/zone: a, example.com/rack: r1}
        taints: [{key: dedicated, value: infer, effect: NoSchedule}]
    hub:                                 # optional: the dev fleet's hub
      kubernetes: {version: "1.37"}      # as a member's
      nodePools: [...]                   # its Nodes when it is a full cluster
                                         # (`dispatcher dev up --hub shared`); same keys
                                         # as a member's; default DEFAULT_HUB_POOLS

The ``hub`` section matters only to ``dispatcher dev up --hub shared``: a shared hub is a
normal cluster whose own scheduler and kwok run pods, so it gets Nodes of its own (a workload
that wrongly runs on the hub then really gets pods bound there). The dispatcher never counts
them as capacity: placement reads members only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.queueing import parse as parse_queueing
from dispatcher.fleet.topology import TopologyLevel, parse_levels
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE

__all__ = [
    "DEFAULT_HUB_POOLS",
    "HUB_NAME",
    "FleetFileError",
    "FleetSpec",
    "KubernetesSpec",
    "MemberSpec",
    "NodePool",
    "Taint",
    "load_fleet",
    "node_manifests",
    "parse_fleet",
]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
HUB_NAME = "hub"
"""The dev fleet's hub cluster (its context name, and the prefix of its Nodes' names)."""


class FleetFileError(ValueError):
    """A fleet file is invalid; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A node taint (``core/v1``)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, kw_only=True)
class NodePool:
    """``count`` identical nodes."""

    name: str
    count: int
    gpus: int
    gpu_product: str | None = None
    cpu: str = "64"
    memory: str = "512Gi"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, kw_only=True)
class KubernetesSpec:
    """What a dev cluster runs: a Kubernetes minor ("" for the dev fleet's default) and
    feature gates set over the dev fleet's own (``devfleet.components``). Offline
    (``explain --fleet``, ``simulate``) it is not read: capacity does not depend on it."""

    version: str = ""
    feature_gates: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class MemberSpec:
    """One member cluster: its labels, topology levels, queueing and node pools."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    node_pools: tuple[NodePool, ...] = ()
    topology_levels: tuple[TopologyLevel, ...] = ()
    queueing: Queueing = field(default_factory=Queueing)
    kueue: tuple[Mapping[str, Any], ...] = ()
    """Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue; ``kueue.x-k8s.io/v1beta2``
    unless given): what ``dispatcher dev up --member-kueue`` creates on the member and what
    ``explain --fleet`` and ``simulate`` read its quota from (``fleet.quota``)."""
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)


DEFAULT_HUB_POOLS = (NodePool(name="h100", count=2, gpus=8,
                              gpu_product="NVIDIA-H100-80GB-HBM3"),)
"""The shared hub's Nodes when the fleet file has no ``hub`` section: small, but with the
GPU product most workloads ask for, so a hub pod that should never exist gets bound."""


def _default_hub() -> MemberSpec:
    return MemberSpec(name=HUB_NAME, node_pools=DEFAULT_HUB_POOLS)


@dataclass(frozen=True, kw_only=True)
class FleetSpec:
    """A whole fleet, in file order."""

    members: tuple[MemberSpec, ...]
    hub: MemberSpec = field(default_factory=_default_hub)
    """The hub's node pools (named ``HUB_NAME``, no labels), used only when the dev fleet's
    hub is a shared one (a full cluster)."""

    def member(self, name: str) -> MemberSpec:
        """The member called ``name``; KeyError names the known members."""
        for member in self.members:
            if member.name == name:
                return member
        known = ", ".join(m.name for m in self.members)
        raise KeyError(f"no member {name!r} in the fleet (members: {known})")


def _expect(value: Any, kind: type | tuple[type, ...], *, where: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise FleetFileError(f"{where}: expected {names}, got {type(value).__name__} {value!r}")
    return value


KUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue")
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def _kueue(value: Any, *, where: str) -> tuple[Mapping[str, Any], ...]:
    """A member's Kueue objects, checked for kind and name (their specs are Kueue's to
    validate when created; offline they are read leniently, like the live ones)."""
    out = []
    for i, item in enumerate(_expect(value if value is not None else [], list, where=where)):
        at = f"{where}[{i}]"
        obj = dict(_expect(item, dict, where=at))
        if obj.get("kind") not in KUEUE_KINDS:
            raise FleetFileError(f"{at}.kind: expected one of {', '.join(KUEUE_KINDS)}, got "
                                 f"{obj.get('kind')!r}")
        meta = _expect(obj.get("metadata"), dict, where=f"{at}.metadata")
        _expect(meta.get("name"), str, where=f"{at}.metadata.name")
        if obj["kind"] == "LocalQueue":
            _expect(meta.get("namespace"), str, where=f"{at}.metadata.namespace")
        obj.setdefault("apiVersion", KUEUE_API)
        out.append(obj)
    return tuple(out)


def _str_map(value: Any, *, where: str) -> dict[str, str]:
    mapping = _expect(value if value is not None else {}, dict, where=where)
    return {str(k): str(v) for k, v in mapping.items()}


def _int(value: Any, *, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FleetFileError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


_MINOR = re.compile(r"^v?1\.(\d+)$")


def _kubernetes(raw: Any, *, where: str) -> KubernetesSpec:
    """A cluster's ``kubernetes`` section: ``version`` a minor ("1.37" or "v1.37"),
    ``featureGates`` a map of gate to bool."""
    raw = _expect(raw if raw is not None else {}, dict, where=where)
    unknown = set(raw) - {"version", "featureGates"}
    if unknown:
        raise FleetFileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                             f"(known: version, featureGates)")
    version = raw.get("version")
    minor = ""
    if version is not None:
        match = _MINOR.match(str(version))
        if not match:
            raise FleetFileError(f"{where}.version: expected a minor like \"1.37\", got "
                                 f"{version!r}")
        minor = f"1.{int(match.group(1))}"
    gates = _expect(raw.get("featureGates") or {}, dict, where=f"{where}.featureGates")
    for gate, value in gates.items():
        _expect(value, bool, where=f"{where}.featureGates.{gate}")
    return KubernetesSpec(version=minor, feature_gates={str(k): v for k, v in gates.items()})


def _pool(raw: Any, *, where: str) -> NodePool:
    raw = _expect(raw, dict, where=where)
    unknown = set(raw) - {"name", "count", "gpus", "gpuProduct", "cpu", "memory", "labels",
                          "taints"}
    if unknown:
        raise FleetFileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name = _expect(raw.get("name"), str, where=f"{where}.name")
    taints = []
    for i, item in enumerate(_expect(raw.get("taints") or [], list, where=f"{where}.taints")):
        taint = _expect(item, dict, where=f"{where}.taints[{i}]")
        effect = taint.get("effect", "NoSchedule")
        if effect not in TAINT_EFFECTS:
            raise FleetFileError(
                f"{where}.taints[{i}].effect: {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        taints.append(Taint(key=_expect(taint.get("key"), str, where=f"{where}.taints[{i}].key"),
                            value=str(taint.get("value", "")), effect=effect))
    product = raw.get("gpuProduct")
    return NodePool(
        name=name,
        count=_int(raw.get("count", 1), where=f"{where}.count"),
        gpus=_int(raw.get("gpus", 0), where=f"{where}.gpus"),
        gpu_product=None if product is None else str(product),
        cpu=str(raw.get("cpu", "64")),
        memory=str(raw.get("memory", "512Gi")),
        labels=_str_map(raw.get("labels"), where=f"{where}.labels"),
        taints=tuple(taints),
    )


def parse_fleet(data: Any, *, source: str = "<fleet>") -> FleetSpec:
    """Validate a parsed fleet document; errors name ``source`` and the key path."""
    data = _expect(data, dict, where=source)
    kind = data.get("kind", "Fleet")
    if kind != "Fleet":
        raise FleetFileError(f"{source}: kind: expected Fleet, got {kind!r}")
    members = []
    seen: set[str] = set()
    raw_members = _expect(data.get("members"), list, where=f"{source}: members")
    for i, item in enumerate(raw_members):
        where = f"{source}: members[{i}]"
        raw = _expect(item, dict, where=where)
        name = _expect(raw.get("name"), str, where=f"{where}.name")
        if name in seen:
            raise FleetFileError(f"{where}.name: duplicate member {name!r}")
        seen.add(name)
        pools = tuple(
            _pool(pool, where=f"{where}.nodePools[{j}]")
            for j, pool in enumerate(_expect(raw.get("nodePools") or [], list,
                                             where=f"{where}.nodePools")))
        try:
            levels = parse_levels(raw.get("topologyLevels"), where=f"{where}.topologyLevels")
            queueing = parse_queueing(raw.get("queueing"), where=f"{where}.queueing")
        except ValueError as exc:
            raise FleetFileError(str(exc)) from None
        members.append(MemberSpec(name=name, labels=_str_map(raw.get("labels"),
                                                             where=f"{where}.labels"),
                                  node_pools=pools, topology_levels=levels,
                                  queueing=queueing,
                                  kueue=_kueue(raw.get("kueue"), where=f"{where}.kueue"),
                                  kubernetes=_kubernetes(raw.get("kubernetes"),
                                                         where=f"{where}.kubernetes")))
    if "hub" not in data:
        return FleetSpec(members=tuple(members))
    return FleetSpec(members=tuple(members), hub=_hub(data["hub"], where=f"{source}: hub"))


def _hub(raw: Any, *, where: str) -> MemberSpec:
    """The ``hub`` section: ``nodePools`` (an empty list: a shared hub without Nodes) and
    ``kubernetes``."""
    raw = _expect(raw, dict, where=where)
    unknown = set(raw) - {"nodePools", "kubernetes"}
    if unknown:
        raise FleetFileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                             f"(a hub has only nodePools and kubernetes)")
    kubernetes = _kubernetes(raw.get("kubernetes"), where=f"{where}.kubernetes")
    if "nodePools" not in raw:
        return replace(_default_hub(), kubernetes=kubernetes)
    pools = _expect(raw["nodePools"] if raw["nodePools"] is not None else [], list,
                    where=f"{where}.nodePools")
    return MemberSpec(name=HUB_NAME, kubernetes=kubernetes, node_pools=tuple(
        _pool(pool, where=f"{where}.nodePools[{j}]") for j, pool in enumerate(pools)))


def load_fleet(path: str | Path) -> FleetSpec:
    """Read and validate a fleet file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise FleetFileError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise FleetFileError(f"{path}: not valid YAML: {exc}") from exc
    return parse_fleet(data, source=str(path))


def node_manifests(member: MemberSpec) -> list[dict[str, Any]]:
    """The ``v1.Node`` objects of a member's pools: Ready, schedulable, GPU capacity set.

    ``status`` is accepted on Node create, so one POST makes a usable node (no kubelet).
    """
    nodes = []
    for pool in member.node_pools:
        for index in range(pool.count):
            name = f"{member.name}-{pool.name}-{index}"
            labels = {"kubernetes.io/hostname": name, "dispatcher.io/pool": pool.name,
                      **pool.labels}
            if pool.gpu_product:
                labels[GPU_PRODUCT_LABEL] = pool.gpu_product
            resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110",
                         GPU_RESOURCE: str(pool.gpus)}
            nodes.append({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect}
                                    for t in pool.taints]},
                "status": {
                    "capacity": dict(resources), "allocatable": dict(resources),
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "dispatcher dev fleet node"}],
                },
            })
    return nodes
