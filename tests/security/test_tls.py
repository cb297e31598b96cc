"""TLS toward members and the hub: verified by default, insecure only by explicit opt-in.

Against the session fleet's real apiservers (self-signed CA): the kubeconfig's CA makes
the connection work; no CA or another CA fails it with "TLS verification failed"; a
kubeconfig's ``insecure-skip-tls-verify: true`` is refused (KubeconfigInvalid) unless the
operator also allows it for the fleet (``fleet.allowInsecureTLS``); then it connects
without verification, the fleet warns (``member.tls_unverified``) every time it connects
to that member, and the member's status says ``TLSVerified=False``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube import pki
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Unreachable

pytestmark = pytest.mark.integration


def _kubeconfig(fleet: FleetState, name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(Path(fleet.cluster(name).kubeconfig).read_text())
    return data


def _with_cluster(kubeconfig: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(kubeconfig)
    cluster = out["clusters"][0]["cluster"]
    for key, value in changes.items():
        if value is None:
            cluster.pop(key, None)
        else:
            cluster[key] = value
    return out


async def _version(kubeconfig: dict[str, Any]) -> Any:
    client = await KubeClient.from_kubeconfig(kubeconfig, name="member-1")
    try:
        return await client.request("GET", "/version", request_timeout=5)
    finally:
        await client.close()


async def test_the_kubeconfig_ca_verifies_the_member(dev_fleet: FleetState) -> None:
    assert (await _version(_kubeconfig(dev_fleet, "member-1")))["gitVersion"]


async def test_without_a_ca_the_connection_fails(dev_fleet: FleetState) -> None:
    kubeconfig = _with_cluster(_kubeconfig(dev_fleet, "member-1"),
                               **{"certificate-authority-data": None})
    with pytest.raises(Unreachable, match="TLS verification failed"):
        await _version(kubeconfig)


async def test_another_ca_fails_the_connection(dev_fleet: FleetState) -> None:
    other = base64.b64encode(pki.new_ca().cert_pem).decode()
    kubeconfig = _with_cluster(_kubeconfig(dev_fleet, "member-1"),
                               **{"certificate-authority-data": other})
    with pytest.raises(Unreachable, match="TLS verification failed"):
        await _version(kubeconfig)


async def test_insecure_only_by_the_kubeconfig_and_the_fleets_opt_in(dev_fleet: FleetState,
                                                      tmp_path: Path) -> None:
    insecure = _with_cluster(_kubeconfig(dev_fleet, "member-1"),
                             **{"certificate-authority-data": None,
                                "insecure-skip-tls-verify": True})
    assert (await _version(insecure))["gitVersion"]
    secure_path, insecure_path = tmp_path / "secure.yaml", tmp_path / "insecure.yaml"
    secure_path.write_text(yaml.safe_dump(_kubeconfig(dev_fleet, "member-2")))
    insecure_path.write_text(yaml.safe_dump(insecure))
    members = (StaticMember(name="opted-in", kubeconfig=str(insecure_path)),
               StaticMember(name="verified", kubeconfig=str(secure_path)))
    refused = Fleet(hub=None, settings=FleetSettings(watch_member_clusters=False,
                                                     static_members=members))
    await refused.start()
    try:
        async with asyncio.timeout(20):
            while refused.client_or_none("verified") is None \
                    or str(refused.health("opted-in").reason) != "KubeconfigInvalid":  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert refused.client_or_none("opted-in") is None
        assert "allowInsecureTLS" in refused.health("opted-in").message
    finally:
        await refused.stop()
    settings = FleetSettings(watch_member_clusters=False, static_members=members,
                             allow_insecure_tls=True)
    with capture_logs() as logs:
        fleet = Fleet(hub=None, settings=settings)
        await fleet.start()
        try:
            async with asyncio.timeout(20):
                while fleet.client_or_none("opted-in") is None \
                        or fleet.client_or_none("verified") is None:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            assert fleet.connection("opted-in").tls_verified is False
            assert fleet.connection("verified").tls_verified is True
        finally:
            await fleet.stop()
    warned = [e for e in logs if e.get("event") == "member.tls_unverified"]
    assert warned, [e.get("event") for e in logs]
    assert {e.get("member") for e in warned} == {"opted-in"}
    assert all(e.get("log_level") == "warning" for e in warned)
    token = _kubeconfig(dev_fleet, "member-1")["users"][0]["user"]["token"]
    assert token not in repr(logs)
