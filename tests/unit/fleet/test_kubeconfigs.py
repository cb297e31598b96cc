"""Kubeconfig flattening (one context, files inlined) and reading from Secrets.

Covers: only the chosen (or current) context survives; CA/cert/key/token files are
inlined relative to the kubeconfig's folder; missing pieces are KubeconfigProblem with a
reason; Secrets with missing keys, bad base64, bad YAML; errors never quote content;
``insecure-skip-tls-verify`` detection. Not covered: exec plugins (kept verbatim).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.fleet import kubeconfigs
from dispatcher.fleet.kubeconfigs import KubeconfigProblem

TOKEN = "sekret-token-4711"


def two_contexts(ca_path: str = "ca.crt") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "east",
        "clusters": [
            {"name": "east", "cluster": {"server": "https://east:6443",
                                         "certificate-authority": ca_path}},
            {"name": "west", "cluster": {"server": "https://west:6443",
                                         "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin-east", "user": {"tokenFile": "token"}},
                  {"name": "admin-west", "user": {"token": TOKEN}}],
        "contexts": [{"name": "east", "context": {"cluster": "east", "user": "admin-east"}},
                     {"name": "west", "context": {"cluster": "west", "user": "admin-west",
                                                  "namespace": "ml"}}],
    }


def test_flatten_keeps_only_the_chosen_context_and_inlines_files(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA PEM")
    (tmp_path / "token").write_text(TOKEN + "\n")
    flat = kubeconfigs.flatten(two_contexts(), base_dir=tmp_path)
    assert flat["current-context"] == "east"
    assert [c["name"] for c in flat["contexts"]] == ["east"]
    assert [c["name"] for c in flat["clusters"]] == ["east"]
    cluster = flat["clusters"][0]["cluster"]
    assert "certificate-authority" not in cluster
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA PEM"
    assert flat["users"] == [{"name": "admin-east", "user": {"token": TOKEN}}]


def test_flatten_named_context() -> None:
    flat = kubeconfigs.flatten(two_contexts(), context="west")
    assert flat["current-context"] == "west"
    assert flat["contexts"][0]["context"] == {"cluster": "west", "user": "admin-west",
                                              "namespace": "ml"}
    assert kubeconfigs.skips_tls_verify(flat)
    assert not kubeconfigs.skips_tls_verify(two_contexts())


@pytest.mark.parametrize(("context", "fragment"), [
    ("nowhere", "no context named 'nowhere'"),
])
def test_flatten_missing_context(context: str, fragment: str) -> None:
    with pytest.raises(KubeconfigProblem, match=fragment) as caught:
        kubeconfigs.flatten(two_contexts(), context=context)
    assert caught.value.reason == "KubeconfigInvalid"


def test_flatten_missing_file_names_the_file_not_the_content(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigProblem, match="certificate-authority file"):
        kubeconfigs.flatten(two_contexts(), base_dir=tmp_path)


def secret(data: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": "dispatcher-system", "name": "m-kubeconfig"},
            "data": data}


def test_from_secret_round_trip() -> None:
    flat = kubeconfigs.flatten(two_contexts(), context="west")
    encoded = base64.b64encode(yaml.safe_dump(flat).encode()).decode()
    assert kubeconfigs.from_secret(secret({"kubeconfig": encoded})) == flat


@pytest.mark.parametrize(("data", "reason"), [
    ({}, "SecretMissing"),
    ({"other": "eA=="}, "SecretMissing"),
    ({"kubeconfig": "%%%not-base64"}, "KubeconfigInvalid"),
    ({"kubeconfig": base64.b64encode(b"just a string").decode()}, "KubeconfigInvalid"),
    ({"kubeconfig": base64.b64encode(f"token: {TOKEN}\n  bad: [".encode()).decode()},
     "KubeconfigInvalid"),
])
def test_from_secret_problems(data: dict[str, str], reason: str) -> None:
    with pytest.raises(KubeconfigProblem) as caught:
        kubeconfigs.from_secret(secret(data))
    assert caught.value.reason == reason
    assert TOKEN not in str(caught.value)


@given(st.binary(max_size=200))
def test_from_secret_never_crashes_and_never_echoes(raw: bytes) -> None:
    """Any bytes give a dict or a KubeconfigProblem whose message is one of the fixed ones."""
    encoded = base64.b64encode(raw).decode()
    try:
        parsed = kubeconfigs.from_secret(secret({"kubeconfig": encoded}))
    except KubeconfigProblem as exc:
        assert exc.reason == "KubeconfigInvalid"
        assert str(exc).startswith("Secret dispatcher-system/m-kubeconfig key 'kubeconfig' is ")
        assert str(exc).endswith(("not base64 text", "not valid YAML",
                                  "not a kubeconfig mapping"))
    else:
        assert isinstance(parsed, dict)
