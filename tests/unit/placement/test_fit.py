"""Gang fit on one cluster: worked cases with the numbers in the reasons."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.placement.fit import count_fits, pack, pod_groups, surely_fits
from dispatcher.placement.misfit import explain_misfit
from dispatcher.workloads.demand import Toleration

from .builders import cluster, demand, shape

H100 = "NVIDIA-H100-80GB-HBM3"


def test_fragmentation_is_infeasible_and_names_the_largest_block() -> None:
    cap = cluster(*({"name": f"n{i}", "gpus": 4} for i in range(4)))
    groups = pod_groups(demand([shape(2, 8)]))
    assert pack(cap, groups) is None
    assert explain_misfit(cap, groups) == (
        "16 GPUs free, largest free block on one node is 4, a pod needs 8: fits 0 times")


def test_product_mismatch() -> None:
    cap = cluster({"name": "n0", "gpus": 8, "product": H100})
    groups = pod_groups(demand([shape(1, 8, product="NVIDIA-H200")]))
    assert pack(cap, groups) is None
    assert explain_misfit(cap, groups) == "no nodes with product NVIDIA-H200"


def test_taints_block_pods_that_do_not_tolerate_them() -> None:
    taint = ("dedicated", "research", "NoSchedule")
    cap = cluster({"name": "n0", "gpus": 8, "taints": [taint]},
                  {"name": "n1", "gpus": 8, "taints": [("soft", "", "PreferNoSchedule")]})
    plain = pod_groups(demand([shape(2, 8)]))
    assert pack(cap, plain) is None
    assert "dedicated=research:NoSchedule" not in explain_misfit(cap, plain)  # 1 node fits
    assert "room for 1 of 2 pods" in explain_misfit(cap, plain)
    for toleration in (Toleration(key="dedicated", operator="Equal", value="research",
                                  effect="NoSchedule"),
                       Toleration(key="dedicated", operator="Exists"),
                       Toleration(operator="Exists")):
        result = pack(cap, pod_groups(demand([shape(2, 8, tolerations=[toleration])])))
        assert result is not None
        assert [g.node for g in result.assignment()] == ["n0", "n1"]
    wrong = Toleration(key="dedicated", operator="Equal", value="other", effect="NoSchedule")
    only_tainted = cluster({"name": "n0", "gpus": 8, "taints": [taint]})
    groups = pod_groups(demand([shape(1, 8, tolerations=[wrong])]))
    assert pack(only_tainted, groups) is None
    assert explain_misfit(only_tainted, groups) == (
        "1 node has taints the pods do not tolerate: dedicated=research:NoSchedule")


def test_no_execute_taint_blocks_too() -> None:
    cap = cluster({"name": "n0", "gpus": 8, "taints": [("evict", "", "NoExecute")]})
    assert pack(cap, pod_groups(demand([shape(1, 1)]))) is None


def test_cordoned_and_not_ready_nodes_are_not_used() -> None:
    cap = cluster({"name": "n0", "gpus": 8, "product": H100, "unschedulable": True},
                  {"name": "n1", "gpus": 8, "product": H100, "ready": False})
    groups = pod_groups(demand([shape(1, 1, product=H100)]))
    assert pack(cap, groups) is None
    assert explain_misfit(cap, groups) == (
        f"2 nodes with product {H100} are all NotReady or cordoned")


def test_node_selector_other_labels() -> None:
    cap = cluster({"name": "a", "gpus": 8, "labels": {"zone": "a"}},
                  {"name": "b", "gpus": 8, "labels": {"zone": "b"}})
    result = pack(cap, pod_groups(demand([shape(1, 8, selector={"zone": "b"})])))
    assert result is not None and [g.node for g in result.assignment()] == ["b"]
    groups = pod_groups(demand([shape(1, 8, selector={"zone": "c"})]))
    assert explain_misfit(cap, groups) == "no nodes match node selector zone=c"


def _naive_first_fit(frees: dict[str, int], gangs: list[list[int]]) -> bool:
    """Gang order, each pod on the node with the most free GPUs: what a careless packer does."""
    frees = dict(frees)
    for pods in gangs:
        for gpus in pods:
            name = max(frees, key=lambda n: (frees[n], n))
            if frees[name] < gpus:
                return False
            frees[name] -= gpus
    return True


def test_three_gangs_that_fit_only_when_packed_carefully() -> None:
    frees = {"big": 8, "s1": 4, "s2": 4, "s3": 4}
    gangs = [[2, 2], [4, 4], [8]]
    assert not _naive_first_fit(frees, gangs)
    cap = cluster(*({"name": n, "gpus": f} for n, f in frees.items()))
    result = pack(cap, pod_groups(demand([shape(2, 2)], [shape(2, 4)], [shape(1, 8)])))
    assert result is not None
    assert [(g.node, g.gpus, g.pods) for g in result.assignment()] == [
        ("big", 8, 1), ("s1", 4, 2), ("s2", 4, 1), ("s3", 4, 1)]


def test_constrained_shape_first_when_size_order_fails() -> None:
    # The 4-GPU pods may run anywhere, the 2-GPU pods only on H100 nodes: size order puts a
    # 4-GPU pod on the H100 node; the second order places the constrained pods first.
    cap = cluster({"name": "h", "gpus": 4, "product": H100},
                  {"name": "a", "gpus": 4, "product": "A100"})
    groups = pod_groups(demand([shape(1, 4)], [shape(2, 2, product=H100)]))
    result = pack(cap, groups)
    assert result is not None
    assert [(g.node, g.gpus) for g in result.assignment()] == [("a", 4), ("h", 4)]


def test_reservations_are_subtracted() -> None:
    cap = cluster({"name": "n0", "gpus": 8}, {"name": "n1", "gpus": 8})
    cap.reserve("n0", 6)
    assert pack(cap, pod_groups(demand([shape(2, 4)]))) is not None  # both on n1
    groups = pod_groups(demand([shape(3, 4)]))
    assert pack(cap, groups) is None
    assert explain_misfit(cap, groups).endswith("(6 GPUs reserved for dispatches in flight)")


def test_count_fits_counts_whole_copies() -> None:
    cap = cluster(*({"name": f"n{i}", "gpus": 8, "used": u} for i, u in enumerate([0, 0, 4, 6])))
    assert count_fits(cap, pod_groups(demand([shape(2, 8)]))) == 1
    assert count_fits(cap, pod_groups(demand([shape(1, 2)]))) == 11
    assert count_fits(cap, pod_groups(demand([shape(1, 16)]))) == 0


def _brute_force(frees: list[int], pods: list[int]) -> bool:
    for choice in itertools.product(range(len(frees)), repeat=len(pods)):
        load = [0] * len(frees)
        for index, gpus in zip(choice, pods, strict=True):
            load[index] += gpus
        if all(used <= free for used, free in zip(load, frees, strict=True)):
            return True
    return False


def test_documented_miss_is_reported_infeasible_never_wrongly_feasible() -> None:
    # 6+3+1 and 5+3 fit on a 10- and an 8-GPU node; no packing order finds it (see fit).
    assert _brute_force([10, 8], [6, 5, 3, 3, 1])
    cap = cluster({"name": "a", "gpus": 10}, {"name": "b", "gpus": 8})
    groups = pod_groups(demand([shape(1, 6), shape(1, 5), shape(2, 3), shape(1, 1)]))
    assert pack(cap, groups) is None
    assert explain_misfit(cap, groups).endswith("at once: fits 0 times")


def test_smallest_first_order_rescues_what_best_fit_decreasing_misses() -> None:
    # Best fit decreasing puts a 3 on the 4-GPU node; 3+3+2 and 2+2 fit.
    assert _brute_force([8, 4], [3, 3, 2, 2, 2])
    cap = cluster({"name": "a", "gpus": 8}, {"name": "b", "gpus": 4})
    result = pack(cap, pod_groups(demand([shape(2, 3), shape(3, 2)])))
    assert result is not None
    assert [(g.node, g.gpus) for g in result.assignment()] == [("a", 8), ("b", 4)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=5),
       st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=7))
def test_exact_for_power_of_two_pods_on_one_class(frees: list[int], pods: list[int]) -> None:
    cap = cluster(*({"name": f"n{i}", "gpus": f} for i, f in enumerate(frees)))
    counts = Counter(pods)
    groups = pod_groups(demand([shape(c, g) for g, c in sorted(counts.items())]))
    assert (pack(cap, groups) is not None) == _brute_force(frees, pods)


def test_gpu_pods_tolerate_the_gpu_resource_taint_like_the_admission_plugin() -> None:
    cap = cluster({"name": "n0", "gpus": 8, "taints": [("nvidia.com/gpu", "present",
                                                         "NoSchedule")]})
    assert pack(cap, pod_groups(demand([shape(1, 8)]))) is not None
    assert pack(cap, pod_groups(demand([shape(1, 0)]))) is None


node_specs = st.fixed_dictionaries({
    "gpus": st.sampled_from([1, 2, 4, 8]),
    "used": st.sampled_from([0, 0, 1, 2, 3]),
    "product": st.sampled_from([H100, "NVIDIA-L40S"]),
    "labels": st.sampled_from([{}, {"zone": "a"}]),
    "taints": st.sampled_from([[], [("dedicated", "x", "NoSchedule")]]),
})
pod_shapes = st.builds(
    lambda count, gpus, product, zone, tolerate: shape(
        count, gpus, product=product, selector={"zone": zone} if zone else None,
        tolerations=[Toleration(key="dedicated", operator="Exists")] if tolerate else []),
    st.integers(min_value=1, max_value=4), st.sampled_from([0, 1, 2, 3, 4, 8]),
    st.sampled_from([None, H100, "NVIDIA-L40S"]), st.sampled_from([None, "a"]), st.booleans())


@settings(max_examples=500, deadline=None)
@given(st.lists(node_specs, min_size=0, max_size=8),
       st.lists(st.lists(pod_shapes, min_size=1, max_size=3), min_size=1, max_size=3))
def test_surely_fits_only_when_the_packer_fits(specs: list[dict[str, object]],
                                               gangs: list[list[object]]) -> None:
    """``surely_fits`` is a sufficient condition: whenever it says yes, ``pack`` finds a
    placement (the engine then skips packing for members it does not choose)."""
    cap = cluster(*({"name": f"n{i}", **spec,
                     "used": min(int(str(spec["used"])), int(str(spec["gpus"])))}
                    for i, spec in enumerate(specs)))
    groups = pod_groups(demand(*gangs))  # type: ignore[arg-type]
    if surely_fits(cap, groups):
        assert pack(cap, groups) is not None


def test_surely_fits_counts_what_earlier_groups_may_take() -> None:
    """Two 4-GPU pods then two 3-GPU pods on two 7-GPU nodes: each group alone has room,
    but the 4-GPU pods may leave 3 free on each node only; 3 + 3 fit, so the packer fits,
    while the worst case (each 4-GPU pod costs up to two 3-GPU slots) says not surely."""
    cap = cluster({"name": "a", "gpus": 7}, {"name": "b", "gpus": 7})
    groups = pod_groups(demand([shape(2, 4)], [shape(2, 3)]))
    assert pack(cap, groups) is not None
    assert not surely_fits(cap, groups)
    assert surely_fits(cap, pod_groups(demand([shape(2, 4)], [shape(1, 3)]))) is False
    # Three 8-GPU nodes: room for 6 pods of 3, minus 2 x 2 the 4-GPU pods may cost: 2 left.
    assert surely_fits(cluster(*({"name": n, "gpus": 8} for n in "abc")), groups)
