"""One pod's needs: the DESIGN.md GPU rule, sidecars, quantities, product, tolerations."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.workloads.podspec import pod_needs
from dispatcher.workloads.quantity import format_cpu, format_memory, parse_quantity


def _c(name: str, *, limits: dict[str, Any] | None = None,
       requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources, **extra}


def test_gpus_limits_else_requests_summed_over_containers() -> None:
    spec = {"containers": [_c("a", limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 1}),
                           _c("b", requests={"nvidia.com/gpu": "3"}), _c("c")]}
    assert pod_needs(spec).gpus == 5


def test_init_containers_take_the_max_and_sidecars_add() -> None:
    big_init = {"containers": [_c("a", limits={"nvidia.com/gpu": 2})],
                "initContainers": [_c("i", limits={"nvidia.com/gpu": 8})]}
    assert pod_needs(big_init).gpus == 8
    small_init = {"containers": [_c("a", limits={"nvidia.com/gpu": 4})],
                  "initContainers": [_c("i", limits={"nvidia.com/gpu": 1})]}
    assert pod_needs(small_init).gpus == 4
    sidecar = {"containers": [_c("a", limits={"nvidia.com/gpu": 4})],
               "initContainers": [_c("s", limits={"nvidia.com/gpu": 1}, restartPolicy="Always"),
                                  _c("i", limits={"nvidia.com/gpu": 4})]}
    assert pod_needs(sidecar).gpus == 5  # 4 + sidecar 1, and the init step 1 + 4


def test_cpu_and_memory_requests_formatted() -> None:
    spec = {"containers": [_c("a", requests={"cpu": "500m", "memory": "1Gi"}),
                           _c("b", requests={"cpu": "1.5", "memory": "512Mi"}),
                           _c("c", limits={"cpu": 1, "memory": "1G"})]}
    needs = pod_needs(spec)
    assert needs.cpu == "3"
    assert needs.memory == "2610612736"  # 1Gi + 512Mi + 1G: no exact suffix
    assert pod_needs({"containers": [_c("a")]}).cpu is None


@pytest.mark.parametrize(("terms", "product"), [
    ([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["H100"]}]}], "H100"),
    ([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["H100"]}]},
      {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["H100"]}, {"key": "zone", "operator": "In",
                                                   "values": ["a"]}]}], "H100"),
    ([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["H100", "A100"]}]}], None),
    ([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["H100"]}]},
      {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["A100"]}]}], None),
    ([{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "NotIn",
                             "values": ["H100"]}]}], None),
    ([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}], None)])
def test_product_from_required_affinity(terms: list[Any], product: str | None) -> None:
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}}
    assert pod_needs(spec).gpu_product == product


def test_node_selector_product_wins_and_other_labels_are_kept() -> None:
    needs = pod_needs({"nodeSelector": {"nvidia.com/gpu.product": "L4", "pool": "gpu"},
                       "tolerations": [{"key": "gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}, {"key": "x", "value": "y"}]})
    assert needs.gpu_product == "L4"
    assert dict(needs.node_selector) == {"pool": "gpu"}
    assert [(t.key, t.operator, t.value, t.effect) for t in needs.tolerations] == [
        ("gpu", "Exists", "", "NoSchedule"), ("x", "Equal", "y", "")]


@pytest.mark.parametrize(("spec", "message"), [
    ({"containers": "x"}, "containers must be a list"),
    ({"containers": [1]}, r"containers\[0\] must be an object"),
    ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}, "whole number"),
    ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "many"}}}]}, "not a quantity"),
    ({"nodeSelector": {"a": 1}}, "must be a string"),
    ({"tolerations": [{"effect": "Sometimes"}]}, "not a taint effect"),
    ("spec", "must be an object")])
def test_wrong_types_are_clear_errors(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pod_needs(spec)


@given(st.integers(0, 10**6), st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "M", "G"]))
def test_quantity_round_trip(number: int, suffix: str) -> None:
    value = parse_quantity(f"{number}{suffix}")
    assert parse_quantity(format_memory(Fraction(value))) == value
    assert parse_quantity(format_cpu(Fraction(value))) == value
