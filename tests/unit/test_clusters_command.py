"""``dispatcher clusters add`` argument checks that run before any cluster is touched.

Covers: ``--create-identity`` without ``--namespace`` or ``--cluster-wide`` is refused with
a message naming both; ``kube-*`` and invalid namespace names are refused; the
cluster-wide and namespace-creation flags need ``--create-identity``; ``--namespaces a,b``
and repeated ``--namespace`` give the same list; ``--help`` shows the examples; a kubeconfig
that would reach the member unverified (insecure-skip-tls-verify, http://) or has no server
is refused before anything is contacted, and ``--allow-insecure-tls`` turns the refusal into
a warning. The paths
that reach a member or the hub: tests/integration/test_rbac_member.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.commands import clustersadd

ABSENT = "/nonexistent/kubeconfig.yaml"


def add(*extra: str) -> list[str]:
    return ["clusters", "add", "east", "--kubeconfig", ABSENT, *extra]


def test_create_identity_needs_a_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(add("--create-identity")) == 2
    err = capsys.readouterr().err
    assert "--namespace" in err and "--cluster-wide" in err and "kube-system" in err


@pytest.mark.parametrize("namespaces", ["kube-system", "team-a,kube-public", "Team_A"])
def test_system_and_invalid_namespaces_are_refused(namespaces: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(add("--create-identity", "--namespaces", namespaces)) == 2
    assert "namespace" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--cluster-wide", "--create-namespaces"])
def test_identity_flags_need_create_identity(flag: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(add(flag)) == 2
    assert "--create-identity" in capsys.readouterr().err


def test_repeated_and_comma_separated_namespaces_are_one_list() -> None:
    assert clustersadd.split_namespaces(["a,b", " c ", "b,"]) == ["a", "b", "c", "b"]


def test_help_shows_the_namespaced_and_cluster_wide_examples(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["clusters", "add", "--help"])
    out = capsys.readouterr().out
    assert "--create-identity \\\n      --namespace team-a --namespace team-b" in out
    assert "--create-identity --cluster-wide" in out


def _kubeconfig_file(tmp_path: Path, cluster: dict[str, Any]) -> str:
    path = tmp_path / "member.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "sekret-add-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


INSECURE_CLUSTERS = {
    "skip-verify": ({"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
                    "insecure-skip-tls-verify"),
    "http": ({"server": "http://127.0.0.1:1"}, "http://"),
}


@pytest.mark.parametrize("case", sorted(INSECURE_CLUSTERS))
def test_an_unverified_kubeconfig_is_refused_before_anything_is_contacted(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, fragment = INSECURE_CLUSTERS[case]
    path = _kubeconfig_file(tmp_path, cluster)
    # --create-identity would send the admin credentials to the member first: refused too
    for extra in ((), ("--create-identity", "--namespace", "team-a")):
        assert main(["clusters", "add", "east", "--kubeconfig", path, *extra,
                     "--hub-kubeconfig", ABSENT]) == 2
        err = capsys.readouterr().err
        assert fragment in err and "--allow-insecure-tls" in err
        assert "fleet.allowInsecureTLS" in err and "sekret-add-token" not in err


@pytest.mark.parametrize("case", sorted(INSECURE_CLUSTERS))
def test_allow_insecure_tls_warns_then_goes_on(case: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cluster, fragment = INSECURE_CLUSTERS[case]
    path = _kubeconfig_file(tmp_path, cluster)
    # past the check: the (absent) hub kubeconfig is the next thing that fails
    assert main(["clusters", "add", "east", "--kubeconfig", path, "--allow-insecure-tls",
                 "--hub-kubeconfig", ABSENT]) == 1
    err = capsys.readouterr().err
    assert err.startswith("warning: --allow-insecure-tls: the kubeconfig of east ")
    assert fragment in err and "TLSVerified=False" in err
    assert ABSENT in err  # the hub was tried after the warning


def test_a_kubeconfig_without_a_server_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _kubeconfig_file(tmp_path, {"certificate-authority-data": "Q0E="})
    assert main(["clusters", "add", "east", "--kubeconfig", path,
                 "--hub-kubeconfig", ABSENT]) == 2
    assert "has no server" in capsys.readouterr().err
