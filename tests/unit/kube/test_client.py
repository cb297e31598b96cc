"""KubeClient turns request-building failures into typed errors without echoing credentials."""

from __future__ import annotations

import asyncio
import base64

import pytest

from dispatcher.kube import pki
from dispatcher.kube.client import KubeClient, KubeconfigError


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
