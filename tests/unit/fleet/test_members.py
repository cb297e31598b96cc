"""Member specs from MemberCluster objects and static members, and when they reconnect.

Covers: defaults (Secret namespace, key), labels/cordon/allowed namespaces, missing
required fields, static members, ``same_source`` (credentials source) versus metadata-only
changes. Not covered: the runtime acting on them (integration tests).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dispatcher.fleet import members
from dispatcher.fleet.members import SecretRef
from dispatcher.fleet.settings import StaticMember


def member_cluster(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "east", "labels": {"region": "us-east"}},
            "spec": {"kubeconfigSecretRef": {"name": "east-kubeconfig"}, **spec}}


def test_defaults_and_fields() -> None:
    spec = members.from_member_cluster(member_cluster(cordoned=True, context="admin",
                                                      allowedNamespaces=["ml", "ci"]))
    assert spec.secret == SecretRef(namespace="dispatcher-system", name="east-kubeconfig",
                                    key="kubeconfig")
    assert (spec.name, spec.context, spec.cordoned) == ("east", "admin", True)
    assert dict(spec.labels) == {"region": "us-east"}
    assert spec.allowed_namespaces == ("ml", "ci")
    assert not spec.static


@pytest.mark.parametrize("obj", [
    {"metadata": {}, "spec": {"kubeconfigSecretRef": {"name": "x"}}},
    {"metadata": {"name": "east"}, "spec": {}},
    {"metadata": {"name": "east"}, "spec": {"kubeconfigSecretRef": "not-a-map"}},
])
def test_invalid_objects(obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="MemberCluster"):
        members.from_member_cluster(obj)


def test_same_source_ignores_metadata_but_not_credentials() -> None:
    base = members.from_member_cluster(member_cluster())
    relabelled = members.from_member_cluster(
        {**member_cluster(cordoned=True), "metadata": {"name": "east", "labels": {"a": "b"}}})
    assert base.same_source(relabelled)
    assert base != relabelled
    other_secret = replace(base, secret=SecretRef(namespace="x", name="east-kubeconfig"))
    assert not base.same_source(other_secret)
    assert not base.same_source(replace(base, context="other"))


def test_static_member() -> None:
    spec = members.from_static(StaticMember(name="dev", kubeconfig="/k", context="c",
                                            labels={"tier": "dev"}, cordoned=True))
    assert (spec.path, spec.context, spec.static, spec.secret) == ("/k", "c", True, None)
    assert dict(spec.labels) == {"tier": "dev"}


def test_gang_scheduling_is_auto_unless_the_spec_says_so() -> None:
    """``spec.gangScheduling`` names the member scheduler's gang mechanism; a change is
    metadata (no reconnect); a value outside the list is refused (the CRD's enum, for a
    MemberCluster written around it)."""
    base = members.from_member_cluster(member_cluster())
    assert base.gang_scheduling == "auto"
    chosen = members.from_member_cluster(member_cluster(gangScheduling="none"))
    assert chosen.gang_scheduling == "none" and base.same_source(chosen)
    with pytest.raises(ValueError, match="gangScheduling"):
        members.from_member_cluster(member_cluster(gangScheduling="volcano"))
    static = members.from_static(StaticMember(name="dev", kubeconfig="/k",
                                              gang_scheduling="workload-api"))
    assert static.gang_scheduling == "workload-api"
