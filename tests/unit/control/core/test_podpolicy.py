"""The pod-field policy: what a tenant's pod template may set, per namespace (pure).

nodeName and priority are always refused; a priority class or scheduler only from the
allow-lists (every namespace, or the namespace's own entry) or the operator's forced value;
default-scheduler always. Then ``place`` parks such a workload before placement, with the
field's path, on plain manifests through the built-in catalog.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import QueueStep, place
from dispatcher.control.core.podpolicy import Allowed, PodFieldPolicy, refusal, refusals
from dispatcher.workloads.podfields import PodField
from tests.unit.control.placing_builders import given, job

POLICY = PodFieldPolicy(
    allowed=Allowed(priority_classes=frozenset({"batch-low"})),
    by_namespace=MappingProxyType({"team-prod": Allowed(
        priority_classes=frozenset({"prod-high"}), schedulers=frozenset({"volcano"}))}))


def _field(name: str, value: Any) -> PodField:
    return PodField(path=f"spec.template.spec.{name}", field=name, value=value)


@pytest.mark.parametrize(("namespace", "name", "value", "allowed"), [
    ("team-a", "nodeName", "gpu-1", False),           # never, in any namespace
    ("team-prod", "nodeName", "gpu-1", False),
    ("team-prod", "priority", 2000001000, False),     # never: the member computes it
    ("team-a", "priorityClassName", "system-node-critical", False),
    ("team-a", "priorityClassName", "batch-low", True),   # every namespace's list
    ("team-a", "priorityClassName", "prod-high", False),  # another namespace's
    ("team-prod", "priorityClassName", "prod-high", True),
    ("team-prod", "priorityClassName", "batch-low", True),  # lists add up
    ("team-a", "schedulerName", "default-scheduler", True),  # the member's own
    ("team-a", "schedulerName", "volcano", False),
    ("team-prod", "schedulerName", "volcano", True),
    ("team-prod", "schedulerName", 7, False),          # not a name at all
])
def test_per_namespace_rules(namespace: str, name: str, value: Any, allowed: bool) -> None:
    found = refusals([_field(name, value)], namespace=namespace, policy=POLICY)
    assert (found == []) is allowed
    if not allowed:
        assert found[0].startswith(f"spec.template.spec.{name}: ")


def test_by_default_no_class_and_no_other_scheduler_is_allowed() -> None:
    fields = [_field("priorityClassName", "anything"), _field("schedulerName", "mine")]
    message = refusal(fields, namespace="team-a", policy=PodFieldPolicy())
    assert message is not None
    assert "priority class 'anything' is not allowed in namespace team-a (allowed: none" \
        in message
    assert "scheduler 'mine' is not allowed" in message and "default-scheduler" in message
    assert message.endswith("never submitted until it is fixed")


def test_the_forced_value_is_allowed_any_other_refused_not_overwritten() -> None:
    forced = PodFieldPolicy().with_forced(priority_class="batch", scheduler="kai")
    for name, value in (("priorityClassName", "batch"), ("schedulerName", "kai")):
        assert refusal([_field(name, value)], namespace="x", policy=forced) is None
    assert refusal([_field("priorityClassName", "vip")], namespace="x",
                   policy=forced) is not None


def test_a_message_is_bounded_and_escapes_tenant_text() -> None:
    fields = [_field("nodeName", "\x1b[31m" + "n" * 500)] + [
        PodField(path=f"spec.jobs[{i}].nodeName", field="nodeName", value=f"n{i}")
        for i in range(20)]
    message = refusal(fields, namespace="team-a", policy=POLICY)
    assert message is not None
    assert "\x1b" not in message and "\\x1b" in message
    assert "; and 16 more;" in message and len(message) < 1500


def _with_pod(**fields: Any) -> dict[str, Any]:
    body = job()
    body["spec"]["template"]["spec"].update(fields)
    return body


def test_place_parks_a_refused_template_with_the_path_before_any_member() -> None:
    placement = place(given(_with_pod(priorityClassName="system-node-critical")))
    assert placement.reason is PendingReason.POD_TEMPLATE_REFUSED
    assert placement.reason.parked and not placement.reason.unresolved
    assert placement.queue is QueueStep.PARK and placement.reservation is None
    assert placement.decision.chosen is None and not placement.decided
    assert placement.decision.summary.startswith(
        "pod template refused: spec.template.spec.priorityClassName: priority class "
        "'system-node-critical' is not allowed in namespace team-a")


def test_place_refuses_node_name_whatever_the_policy() -> None:
    generous = replace(POLICY, allowed=Allowed(priority_classes=frozenset({"x"}),
                                               schedulers=frozenset({"y"})))
    inp = replace(given(_with_pod(nodeName="a0")), pod_fields=generous)
    placement = place(inp)
    assert placement.reason is PendingReason.POD_TEMPLATE_REFUSED
    assert "spec.template.spec.nodeName: nodeName 'a0'" in placement.decision.summary


def test_place_lets_an_allowed_class_through() -> None:
    inp = replace(given(_with_pod(priorityClassName="batch-low")), pod_fields=POLICY)
    placement = place(inp)
    assert placement.reason is None and placement.decision.chosen == "a"


def test_a_copy_already_on_a_member_is_still_adopted() -> None:
    """A copy made before the rule (or the config) changed is adopted, never left alone
    on the member unrecorded; the rule is for what is submitted from now on."""
    placement = place(given(_with_pod(nodeName="a0"), held=("a",)))
    assert placement.decision.chosen == "a" and placement.queue is QueueStep.LEAVE
