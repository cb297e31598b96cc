"""What a member kubeconfig may contain: data only on the hub, https:// for every member.

Covers: each file-reading key (``tokenFile``, ``client-certificate``, ``client-key``,
``certificate-authority``) is refused in a kubeconfig read from a Secret, in any entry and
with any value, the message naming the key and its inline replacement but not the path;
exec/auth-provider are refused by presence; the list of file keys is the installed
kubernetes_asyncio loader's own (read from its source, so an upgrade that reads another
file fails here); ``transport_risk`` on every server shape; a static member's relative file
references resolve against its file's folder; the ``TLSVerified`` condition per risk.
The behaviour against a listener and real apiservers: tests/security/test_kubeconfig_data.py.
"""

from __future__ import annotations

import ast
import base64
import copy
import inspect
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.config import kube_config

from dispatcher.fleet import health, kubeconfigs, status
from dispatcher.fleet.kubeconfigs import (
    FILE_KEYS,
    PLAIN_HTTP,
    SKIP_VERIFY,
    KubeconfigProblem,
    data_only_problem,
    file_reference,
    from_secret,
    transport_risk,
)

PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def data_only() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "m",
        "clusters": [{"name": "m", "cluster": {"server": "https://m.example:6443",
                                               "certificate-authority-data": "Q0E="}},
                     {"name": "other", "cluster": {"server": "https://other:6443"}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}},
                  {"name": "spare", "user": {"client-certificate-data": "Qw==",
                                             "client-key-data": "Sw=="}}],
        "contexts": [{"name": "m", "context": {"cluster": "m", "user": "u"}},
                     {"name": "o", "context": {"cluster": "other", "user": "spare"}}]}


def with_key(section: str, index: int, key: str, value: Any) -> dict[str, Any]:
    out = data_only()
    out["clusters" if section == "cluster" else "users"][index][section][key] = value
    return out


def secret(kubeconfig: dict[str, Any]) -> dict[str, Any]:
    text = yaml.safe_dump(kubeconfig)
    return {"metadata": {"namespace": "dispatcher-system", "name": "m-kubeconfig"},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


FILE_CASES = [(section, key, data_key) for section, keys in FILE_KEYS.items()
              for key, data_key in keys.items()]


def test_the_file_keys_are_the_four_the_loader_reads() -> None:
    assert {key for _, key, _ in FILE_CASES} == {
        "tokenFile", "client-certificate", "client-key", "certificate-authority"}


def test_a_data_only_kubeconfig_passes() -> None:
    assert data_only_problem(data_only()) == ""
    assert from_secret(secret(data_only())) == data_only()


@pytest.mark.parametrize(("section", "key", "data_key"), FILE_CASES)
@pytest.mark.parametrize("index", [0, 1])  # the current context's entry, and another one
@pytest.mark.parametrize("value", [PATH, "relative/file", "", None])
def test_every_file_key_is_refused_in_a_secret(section: str, key: str, data_key: str,
                                               index: int, value: Any) -> None:
    kubeconfig = with_key(section, index, key, value)
    message = file_reference(kubeconfig)
    assert message.startswith(f"{key} (in {section} ")
    assert data_key in message and "data only" in message
    assert PATH not in message and "relative/file" not in message
    with pytest.raises(KubeconfigProblem) as caught:
        from_secret(secret(kubeconfig))
    assert caught.value.reason == "KubeconfigInvalid"
    assert key in str(caught.value)
    # as the fleet reports it: the condition message is cut at 300, the key survives
    assert key in health.classify(caught.value).message


def test_the_message_survives_a_long_entry_name() -> None:
    kubeconfig = with_key("user", 0, "tokenFile", PATH)
    kubeconfig["users"][0]["name"] = "x" * 5000
    kubeconfig["contexts"][0]["context"]["user"] = "x" * 5000
    with pytest.raises(KubeconfigProblem) as caught:
        from_secret(secret(kubeconfig))
    text = health.classify(caught.value).message
    assert "tokenFile" in text and text.endswith("(dispatcher clusters add inlines files)")


@pytest.mark.parametrize("plugin", ["exec", "auth-provider"])
@pytest.mark.parametrize("value", [{"command": "sh"}, {}, None])
def test_credential_plugins_are_refused_by_presence(plugin: str, value: Any) -> None:
    kubeconfig = with_key("user", 1, plugin, value)
    assert plugin in data_only_problem(kubeconfig)
    with pytest.raises(KubeconfigProblem, match=plugin):
        from_secret(secret(kubeconfig))


def _file_or_data_keys() -> set[tuple[str, str]]:
    """(section, file key) of every ``FileOrData(self._cluster|self._user, "key", ...)`` call
    in the installed loader; a call on anything else (the exec plugin's output) has None."""
    tree = ast.parse(inspect.getsource(kube_config))
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "FileOrData"):
            continue
        obj, key = node.args[0], node.args[1]
        if isinstance(key, ast.Constant) and key.value is None:
            continue  # exec plugin output: inline data only, and exec is refused anyway
        assert isinstance(key, ast.Constant) and isinstance(key.value, str), ast.dump(node)
        assert isinstance(obj, ast.Attribute) and obj.attr in ("_cluster", "_user"), \
            ast.dump(node)
        found.add((obj.attr.removeprefix("_"), key.value))
    return found


