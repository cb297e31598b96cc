"""The member identity's pure parts: which manifests are applied, what kubeconfig is minted.

Covers: deploy/member loads as one ServiceAccount plus RBAC and a token Secret; the base
(namespaced, the default) binds nothing that writes cluster-wide and names kube-system only
in the kube-system namespace ``get``; the cluster-wide overlay is the only ClusterRoleBinding
of the write role; ``plan`` refuses to pick an install silently, binds the write role once
per listed namespace and never in kube-*; leaving out namespace creation drops exactly the
objects labelled for it; folder entries, cycles, repeats, kustomizations with transformers
and malformed documents; the minted kubeconfig keeps the admin context's server and CA but
none of its credentials (property over random admin users).
Not covered here: applying and minting against an apiserver
(tests/integration/test_rbac_member.py).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.fleet import identity
from dispatcher.fleet.identity import IdentityError

MEMBER_DIR = Path(__file__).resolve().parents[3] / "deploy" / "member"


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)


WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "bind", "escalate",
               "impersonate", "approve", "sign"}
SUBJECT = [{"kind": "ServiceAccount", "name": "dispatcher-member",
            "namespace": "dispatcher-system"}]


def all_member_docs() -> list[tuple[Path, dict[str, Any]]]:
    """Every document of every YAML file under deploy/member, overlays included."""
    out = []
    for path in sorted(MEMBER_DIR.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            out += [(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def test_deploy_member_is_one_service_account_with_its_rbac_and_token_secret() -> None:
    docs = identity.load_manifests(MEMBER_DIR)
    assert kinds(docs) == [
        "ClusterRole/dispatcher-member", "ClusterRole/dispatcher-member-write",
        "ClusterRoleBinding/dispatcher-member",
        "Namespace/dispatcher-system", "Secret/dispatcher-member-token",
        "ServiceAccount/dispatcher-member"]
    assert identity.service_account_of(docs) == ("dispatcher-system", "dispatcher-member")
    for binding in (d for d in docs if d["kind"] == "ClusterRoleBinding"):
        assert binding["subjects"] == SUBJECT


def test_base_binds_no_write_cluster_wide() -> None:
    docs = identity.load_manifests(MEMBER_DIR)
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    bound = [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert bound == ["dispatcher-member"]
    assert not [d for d in docs if d["kind"] in ("RoleBinding", "Role")]
    for name in bound:
        for rule in roles[name]["rules"]:
            assert not set(rule["verbs"]) & WRITE_VERBS, rule
    # the write role exists, unbound, for the RoleBindings
    write = roles["dispatcher-member-write"]
    assert write["metadata"]["labels"][identity.PART_LABEL] == identity.WRITE_PART
    assert {"create", "patch", "delete"} <= {v for r in write["rules"] for v in r["verbs"]}


def test_base_names_kube_system_only_to_read_that_namespace() -> None:
    docs = identity.load_manifests(MEMBER_DIR)
    mentions = [rule for d in docs if d["kind"] in ("ClusterRole", "Role")
                for rule in d["rules"] if "kube-system" in yaml.safe_dump(rule)]
    assert mentions == [{"apiGroups": [""], "resources": ["namespaces"],
                         "resourceNames": ["kube-system"], "verbs": ["get"]}]
    for doc in docs:
        assert (doc.get("metadata") or {}).get("namespace") in (None, "dispatcher-system")
        assert not str((doc.get("metadata") or {}).get("namespace", "")).startswith("kube-")


def test_the_cluster_wide_overlay_is_the_only_cluster_wide_binding_of_the_write_role() -> None:
    found = [(path.relative_to(MEMBER_DIR).as_posix(), d["metadata"]["name"])
             for path, d in all_member_docs()
             if d["kind"] == "ClusterRoleBinding"
             and d["roleRef"]["name"] == "dispatcher-member-write"]
    assert found == [("cluster-wide/clusterrolebinding-write.yaml", "dispatcher-member-write")]
    overlay = identity.load_manifests(MEMBER_DIR / identity.CLUSTER_WIDE_DIR)
    base = identity.load_manifests(MEMBER_DIR)
    assert kinds(overlay) == sorted([*kinds(base), "ClusterRole/dispatcher-member-namespaces",
                                     "ClusterRoleBinding/dispatcher-member-namespaces",
                                     "ClusterRoleBinding/dispatcher-member-write"])
    for binding in (d for d in overlay if d["kind"] == "ClusterRoleBinding"):
        assert binding["subjects"] == SUBJECT
    header = (MEMBER_DIR / "cluster-wide" / "kustomization.yaml").read_text()
    assert "kube-system" in header and "allowedNamespaces" in header and "Risk" in header


def test_without_namespace_creation_no_rule_grants_namespace_create() -> None:
    overlay = MEMBER_DIR / identity.CLUSTER_WIDE_DIR
    docs = identity.load_manifests(overlay, create_namespaces=False)
    names = kinds(docs)
    assert "ClusterRole/dispatcher-member-namespaces" not in names
    assert "ClusterRoleBinding/dispatcher-member-namespaces" not in names
    for role in (d for d in docs if d["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            assert not ("namespaces" in rule["resources"] and "create" in rule["verbs"])
    with_create = identity.load_manifests(overlay, create_namespaces=True)
    assert len(with_create) == len(docs) + 2
    # the namespaced base never grants namespace creation
    for role in (d for d in identity.load_manifests(MEMBER_DIR) if d["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            assert not ("namespaces" in rule["resources"] and "create" in rule["verbs"])


def test_plan_without_a_choice_is_an_error_that_says_what_to_choose() -> None:
    with pytest.raises(IdentityError, match=r"--namespace.*--cluster-wide"):
        identity.plan(MEMBER_DIR)


def test_namespaced_plan_binds_the_write_role_once_per_namespace() -> None:
    docs = identity.plan(MEMBER_DIR, namespaces=["team-a", "team-b", "team-a"])
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in bindings] == [
        ("team-a", "dispatcher-member"), ("team-b", "dispatcher-member")]
    for binding in bindings:
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                      "kind": "ClusterRole", "name": "dispatcher-member-write"}
        assert binding["subjects"] == SUBJECT
        assert binding["metadata"]["labels"][identity.COMPONENT_LABEL] == identity.COMPONENT
    assert not [d for d in docs if d["kind"] == "Namespace"
                and d["metadata"]["name"] != "dispatcher-system"]
    assert [d for d in docs if d["kind"] == "ClusterRoleBinding"] == [
        d for d in identity.load_manifests(MEMBER_DIR) if d["kind"] == "ClusterRoleBinding"]
    # the listed namespaces are created by create_identity (POST, with their Pod Security
    # labels), never applied over an existing one
    created = identity.plan(MEMBER_DIR, namespaces=["team-a"], create_namespaces=True)
    assert [d["metadata"]["name"] for d in created if d["kind"] == "Namespace"] == [
        "dispatcher-system"]


def test_cluster_wide_plan_is_the_overlay() -> None:
    docs = identity.plan(MEMBER_DIR, cluster_wide=True)
    assert kinds(docs) == kinds(identity.load_manifests(
        MEMBER_DIR / identity.CLUSTER_WIDE_DIR, create_namespaces=False))
    assert not [d for d in docs if d["kind"] == "RoleBinding"]
    assert kinds(identity.plan(MEMBER_DIR, cluster_wide=True, namespaces=["ml"],
                               create_namespaces=True)) == kinds(
        identity.load_manifests(MEMBER_DIR / identity.CLUSTER_WIDE_DIR))


@pytest.mark.parametrize("name", ["kube-system", "kube-public", "kube-node-lease", "kube-x"])
def test_kube_namespaces_are_refused(name: str) -> None:
    with pytest.raises(IdentityError, match="kube-"):
        identity.plan(MEMBER_DIR, namespaces=["team-a", name])
    with pytest.raises(IdentityError, match="kube-"):
        identity.plan(MEMBER_DIR, namespaces=[name], cluster_wide=True)


@pytest.mark.parametrize("name", ["", "Team", "a_b", "-a", "a" * 64, "a.b"])
def test_invalid_namespace_names_are_refused(name: str) -> None:
    with pytest.raises(IdentityError, match="not a valid namespace"):
        identity.check_namespaces([name])


@given(st.lists(st.sampled_from(["team-a", "team-b", "ml", "default", "x1"]), max_size=8))
def test_check_namespaces_keeps_the_first_of_each_in_order(names: list[str]) -> None:
    assert identity.check_namespaces(names) == tuple(dict.fromkeys(names))


def write(tmp: Path, name: str, content: Any) -> None:
    (tmp / name).write_text(content if isinstance(content, str) else yaml.safe_dump(content))


def test_kustomization_with_transformers_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "kustomization.yaml", {"resources": ["sa.yaml"], "namespace": "other"})
    write(tmp_path, "sa.yaml", {"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": "x", "namespace": "y"}})
    with pytest.raises(IdentityError, match=r"only 'resources'.*namespace"):
        identity.load_manifests(tmp_path)


@pytest.mark.parametrize("content", ["- not a mapping\n", "kind: Secret\n",
                                     "apiVersion: v1\nkind: [x\n"])
def test_malformed_documents_are_refused(tmp_path: Path, content: str) -> None:
    write(tmp_path, "kustomization.yaml", {"resources": ["bad.yaml"]})
    write(tmp_path, "bad.yaml", content)
    with pytest.raises(IdentityError):
        identity.load_manifests(tmp_path)


def test_folder_entries_are_read_like_a_base(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "over").mkdir()
    write(tmp_path / "base", "kustomization.yaml", {"resources": ["sa.yaml"]})
    write(tmp_path / "base", "sa.yaml", {"apiVersion": "v1", "kind": "ServiceAccount",
                                         "metadata": {"name": "x", "namespace": "y"}})
    write(tmp_path / "over", "kustomization.yaml", {"resources": ["../base", "ns.yaml"]})
    write(tmp_path / "over", "ns.yaml", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": "y"}})
    assert kinds(identity.load_manifests(tmp_path / "over")) == [
        "Namespace/y", "ServiceAccount/x"]


def test_cycles_and_repeats_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    write(tmp_path / "a", "kustomization.yaml", {"resources": [".."]})
    write(tmp_path, "kustomization.yaml", {"resources": ["a"]})
    with pytest.raises(IdentityError, match="cycle"):
        identity.load_manifests(tmp_path)
    write(tmp_path, "kustomization.yaml", {"resources": ["sa.yaml", "sa.yaml"]})
    write(tmp_path, "sa.yaml", {"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": "x", "namespace": "y"}})
    with pytest.raises(IdentityError, match="twice"):
        identity.load_manifests(tmp_path)


def test_missing_kustomization_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(IdentityError, match=r"kustomization\.yaml"):
        identity.load_manifests(tmp_path)


def test_service_account_must_be_unique() -> None:
    sa = {"kind": "ServiceAccount", "metadata": {"name": "a", "namespace": "n"}}
    with pytest.raises(IdentityError, match="exactly one"):
        identity.service_account_of([sa, {**sa, "metadata": {"name": "b"}}])
    with pytest.raises(IdentityError, match="found 0"):
        identity.service_account_of([])


CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfake\n").decode()

user_sections = st.fixed_dictionaries({}, optional={
    "token": st.text(min_size=1, max_size=20),
    "client-certificate-data": st.just(CA),
    "client-key-data": st.just(CA),
    "exec": st.just({"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}),
    "username": st.just("admin"), "password": st.just("hunter2"),
})


@given(user=user_sections, namespace=st.none() | st.sampled_from(["ml", "default"]))
def test_minted_kubeconfig_keeps_server_and_ca_but_no_admin_credential(
        user: dict[str, Any], namespace: str | None) -> None:
    context: dict[str, Any] = {"cluster": "east", "user": "root"}
    if namespace:
        context["namespace"] = namespace
    admin = {"apiVersion": "v1", "kind": "Config", "current-context": "admin@east",
             "clusters": [{"name": "east", "cluster": {
                 "server": "https://east:6443", "certificate-authority-data": CA}},
                          {"name": "west", "cluster": {"server": "https://west:6443"}}],
             "users": [{"name": "root", "user": user}],
             "contexts": [{"name": "admin@east", "context": context}]}
    minted = identity.token_kubeconfig(admin, token="sa-token", user="dispatcher-member")
    assert minted["clusters"] == [{"name": "east", "cluster": {
        "server": "https://east:6443", "certificate-authority-data": CA}}]
    assert minted["users"] == [{"name": "dispatcher-member", "user": {"token": "sa-token"}}]
    ctx = minted["contexts"][0]
    assert minted["current-context"] == ctx["name"] == "dispatcher-member@east"
    assert ctx["context"].get("namespace") == namespace
    text = yaml.safe_dump(minted)
    for secret in ("hunter2", "aws", "client-key-data"):
        assert secret not in text


def test_manifest_folder_can_come_from_the_environment(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(identity.MANIFESTS_ENV, raising=False)
    assert identity.identity_dir() == MEMBER_DIR
    monkeypatch.setenv(identity.MANIFESTS_ENV, str(tmp_path))
    assert identity.identity_dir() == tmp_path
