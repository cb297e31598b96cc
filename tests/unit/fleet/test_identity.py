"""The member identity's pure parts: which manifests are applied, what kubeconfig is minted.

Covers: deploy/member loads as one ServiceAccount plus RBAC and a token Secret; leaving out
namespace creation drops exactly the objects labelled for it; kustomizations with
transformers and malformed documents are refused; the minted kubeconfig keeps the admin
context's server and CA but none of its credentials (property over random admin users).
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


def test_deploy_member_is_one_service_account_with_its_rbac_and_token_secret() -> None:
    docs = identity.load_manifests(MEMBER_DIR)
    assert kinds(docs) == [
        "ClusterRole/dispatcher-member", "ClusterRole/dispatcher-member-namespaces",
        "ClusterRoleBinding/dispatcher-member", "ClusterRoleBinding/dispatcher-member-namespaces",
        "Namespace/dispatcher-system", "Secret/dispatcher-member-token",
        "ServiceAccount/dispatcher-member"]
    assert identity.service_account_of(docs) == ("dispatcher-system", "dispatcher-member")
    for binding in (d for d in docs if d["kind"] == "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dispatcher-member",
                                        "namespace": "dispatcher-system"}]


def test_without_namespace_creation_no_rule_grants_namespace_create() -> None:
    docs = identity.load_manifests(MEMBER_DIR, create_namespaces=False)
    names = kinds(docs)
    assert "ClusterRole/dispatcher-member-namespaces" not in names
    assert "ClusterRoleBinding/dispatcher-member-namespaces" not in names
    for role in (d for d in docs if d["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            assert not ("namespaces" in rule["resources"] and "create" in rule["verbs"])
    with_create = identity.load_manifests(MEMBER_DIR, create_namespaces=True)
    assert len(with_create) == len(docs) + 2


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
