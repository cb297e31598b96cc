"""Kubeconfigs through the client and the fleet's kubeconfig reading: usable or a clear error.

``KubeClient.from_kubeconfig`` returns a client or raises ``KubeconfigError``; the fleet's
readers (``from_secret``, ``flatten``, ``skips_tls_verify``) return or raise
``KubeconfigProblem`` with a health reason. None of their messages may quote the token or
the key material of the kubeconfig they were given.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from dispatcher.fleet.kubeconfigs import (
    KubeconfigProblem,
    flatten,
    from_secret,
    skips_tls_verify,
)
from dispatcher.kube.client import KubeClient, KubeconfigError

from .strategies import BUDGET, json_values, mutations

TOKEN = "fuzz-secret-token-0123456789abcdef"
KEY_DATA = base64.b64encode(b"-----BEGIN EC PRIVATE KEY-----\nsecretkeybody\n").decode()
VALID: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Config", "current-context": "m1",
    "clusters": [{"name": "m1", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "admin", "user": {"token": TOKEN}},
              {"name": "cert", "user": {"client-certificate-data": KEY_DATA,
                                        "client-key-data": KEY_DATA}}],
    "contexts": [{"name": "m1", "context": {"cluster": "m1", "user": "admin"}},
                 {"name": "m1-cert", "context": {"cluster": "m1", "user": "cert"}}],
}
REASONS = {"KubeconfigInvalid", "SecretMissing"}


def _no_secret(message: str) -> None:
    assert TOKEN not in message
    assert "secretkeybody" not in message and KEY_DATA not in message


def _client(kubeconfig: Any, context: str | None = None) -> None:
    async def go() -> None:
        try:
            client = await KubeClient.from_kubeconfig(kubeconfig, name="m1", context=context)
        except KubeconfigError as exc:
            _no_secret(str(exc))
            return
        await client.close()
    asyncio.run(go())


@BUDGET
@given(mutations(VALID), st.sampled_from([None, "m1", "m1-cert", "nope"]))
@example({**VALID, "clusters": [{"name": "m1", "cluster": []}]}, None)  # was AssertionError
def test_client_from_mutated_kubeconfigs(kubeconfig: Any, context: str | None) -> None:
    _client(kubeconfig, context)


@BUDGET
@given(json_values.filter(lambda v: isinstance(v, dict)))
def test_client_from_random_mappings(kubeconfig: dict[str, Any]) -> None:
    _client(kubeconfig)


def _reader(call: Any) -> Any:
    try:
        return call()
    except KubeconfigProblem as exc:
        assert exc.reason in REASONS
        _no_secret(str(exc))
        return None


@BUDGET
@given(mutations(VALID), st.sampled_from([None, "m1", "m1-cert", "nope"]))
@example({**VALID, "clusters": 1}, None)  # was TypeError
def test_fleet_readers_on_mutated_kubeconfigs(kubeconfig: Any, context: str | None) -> None:
    flat = _reader(lambda: flatten(kubeconfig, context=context)
                   if isinstance(kubeconfig, dict) else None)
    assert isinstance(skips_tls_verify(kubeconfig, context=context), bool) \
        if isinstance(kubeconfig, dict) else True
    if flat is not None:
        assert len(flat["contexts"]) == 1 and len(flat["users"]) == 1


def _secret(data: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "dispatcher-system", "name": "member-m1"}, "data": data}


@BUDGET
@given(st.one_of(
    mutations(VALID).map(lambda k: {"kubeconfig": base64.b64encode(
        yaml.safe_dump(k).encode()).decode()}),
    st.dictionaries(st.sampled_from(["kubeconfig", "other"]),
                    st.text(max_size=60) | st.binary(max_size=60).map(
                        lambda b: base64.b64encode(b).decode())),
    json_values))
@example({"kubeconfig": "\x80"})  # was ValueError from base64
def test_fleet_reads_random_secrets(data: Any) -> None:
    parsed = _reader(lambda: from_secret(_secret(data)))
    assert parsed is None or isinstance(parsed, dict)


def test_a_broken_yaml_secret_does_not_quote_its_token() -> None:
    text = f"users: [{{name: a, user: {{token: {TOKEN}}}}}\n  bad: [\n"
    data = {"kubeconfig": base64.b64encode(text.encode()).decode()}
    assert _reader(lambda: from_secret(_secret(data))) is None
