"""The capacity model: worked event sequences, and roll-ups equal to a recomputation from
scratch after any random sequence of node, pod and reservation events."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.nodes import HARD_EFFECTS, node_facts, pod_binding, pod_key

from .objects import node, pod


def test_bound_pod_lowers_free_and_finishing_restores_it() -> None:
    cap = ClusterCapacity()
    cap.upsert_node(node("n1", 8, product="H100"))
    cap.upsert_pod(pod("p", 3))  # not bound yet: nothing held
    assert cap.free == 8
    cap.upsert_pod(pod("p", 3, node_name="n1"))
    assert cap.free == 5 and cap.largest_free_block == 5
    cap.upsert_pod(pod("p", 3, node_name="n1", phase="Succeeded"))
    assert cap.free == 8
    cap.upsert_pod(pod("p", 3, node_name="n1"))
    cap.delete_pod(pod("p", 3, node_name="n1"))
    assert cap.free == 8 and cap.pod_count == 0


def test_pod_seen_before_its_node_counts_when_the_node_arrives() -> None:
    cap = ClusterCapacity()
    cap.upsert_pod(pod("p", 2, node_name="n1"))
    assert cap.free == 0
    cap.upsert_node(node("n1", 8))
    assert cap.free == 6
    state = cap.node("n1")
    assert state is not None and state.used == 2


def test_rebinding_moves_the_gpus_and_node_delete_keeps_pods() -> None:
    cap = ClusterCapacity()
    cap.upsert_node(node("n1", 8))
    cap.upsert_node(node("n2", 8))
    cap.upsert_pod(pod("p", 4, node_name="n1"))
    cap.upsert_pod(pod("p", 4, node_name="n2"))
    assert [(s.name, s.used) for s in cap.nodes()] == [("n1", 0), ("n2", 4)]
    cap.delete_node("n2")
    assert cap.free == 8
    cap.upsert_node(node("n2", 8))
    assert cap.free == 12  # the pod is still bound there
    cap.delete_pod("team-a/p")
    assert cap.free == 16


def test_cordoned_not_ready_and_tainted_nodes() -> None:
    cap = ClusterCapacity()
    cap.upsert_node(node("ok", 8))
    cap.upsert_node(node("cordoned", 8, unschedulable=True))
    cap.upsert_node(node("down", 8, ready=False))
    cap.upsert_node(node("tainted", 8, taints=[("dedicated", "x", "NoSchedule")]))
    summary = cap.summary()
    # Tainted nodes stay free (tolerating pods may use them); placement checks taints.
    assert summary.free == 16 and summary.allocatable == 32
    assert summary.cordoned_nodes == 1 and summary.not_ready_nodes == 1
    classes = {c.key[2]: c for c in cap.classes()}
    assert classes[(("dedicated", "x", "NoSchedule"),)].hard_taints
    cap.upsert_node(node("cordoned", 8))
    assert cap.free == 24


def test_nodes_of_a_pool_share_one_class() -> None:
    cap = ClusterCapacity()
    for i in range(50):
        cap.upsert_node(node(f"n{i}", 8, product="H100", labels={"pool": "a"}))
    cap.upsert_node(node("other", 8, product="A100"))
    assert len(cap.classes()) == 2
    cap.upsert_pod(pod("p", 8, node_name="n3"))
    h100 = next(c for c in cap.classes() if c.product == "H100")
    assert h100.histogram() == {8: 49}
    assert h100.eligible == 50
    assert h100.pick(8, 2) == ["n0", "n1"]


def test_reservations_lower_free_even_before_the_node_exists() -> None:
    cap = ClusterCapacity()
    cap.reserve("n1", 4)
    cap.upsert_node(node("n1", 8))
    assert cap.free == 4 and cap.reserved == 4
    cap.reserve("n1", -4)
    assert cap.free == 8 and cap.reserved == 0


# -- from-scratch recomputation -------------------------------------------------------------

NODE_NAMES = ["n0", "n1", "n2", "n3"]
POD_NAMES = ["p0", "p1", "p2", "p3", "p4", "p5"]

node_events = st.builds(
    lambda name, gpus, product, ready, cordon, taint, zone: ("node", node(
        name, gpus, product=product, ready=ready, unschedulable=cordon,
        taints=[taint] if taint else [], labels={"zone": zone})),
    st.sampled_from(NODE_NAMES), st.sampled_from([0, 1, 4, 8]),
    st.sampled_from([None, "H100", "A100"]), st.booleans(), st.booleans(),
    st.sampled_from([None, ("gpu", "", "NoSchedule"), ("soft", "", "PreferNoSchedule")]),
    st.sampled_from(["a", "b"]))
pod_events = st.builds(
    lambda name, gpus, node_name, phase: ("pod", pod(name, gpus, node_name=node_name,
                                                    phase=phase)),
    st.sampled_from(POD_NAMES), st.sampled_from([1, 2, 4, 8, 0]),
    st.sampled_from(["n0", "n1", "n0", "n1", "n2", "n3", None, "ghost"]),
    st.sampled_from(["Running", "Running", "Pending", "Succeeded", "Failed"]))
events = st.lists(st.one_of(
    node_events, pod_events, pod_events,
    st.tuples(st.just("delete-node"), st.sampled_from(NODE_NAMES)),
    st.tuples(st.just("delete-pod"), st.sampled_from(POD_NAMES)),
    st.tuples(st.just("reserve"), st.tuples(st.sampled_from([*NODE_NAMES, "ghost"]),
                                            st.integers(min_value=1, max_value=4)))),
    max_size=40)


def _recompute(nodes: dict[str, dict[str, Any]], pods: dict[str, dict[str, Any]],
               reserved: dict[str, int]) -> dict[str, Any]:
    """Everything the model rolls up, from the current objects, the slow obvious way."""
    used = dict.fromkeys(nodes, 0)
    for raw in pods.values():
        binding = pod_binding(raw)
        if binding is not None and binding[0] in used:
            used[binding[0]] += binding[1]
    free_total, largest, per_product = 0, 0, {}
    cordoned = not_ready = allocatable = 0
    per_node = {}
    for name, raw in nodes.items():
        facts = node_facts(raw)
        allocatable += facts.allocatable
        cordoned += facts.unschedulable
        not_ready += not facts.ready
        free = max(facts.allocatable - used[name] - reserved.get(name, 0), 0)
        eligible = facts.ready and not facts.unschedulable
        entry = per_product.setdefault(facts.product, [0, 0, 0])
        entry[0] += 1
        entry[1] += facts.allocatable
        if eligible:
            free_total += free
            largest = max(largest, free)
            entry[2] += free
        per_node[name] = (facts.allocatable, used[name], reserved.get(name, 0),
                          free, eligible, tuple(t for t in facts.taints if t[2] in HARD_EFFECTS))
    return {"free": free_total, "largest": largest, "allocatable": allocatable,
            "cordoned": cordoned, "not_ready": not_ready, "nodes": per_node,
            "used": sum(used.values()),
            "reserved": sum(v for k, v in reserved.items() if k in nodes),
            "products": {p: tuple(v) for p, v in per_product.items()}}


def _observed(cap: ClusterCapacity) -> dict[str, Any]:
    summary = cap.summary()
    per_node = {}
    for state in cap.nodes():
        hard = tuple(t for t in state.taints if t[2] in HARD_EFFECTS)
        per_node[state.name] = (state.allocatable, state.used, state.reserved,
                                state.free, state.ready and not state.unschedulable, hard)
    # The class index must agree with the nodes: eligible nodes with free GPUs, by amount.
    indexed = {name: free for cls in cap.classes()
               for free, names in cls.free_nodes.items() for name in names}
    expected = {name: v[3] for name, v in per_node.items() if v[4] and v[3] > 0}
    assert indexed == expected
    assert all(cls.sizes == sorted(cls.free_nodes) for cls in cap.classes())
    return {"free": summary.free, "largest": summary.largest_free_block,
            "allocatable": summary.allocatable, "cordoned": summary.cordoned_nodes,
            "not_ready": summary.not_ready_nodes, "nodes": per_node, "used": summary.used,
            "reserved": summary.reserved,
            "products": {p.product: (p.nodes, p.allocatable, p.free) for p in summary.products}}


@settings(max_examples=600, deadline=None)
@given(events)
def test_rollups_equal_recomputation_after_any_events(sequence: list[Any]) -> None:
    cap = ClusterCapacity()
    nodes: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    reserved: dict[str, int] = {}
    for kind, payload in sequence:
        if kind == "node":
            cap.upsert_node(payload)
            nodes[payload["metadata"]["name"]] = payload
        elif kind == "pod":
            cap.upsert_pod(payload)
            pods[pod_key(payload)] = payload
        elif kind == "delete-node":
            cap.delete_node(payload)
            nodes.pop(payload, None)
        elif kind == "delete-pod":
            key = f"team-a/{payload}"
            if key in pods:
                cap.delete_pod(pods.pop(key))
        else:
            name, gpus = payload
            cap.reserve(name, gpus)
            reserved[name] = reserved.get(name, 0) + gpus
    expected = _recompute(nodes, pods, reserved)
    assert _observed(cap) == expected
    assert _observed(cap.snapshot()) == expected


@settings(max_examples=200, deadline=None)
@given(events, st.lists(node_events, max_size=5), st.lists(pod_events, max_size=6))
def test_relist_equals_a_fresh_build(sequence: list[Any], nodes: list[Any],
                                     pods: list[Any]) -> None:
    cap = ClusterCapacity()
    for kind, payload in sequence:
        if kind == "node":
            cap.upsert_node(payload)
        elif kind == "pod":
            cap.upsert_pod(payload)
    node_list = list({n["metadata"]["name"]: n for _, n in nodes}.values())
    pod_list = list({pod_key(p): p for _, p in pods}.values())
    cap.relist_nodes(node_list)
    cap.relist_pods(pod_list)
    fresh = ClusterCapacity()
    fresh.relist_pods(pod_list)
    fresh.relist_nodes(node_list)
    assert _observed(cap) == _observed(fresh)
    assert cap.pod_keys() == fresh.pod_keys()
