"""KubeClient turns request-building failures into typed errors without echoing credentials."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from typing import Any

import pytest

from dispatcher.kube import pki
from dispatcher.kube.client import KubeClient, KubeconfigError
from dispatcher.kube.errors import Unreachable


def _kubeconfig(token: str, server: str) -> dict[str, object]:
    ca = base64.b64encode(pki.new_ca().cert_pem).decode()
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server,
                                                   "certificate-authority-data": ca}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


async def test_token_with_control_characters_is_a_kubeconfig_error() -> None:
    """A corrupt credential (newline in the token) fails as KubeconfigError, token unquoted."""
    # aiohttp checks header values only once connected: a silent loopback listener suffices.
    accepted: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        config = _kubeconfig("sekret\nvalue", f"http://127.0.0.1:{port}")
        async with await KubeClient.from_kubeconfig(config, name="m") as client:
            with pytest.raises(KubeconfigError) as caught:
                await client.request("GET", "/api/v1/nodes", request_timeout=5)
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert "sekret" not in str(caught.value)


async def test_requests_name_the_dispatcher_as_their_field_manager() -> None:
    """The apiserver names managedFields entries after the user agent."""
    async with await KubeClient.from_kubeconfig(
            _kubeconfig("t", "https://10.1.2.3:6443"), name="m") as client:
        assert client._api.user_agent.startswith("dispatcher/")


_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
                    "no_proxy", "ALL_PROXY", "all_proxy")


@pytest.mark.parametrize(("server", "env", "proxy"), [
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://proxy.corp:3128"},
     "http://proxy.corp:3128"),
    ("https://10.1.2.3:6443", {"https_proxy": "http://proxy.corp:3128"},
     "http://proxy.corp:3128"),
    # the proxy of the server's scheme only
    ("https://10.1.2.3:6443", {"HTTP_PROXY": "http://proxy.corp:3128"}, None),
    ("http://10.1.2.3:8080", {"HTTP_PROXY": "http://proxy.corp:3128"},
     "http://proxy.corp:3128"),
    # NO_PROXY: the address itself, a domain suffix, any host, in either case
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://proxy.corp:3128",
                               "NO_PROXY": "localhost,10.1.2.3"}, None),
    ("https://api.member.corp:6443", {"HTTPS_PROXY": "http://proxy.corp:3128",
                                      "no_proxy": ".member.corp"}, None),
    ("https://api.other.corp:6443", {"HTTPS_PROXY": "http://proxy.corp:3128",
                                     "NO_PROXY": ".member.corp"}, "http://proxy.corp:3128"),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "*"},
     None),
    ("https://10.1.2.3:6443", {}, None)])
async def test_the_environments_proxy_is_taken_once_per_client(
        monkeypatch: pytest.MonkeyPatch, server: str, env: dict[str, str],
        proxy: str | None) -> None:
    """aiohttp's trust_env looked up netrc and proxies in threads on every request; the
    client takes the environment's proxy for its server once (aiohttp's own rule, NO_PROXY
    respected) and turns the per-request lookups off."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with await KubeClient.from_kubeconfig(_kubeconfig("t", server), name="m") as client:
        rest = client._api.rest_client
        assert rest.pool_manager.trust_env is False
        assert rest.proxy == proxy


async def test_proxy_credentials_go_to_the_proxy_and_proxy_url_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the proxy URL become Proxy-Authorization (as aiohttp sent them); a
    kubeconfig's proxy-url is kept over the environment."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.corp:3128")
    config = _kubeconfig("t", "https://10.1.2.3:6443")
    async with await KubeClient.from_kubeconfig(config, name="m") as client:
        rest = client._api.rest_client
        assert rest.proxy == "http://proxy.corp:3128"
        assert rest.proxy_headers == {
            "Proxy-Authorization": "Basic " + base64.b64encode(b"user:pw").decode()}
    clusters: Any = config["clusters"]
    clusters[0]["cluster"]["proxy-url"] = "http://kubeconfig-proxy:8080"
    async with await KubeClient.from_kubeconfig(config, name="m") as client:
        assert client._api.rest_client.proxy == "http://kubeconfig-proxy:8080"
        assert client._api.rest_client.proxy_headers is None


async def test_a_request_carries_what_call_api_gave_it() -> None:
    """The client sends requests itself (no generic model serialiser): the user agent, the
    token (through the configuration's refresh hook, as exec and in-cluster tokens are),
    content type, query and a JSON body (dates in ISO 8601) reach the server as before."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        method, target, _ = lines[0].split(" ")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        seen.append((method, target, headers, body))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 11\r\n\r\n{\"ok\":true}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    refreshed: list[str] = []

    def refresh(configuration: Any) -> None:
        refreshed.append("yes")
        configuration.api_key["BearerToken"] = "Bearer fresh-token"

    try:
        config = _kubeconfig("old-token", f"http://127.0.0.1:{port}")
        async with await KubeClient.from_kubeconfig(config, name="m") as client:
            client._api.configuration.refresh_api_key_hook = refresh
            answer = await client.request(
                "PATCH", "/apis/x/v1/things/a", query=[("fieldManager", "me"), ("q", "a b")],
                body={"spec": {"at": datetime.date(2026, 12, 1), "n": [1, 2]}},
                content_type="application/merge-patch+json")
            await client.request("GET", "/version", body={"ignored": True})
    finally:
        server.close()
        await server.wait_closed()
    assert answer == {"ok": True}
    assert refreshed == ["yes", "yes"]
    (method, target, headers, body), (get, version, get_headers, get_body) = seen
    assert (method, target) == ("PATCH", "/apis/x/v1/things/a?fieldManager=me&q=a+b")
    assert headers["authorization"] == "Bearer fresh-token"
    assert headers["user-agent"].startswith("dispatcher/")
    assert headers["content-type"] == "application/merge-patch+json"
    assert headers["accept"] == "application/json"
    assert json.loads(body) == {"spec": {"at": "2026-12-01", "n": [1, 2]}}
    assert (get, version, get_body) == ("GET", "/version", b"")
    assert get_headers["authorization"] == "Bearer fresh-token"


async def test_a_watch_whose_connection_closes_under_its_read_is_an_outage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp raises ``RuntimeError("Connection closed.")`` from a response body read when
    the connection goes (a member removed while its copy watch streamed crashed the
    controller, issue 35): ``stream`` says Unreachable, as ``_send`` does."""
    class Content:
        def __init__(self) -> None:
            self.lines = [b'{"type":"BOOKMARK","object":{}}\n']

        async def readline(self) -> bytes:
            if self.lines:
                return self.lines.pop()
            raise RuntimeError("Connection closed.")

    class Response:
        content = Content()

        def release(self) -> None:
            pass

    async def send(*_: Any, **__: Any) -> Response:
        return Response()

    config = _kubeconfig("t", "https://127.0.0.1:1")
    async with await KubeClient.from_kubeconfig(config, name="m1") as client:
        monkeypatch.setattr(client, "_send", send)
        seen = []
        with pytest.raises(Unreachable, match="m1: watch /api/v1/pods: connection closed"):
            async for line in client.stream("/api/v1/pods", query=[], read_timeout=1):
                seen.append(line)
        assert seen == [{"type": "BOOKMARK", "object": {}}]
