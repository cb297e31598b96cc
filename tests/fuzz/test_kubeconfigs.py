"""Kubeconfigs through the client and the fleet's kubeconfig reading: usable or a clear error.

``KubeClient.from_kubeconfig`` returns a client or raises ``KubeconfigError``; the fleet's
readers (``from_secret``, ``flatten``, ``skips_tls_verify``) return or raise
``KubeconfigProblem`` with a health reason. None of their messages may quote the token or
the key material of the kubeconfig they were given. The hub's data-only rule: whatever
``from_secret`` accepts names no file and no plugin, and whatever ``flatten`` (``clusters
add``) produces is data only, however many file keys the input has and wherever.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from dispatcher.fleet.kubeconfigs import (
    FILE_KEYS,
    KubeconfigProblem,
    data_only_problem,
    file_reference,
    flatten,
    from_secret,
    skips_tls_verify,
    transport_risk,
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


@st.composite
def with_file_keys(draw: st.DrawFn) -> dict[str, Any]:
    """VALID (or a mutation of it) with file keys planted in random entries."""
    drawn = draw(mutations(VALID) | st.just(VALID))
    kubeconfig: dict[str, Any] = copy.deepcopy(drawn if isinstance(drawn, dict) else VALID)
    for _ in range(draw(st.integers(0, 4))):
        list_key, section = draw(st.sampled_from([("clusters", "cluster"), ("users", "user")]))
        items = kubeconfig.get(list_key)
        if not isinstance(items, list) or not items:
            continue
        item = draw(st.sampled_from(items))
        body = item.get(section) if isinstance(item, dict) else None
        if isinstance(body, dict):
            body[draw(st.sampled_from(sorted(FILE_KEYS[section])))] = draw(
                st.sampled_from(["/etc/passwd", "token", "", None, 7]))
    return kubeconfig


@BUDGET
@given(with_file_keys(), st.sampled_from([None, "m1", "m1-cert"]))
def test_whatever_flatten_returns_is_data_only(kubeconfig: dict[str, Any],
                                               context: str | None) -> None:
    flat = _reader(lambda: flatten(kubeconfig, context=context))
    if flat is not None:
        assert file_reference(flat) == ""


@BUDGET
@given(with_file_keys())
def test_whatever_a_secret_yields_is_data_only(kubeconfig: dict[str, Any]) -> None:
    encoded = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    parsed = _reader(lambda: from_secret(_secret({"kubeconfig": encoded})))
    if parsed is not None:
        assert data_only_problem(parsed) == ""
        _reader(lambda: transport_risk(parsed))


@BUDGET
@given(mutations(VALID) | json_values, st.sampled_from([None, "m1", "m1-cert", "nope"]))
def test_the_rules_never_crash_and_never_quote(kubeconfig: Any, context: str | None) -> None:
    if not isinstance(kubeconfig, dict):
        return
    _no_secret(data_only_problem(kubeconfig))
    risk = _reader(lambda: transport_risk(kubeconfig, context=context))
    assert risk in (None, "", "PlainHTTP", "InsecureSkipTLSVerify")
