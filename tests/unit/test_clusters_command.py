"""``dispatcher clusters add`` argument checks that run before any cluster is touched.

Covers: ``--create-identity`` without ``--namespace`` or ``--cluster-wide`` is refused with
a message naming both; ``kube-*`` and invalid namespace names are refused; the
cluster-wide and namespace-creation flags need ``--create-identity``; ``--namespaces a,b``
and repeated ``--namespace`` give the same list; ``--help`` shows the examples. The paths
that reach a member or the hub: tests/integration/test_rbac_member.py.
"""

from __future__ import annotations

import pytest

from dispatcher.cli import main
from dispatcher.commands import clusters

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
    assert clusters._namespaces(["a,b", " c ", "b,"]) == ["a", "b", "c", "b"]


def test_help_shows_the_namespaced_and_cluster_wide_examples(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["clusters", "add", "--help"])
    out = capsys.readouterr().out
    assert "--create-identity \\\n      --namespace team-a --namespace team-b" in out
    assert "--create-identity --cluster-wide" in out
