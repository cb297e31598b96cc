"""A kubeconfig Secret cannot make the controller read a local file or talk plain HTTP.

Replays findings 2 and 3 of the third security audit against the session fleet's real hub
and members. A trap (a TCP listener on 127.0.0.1 started here, recording every byte it
receives) stands for a server chosen by whoever may write a kubeconfig Secret; temp files
with known content stand for the controller's own files (its hub ServiceAccount token, a
key). MemberClusters whose Secret names ``tokenFile`` (over http:// and https://),
``client-certificate``/``client-key``, ``certificate-authority``, or an ``http://`` server
with an inline token: the trap never receives a connection, so no byte of those files nor
any Authorization header; each MemberCluster says ``Ready=False``, ``KubeconfigInvalid``,
naming the key and the way out. A static member (the operator's own config file) may still
reference files. An http:// member registered by ``clusters add`` (refused without
``--allow-insecure-tls``, then stored data-only with a warning) is refused by the fleet
unless ``fleet.allowInsecureTLS``; with it, the member is Ready over plain HTTP (a forwarder
to the real member's apiserver), warned about and marked ``TLSVerified=False``
(``PlainHTTP``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from structlog.testing import capture_logs

from dispatcher.devfleet.controlplane import ClusterInfo, FleetState
from dispatcher.fleet.kubeconfigs import file_reference
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube import errors, pki, resources
from dispatcher.kube.client import KubeClient

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {
    "probe_interval_s": 0.5, "unreachable_after_s": 3.0, "request_timeout_s": 2.0,
    "reconnect_initial_s": 0.2, "reconnect_max_s": 1.0, "status_min_interval_s": 0.2,
    "status_heartbeat_s": 2.0}
SECRET_NS = "dispatcher-system"
FILE_SECRET = "controller-own-token-4d1f0a9c"  # what a file on the controller holds
WAY_OUT = {"tokenFile": "put the content in token", "http://": "fleet.allowInsecureTLS"}


@dataclass
class Trap:
    """A listener that must never be contacted: every connection and byte is recorded."""

    port: int = 0
    connections: int = 0
    received: bytearray = field(default_factory=bytearray)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(OSError):
            while chunk := await reader.read(65536):
                self.received += chunk
        writer.close()


@pytest.fixture
async def trap() -> AsyncIterator[Trap]:
    found = Trap()
    server = await asyncio.start_server(found._handle, "127.0.0.1", 0)
    found.port = int(server.sockets[0].getsockname()[1])
    try:
        yield found
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)


@pytest.fixture
async def hub(dev_fleet: FleetState) -> AsyncIterator[KubeClient]:
    config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    async with await KubeClient.from_kubeconfig(config, name="hub") as client:
        yield client


def _kubeconfig(*, server: str, cluster: dict[str, Any] | None = None,
                user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
            "users": [{"name": "u", "user": user or {}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def _secret(name: str, kubeconfig: dict[str, Any]) -> dict[str, Any]:
    text = yaml.safe_dump(kubeconfig)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name,
                                                               "namespace": SECRET_NS},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


def _member_cluster(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": SECRET_NS, "name": secret}}}


async def _conditions(hub: KubeClient, name: str) -> dict[str, dict[str, Any]]:
    obj = await hub.request("GET", resources.MEMBER_CLUSTERS.item(name))
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def _until_written(hub: KubeClient, name: str,
                         check: Callable[[dict[str, dict[str, Any]]], bool],
                         within: float = 30.0) -> dict[str, dict[str, Any]]:
    async with asyncio.timeout(within):
        while not check(found := await _conditions(hub, name)):  # noqa: ASYNC110 - polls the hub
            await asyncio.sleep(0.2)
    return found


def _refused(fragment: str) -> Callable[[dict[str, dict[str, Any]]], bool]:
    def check(found: dict[str, dict[str, Any]]) -> bool:
        ready = found.get("Ready") or {}
        return (ready.get("status") == "False" and ready.get("reason") == "KubeconfigInvalid"
                and fragment in str(ready.get("message")))
    return check


async def test_a_secret_cannot_make_the_controller_send_a_local_file(
        hub: KubeClient, dev_fleet: FleetState, trap: Trap, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    token_file = tmp_path / "token"
    token_file.write_text(FILE_SECRET)
    # Real PEM material, so that reading the files would give a working TLS client
    # (the trap would see a connection): a CA, and a certificate with its key.
    ca = pki.new_ca("trap")
    cert_pem, key_pem = ca.issue_serving("controller")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "client.crt").write_bytes(cert_pem)
    (tmp_path / "client.key").write_bytes(key_pem)
    http, https = f"http://127.0.0.1:{trap.port}", f"https://127.0.0.1:{trap.port}"
    inline_ca = {"certificate-authority-data": base64.b64encode(ca.cert_pem).decode()}
    cases: dict[str, tuple[dict[str, Any], str]] = {  # name -> (kubeconfig, key named)
        # the audit's reproduction, and the shipped Deployment's own token path
        f"tokenfile-http-{tag}": (_kubeconfig(server=http, user={
            "tokenFile": str(token_file)}), "tokenFile"),
        f"tokenfile-sa-{tag}": (_kubeconfig(server=https, cluster=inline_ca, user={
            "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}), "tokenFile"),
        f"tokenfile-https-{tag}": (_kubeconfig(server=https, cluster=inline_ca, user={
            "tokenFile": str(token_file)}), "tokenFile"),
        f"client-cert-{tag}": (_kubeconfig(server=https, cluster=inline_ca, user={
            "client-certificate": str(tmp_path / "client.crt"),
            "client-key": str(tmp_path / "client.key")}), "client-certificate"),
        f"client-key-{tag}": (_kubeconfig(server=https, cluster=inline_ca, user={
            "client-certificate-data": base64.b64encode(cert_pem).decode(),
            "client-key": str(tmp_path / "client.key")}), "client-key"),
        f"ca-file-{tag}": (_kubeconfig(server=https, cluster={
            "certificate-authority": str(tmp_path / "ca.crt")}, user={"token": "x"}),
            "certificate-authority"),
        # finding 3: a plain-HTTP server with an inline token, no file at all
        f"http-token-{tag}": (_kubeconfig(server=http, user={"token": FILE_SECRET}),
                              "http://"),
    }
    # The operator's own config file may reference files: it is the operator's filesystem.
    member = dev_fleet.cluster("member-1")
    (tmp_path / "member-token").write_text(member.token)
    (tmp_path / "member-ca.crt").write_text(Path(member.ca_file).read_text())
    static = tmp_path / "static.yaml"
    static.write_text(yaml.safe_dump(_kubeconfig(  # relative paths: against its folder
        server=member.server, cluster={"certificate-authority": "member-ca.crt"},
        user={"tokenFile": "member-token"})))
    settings = FleetSettings(**FAST, static_members=(
        StaticMember(name=f"static-{tag}", kubeconfig=str(static)),))
    created: list[str] = []
    try:
        for name, (kubeconfig, _) in cases.items():
            await hub.request("POST", resources.SECRETS.collection(SECRET_NS),
                              body=_secret(name, kubeconfig))
            await hub.request("POST", resources.MEMBER_CLUSTERS.collection(),
                              body=_member_cluster(name, name))
            created.append(name)
        with capture_logs() as logs:
            async with Fleet(hub=hub, settings=settings) as fleet:
                for name, (_, key) in cases.items():
                    found = await _until_written(hub, name, _refused(key))
                    message = found["Ready"]["message"]
                    way_out = WAY_OUT.get(key, f"put the content in {key}-data")
                    assert way_out in message, message
                    assert str(tmp_path) not in message and FILE_SECRET not in message
                    assert "TLSVerified" not in found  # never connected, nothing to mark
                async with asyncio.timeout(30):
                    seen = fleet.version
                    while not fleet.health(f"static-{tag}").ready:
                        seen = await fleet.wait_changed(seen)
                # a few reconnect rounds of every refused member (backoff 0.2-1 s)
                await asyncio.sleep(2.5)
    finally:
        for name in created:
            await hub.request("DELETE", resources.MEMBER_CLUSTERS.item(name))
            await hub.request("DELETE", resources.SECRETS.item(name, SECRET_NS))
    assert trap.connections == 0, bytes(trap.received[:200])
    assert FILE_SECRET.encode() not in trap.received
    assert b"authorization" not in trap.received.lower()
    assert FILE_SECRET not in repr(logs)
    refused = {e.get("member") for e in logs if e.get("event") == "member.kubeconfig_invalid"}
    assert refused >= set(cases)


def _front(member: ClusterInfo, seen: list[str]) -> web.Application:
    """Plain HTTP in front of ``member``'s real apiserver (TLS, verified with its CA): what an
    http:// member looks like. Records the Authorization header of every request."""
    context = ssl.create_default_context(cafile=member.ca_file)
    app = web.Application()
    sessions: list[aiohttp.ClientSession] = []

    async def forward(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        session = sessions[0]
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("authorization", "accept", "content-type", "user-agent")}
        async with session.request(request.method, member.server + request.path_qs,
                                   headers=headers, data=await request.read(),
                                   ssl=context) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                "Content-Type": upstream.headers.get("Content-Type", "application/json")})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():  # watches stream
                await response.write(chunk)
            await response.write_eof()
            return response

    async def session(_: web.Application) -> AsyncIterator[None]:
        sessions.append(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)))
        yield
        await sessions.pop().close()

    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def test_an_http_member_only_by_opt_in_and_then_marked(
        dev_fleet: FleetState, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dispatcher.cli import main

    member = dev_fleet.cluster("member-2")
    name = f"plain-http-{uuid.uuid4().hex[:6]}"
    hub_flags = ["--hub-kubeconfig", dev_fleet.cluster("hub").kubeconfig]
    seen: list[str] = []
    # bound now, served once the fleet runs (clusters add never contacts the member)
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    # The operator's kubeconfig may name a token file: clusters add inlines it.
    (tmp_path / "token").write_text(member.token)
    source = tmp_path / "member.yaml"
    source.write_text(yaml.safe_dump(_kubeconfig(server=f"http://127.0.0.1:{port}",
                                                 user={"tokenFile": "token"})))
    add = ["clusters", "add", name, "--kubeconfig", str(source), *hub_flags]
    assert main(add) == 2
    err = capsys.readouterr().err
    assert "http://" in err and "--allow-insecure-tls" in err

    async def stored_secret() -> Any:
        config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
        async with await KubeClient.from_kubeconfig(config, name="hub") as hub:
            try:
                secret = await hub.request("GET", resources.SECRETS.item(
                    f"{name}-kubeconfig", SECRET_NS))
            except errors.NotFound:
                return None
        return yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))

    assert asyncio.run(stored_secret()) is None  # refused: nothing stored
    assert main([*add, "--allow-insecure-tls"]) == 0
    err = capsys.readouterr().err
    assert "warning: --allow-insecure-tls" in err and "clear text" in err
    try:
        stored = asyncio.run(stored_secret())
        assert file_reference(stored) == ""  # data only: the token file was inlined
        assert stored["users"][0]["user"] == {"token": member.token}
        found, logs = asyncio.run(_connect_through_front(dev_fleet, member, name, listening,
                                                         seen))
    finally:
        listening.close()
        assert main(["clusters", "remove", name, *hub_flags]) == 0
    assert found["Reachable"]["status"] == "True"
    assert found["TLSVerified"]["reason"] == "PlainHTTP"
    assert "clear text" in found["TLSVerified"]["message"]
    warned = [e for e in logs if e.get("event") == "member.tls_unverified"]
    assert warned and {e.get("member") for e in warned} == {name}
    assert all(e.get("reason") == "PlainHTTP" and e.get("log_level") == "warning"
               for e in warned)
    assert member.token not in repr(logs)
    # it did go over plain HTTP: the front saw the member's bearer token
    assert f"Bearer {member.token}" in seen


