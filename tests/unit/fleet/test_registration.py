"""Manifests ``dispatcher clusters add`` applies: Secret and MemberCluster."""

from __future__ import annotations

import base64

import yaml

from dispatcher.fleet import members, registration


def test_secret_holds_the_kubeconfig_and_the_member_label() -> None:
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c"}
    secret = registration.secret_manifest(member="east", kubeconfig=kubeconfig)
    assert secret["metadata"] == {"name": "east-kubeconfig", "namespace": "dispatcher-system",
                                  "labels": {members.MEMBER_LABEL: "east"}}
    assert yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"])) == kubeconfig


def test_member_cluster_points_at_the_secret_and_parses_back() -> None:
    obj = registration.member_cluster_manifest(member="east", labels={"region": "us"},
                                               cordoned=True)
    spec = members.from_member_cluster(obj)
    assert spec.secret == members.SecretRef(namespace="dispatcher-system",
                                            name="east-kubeconfig")
    assert (spec.cordoned, dict(spec.labels), spec.context) == (True, {"region": "us"}, None)
    assert "allowedNamespaces" not in obj["spec"]  # an update keeps what the object has


def test_member_cluster_carries_the_allowed_namespaces_given() -> None:
    obj = registration.member_cluster_manifest(member="east", labels={}, cordoned=False,
                                               allowed_namespaces=("team-a", "team-b"))
    assert obj["spec"]["allowedNamespaces"] == ["team-a", "team-b"]
    assert members.from_member_cluster(obj).allowed_namespaces == ("team-a", "team-b")
