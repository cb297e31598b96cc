"""Reading Nodes and Pods: GPU counts as the scheduler sees them, facts kept per node."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.fleet.nodes import node_facts, pod_binding
from dispatcher.workloads.podspec import pod_gpus, pod_needs
from dispatcher.workloads.quantity import whole_count

from .objects import node, pod


def _c(gpus: int | None, *, section: str = "limits", restart: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if gpus is not None:
        container["resources"] = {section: {"nvidia.com/gpu": str(gpus)}}
    if restart:
        container["restartPolicy"] = restart
    return container


def test_pod_gpus_is_max_of_container_sum_and_largest_init() -> None:
    spec = {"containers": [_c(2), _c(1)], "initContainers": [_c(4), _c(1)]}
    assert pod_gpus(spec) == 4
    spec = {"containers": [_c(2), _c(3)], "initContainers": [_c(4)]}
    assert pod_gpus(spec) == 5


def test_pod_gpus_limits_before_requests() -> None:
    both = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"},
                                       "requests": {"nvidia.com/gpu": "2"}}}
    only_requests = _c(3, section="requests")
    assert pod_gpus({"containers": [both, only_requests]}) == 5


def test_sidecars_add_to_the_running_pods_and_to_later_init_containers() -> None:
    # A sidecar (restartable init container) keeps running next to the app containers and
    # next to the init containers that start after it.
    spec = {"initContainers": [_c(1, restart="Always"), _c(4)], "containers": [_c(2)]}
    assert pod_gpus(spec) == 5  # init phase 1 + 4 beats 2 + 1


def test_binding_requires_node_and_live_phase_and_gpus() -> None:
    assert pod_binding(pod("a", 2)) is None
    assert pod_binding(pod("a", 2, node_name="n1")) == ("n1", 2)
    assert pod_binding(pod("a", 2, node_name="n1", phase="Pending")) == ("n1", 2)
    assert pod_binding(pod("a", 2, node_name="n1", phase="Succeeded")) is None
    assert pod_binding(pod("a", 2, node_name="n1", phase="Failed")) is None
    assert pod_binding(pod("a", 0, node_name="n1")) is None


def test_node_facts_drop_own_hostname_and_read_conditions() -> None:
    facts = node_facts(node("n1", 8, product="H100", ready=False, unschedulable=True,
                            taints=[("gpu", "", "NoSchedule")], labels={"zone": "a"}))
    assert facts.allocatable == 8 and facts.product == "H100"
    assert not facts.ready and facts.unschedulable
    assert dict(facts.labels) == {"zone": "a", "nvidia.com/gpu.product": "H100"}
    assert facts.taints == (("gpu", "", "NoSchedule"),)


def test_node_without_ready_condition_is_not_ready() -> None:
    raw = node("n1", 8)
    raw["status"]["conditions"] = []
    assert not node_facts(raw).ready


@given(st.integers(min_value=0, max_value=10**6))
def test_quantity_round_trips_integers(value: int) -> None:
    assert whole_count(str(value)) == value
    assert whole_count(value) == value


@given(st.one_of(st.text(max_size=8), st.none(), st.floats(), st.booleans(),
                 st.lists(st.integers())))
def test_quantity_never_raises(value: object) -> None:
    assert whole_count(value) >= 0


def test_whole_count_reads_every_quantity_form() -> None:
    # The old fleet parser read these as 0: a node advertising "1e3" GPUs had none.
    assert whole_count("1e3") == 1000
    assert whole_count("1.0") == 1
    assert whole_count("500m") == 0  # half a GPU cannot be allocated
    assert whole_count("1500m") == 1
    assert whole_count("2k") == 2000
    assert whole_count("-4") == 0
    assert whole_count("garbage") == 0


def test_node_with_exponent_quantity_has_its_gpus() -> None:
    raw = node("n1", 8)
    raw["status"]["allocatable"]["nvidia.com/gpu"] = "1e1"
    raw["status"]["capacity"]["nvidia.com/gpu"] = "10.0"
    facts = node_facts(raw)
    assert (facts.allocatable, facts.capacity) == (10, 10)


_counts = st.one_of(st.none(), st.integers(min_value=0, max_value=16))


@given(st.lists(st.tuples(_counts, st.booleans()), max_size=4),
       st.lists(st.tuples(_counts, st.booleans()), max_size=4))
def test_fleet_charges_a_pod_what_the_resolver_sized_it(
        mains: list[tuple[int | None, bool]], inits: list[tuple[int | None, bool]]) -> None:
    """One effective-GPU rule: the fleet's accounting of a bound pod and the workload
    resolver's demand agree on every pod shape (sidecars, init steps, requests only)."""
    spec = {
        "containers": [_c(g, section="requests" if r else "limits") for g, r in mains],
        "initContainers": [_c(g, restart="Always" if r else None) for g, r in inits]}
    assert pod_gpus(spec) == pod_needs(spec).gpus
