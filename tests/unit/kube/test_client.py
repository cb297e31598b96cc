"""KubeClient turns request-building failures into typed errors without echoing credentials."""

from __future__ import annotations

import base64

import pytest

from dispatcher.devfleet import pki
from dispatcher.kube.client import KubeClient, KubeconfigError


def _kubeconfig(token: str) -> dict[str, object]:
    ca = base64.b64encode(pki.new_ca().cert_pem).decode()
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                                   "certificate-authority-data": ca}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


async def test_token_with_control_characters_is_a_kubeconfig_error() -> None:
    """A corrupt credential (newline in the token) fails as KubeconfigError, token unquoted."""
    async with await KubeClient.from_kubeconfig(_kubeconfig("sekret\nvalue"), name="m") as c:
        with pytest.raises(KubeconfigError) as caught:
            await c.request("GET", "/api/v1/nodes")
    assert "sekret" not in str(caught.value)