def test_the_file_keys_match_the_installed_loader() -> None:
    assert _file_or_data_keys() == {(section, key) for section, key, _ in FILE_CASES}


@pytest.mark.parametrize(("server", "extra", "risk"), [
    ("https://m.example:6443", {}, ""),
    ("https://10.0.0.1", {"insecure-skip-tls-verify": False}, ""),
    ("https://m.example:6443", {"insecure-skip-tls-verify": True}, SKIP_VERIFY),
    # a string is truthy to the loader too (verify_ssl = not value): unverified
    ("https://m.example:6443", {"insecure-skip-tls-verify": "false"}, SKIP_VERIFY),
    ("http://127.0.0.1:8080", {}, PLAIN_HTTP),
    ("http://127.0.0.1:8080", {"insecure-skip-tls-verify": True}, PLAIN_HTTP),
])
def test_transport_risk(server: str, extra: dict[str, Any], risk: str) -> None:
    kubeconfig = data_only()
    kubeconfig["clusters"][0]["cluster"] = {"server": server, **extra}
    assert transport_risk(kubeconfig) == risk


@pytest.mark.parametrize(("server", "fragment"), [
    (None, "has no server"),
    ("", "has no server"),
    (6443, "has no server"),
    ("127.0.0.1:6443", "not an https:// URL"),
    ("HTTPS://m.example", "not an https:// URL"),
    ("ftp://m.example", "not an https:// URL"),
    ("https://", "not an https:// URL"),
    ("https:///version", "not an https:// URL"),
])
def test_servers_that_are_no_https_url_are_refused(server: Any, fragment: str) -> None:
    kubeconfig = data_only()
    cluster = kubeconfig["clusters"][0]["cluster"]
    cluster.pop("server")
    if server is not None:
        cluster["server"] = server
    with pytest.raises(KubeconfigProblem, match=fragment) as caught:
        transport_risk(kubeconfig)
    assert caught.value.reason == "KubeconfigInvalid"


def test_transport_risk_is_the_chosen_contexts() -> None:
    kubeconfig = data_only()
    kubeconfig["clusters"][1]["cluster"] = {"server": "http://other:8080"}
    assert transport_risk(kubeconfig) == ""
    assert transport_risk(kubeconfig, context="o") == PLAIN_HTTP


def test_a_static_members_relative_files_resolve_against_its_folder(tmp_path: Path) -> None:
    kubeconfig = copy.deepcopy(data_only())
    kubeconfig["clusters"][0]["cluster"]["certificate-authority"] = "pki/ca.crt"
    kubeconfig["users"][0]["user"] = {"tokenFile": "token", "client-key": "/abs/key"}
    path = tmp_path / "member.yaml"
    path.write_text(yaml.safe_dump(kubeconfig))
    read, _ = kubeconfigs.read_file(path)
    assert read["clusters"][0]["cluster"]["certificate-authority"] == str(tmp_path / "pki/ca.crt")
    assert read["clusters"][0]["cluster"]["server"] == "https://m.example:6443"
    assert read["users"][0]["user"] == {"tokenFile": str(tmp_path / "token"),
                                        "client-key": "/abs/key"}
    assert read["users"][1] == kubeconfig["users"][1]
    assert read["contexts"] == kubeconfig["contexts"]


NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("insecure", "fragment"), [
    (SKIP_VERIFY, "insecure-skip-tls-verify"), (PLAIN_HTTP, "clear text")])
def test_the_tls_verified_condition_names_the_risk(insecure: str, fragment: str) -> None:
    conditions = status.conditions(health.initial(), previous=(), now=NOW, insecure=insecure)
    tls = next(c for c in conditions if c["type"] == "TLSVerified")
    assert (tls["status"], tls["reason"]) == ("False", insecure)
    assert fragment in tls["message"] and "fleet.allowInsecureTLS" in tls["message"]
    verified = status.conditions(health.initial(), previous=(), now=NOW)
    assert "TLSVerified" not in {c["type"] for c in verified}