async def _connect_through_front(dev_fleet: FleetState, member: ClusterInfo, name: str,
                                 listening: socket.socket, seen: list[str]
                                 ) -> tuple[dict[str, dict[str, Any]], list[Any]]:
    """The fleet without, then with, ``allowInsecureTLS``; the member's final conditions
    and the second fleet's log."""
    runner = web.AppRunner(_front(member, seen), shutdown_timeout=1)
    await runner.setup()
    await web.SockSite(runner, listening).start()
    config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    try:
        async with await KubeClient.from_kubeconfig(config, name="hub") as hub:
            # refused by the fleet without its own opt-in; the front sees nothing
            async with Fleet(hub=hub, settings=FleetSettings(**FAST)):
                found = await _until_written(hub, name, _refused("http://"))
                assert "fleet.allowInsecureTLS" in found["Ready"]["message"]
                await asyncio.sleep(1.5)  # reconnect rounds
            assert seen == []
            with capture_logs() as logs:
                async with Fleet(hub=hub, settings=FleetSettings(**FAST,
                                                                 allow_insecure_tls=True)):
                    found = await _until_written(hub, name, lambda c: (
                        c.get("Ready", {}).get("status") == "True"
                        and c.get("TLSVerified", {}).get("status") == "False"))
    finally:
        await runner.cleanup()
    return found, logs
