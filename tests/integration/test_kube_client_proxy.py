"""KubeClient behind an HTTP proxy, against a real apiserver and a real CONNECT proxy.

The proxy comes from the environment once per client (dispatcher/kube/client.py
``_proxy_once``), not from aiohttp's per-request ``trust_env`` lookups: requests still go
through the proxy named by ``HTTPS_PROXY``, bypass it when ``NO_PROXY`` names the server,
and no request looks up the environment or ``~/.netrc`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp.client
import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient

pytestmark = pytest.mark.integration

_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
              "no_proxy", "ALL_PROXY", "all_proxy")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def connect_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback HTTP CONNECT proxy: (its URL, the CONNECT targets it was asked for)."""
    targets: list[str] = []
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            writer.close()
            return
        targets.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        pair = [asyncio.create_task(_pipe(reader, up_writer)),
                asyncio.create_task(_pipe(up_reader, writer))]
        tasks.update(pair)
        await asyncio.gather(*pair)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", targets
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@pytest.fixture
def member_kubeconfig(dev_fleet: FleetState) -> tuple[dict[str, Any], str]:
    cluster = dev_fleet.cluster("member-1")
    return (yaml.safe_load(Path(cluster.kubeconfig).read_text()),
            cluster.server.removeprefix("https://"))


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def test_requests_go_through_the_environments_proxy(
        member_kubeconfig: tuple[dict[str, Any], str],
        clean_environment: pytest.MonkeyPatch) -> None:
    kubeconfig, address = member_kubeconfig
    async with connect_proxy() as (url, targets):
        clean_environment.setenv("HTTPS_PROXY", url)
        async with await KubeClient.from_kubeconfig(kubeconfig, name="member-1") as client:
            info = await client.request("GET", "/version")
    assert info["gitVersion"].startswith("v1.")
    assert targets == [address]  # one tunnel, kept alive for the client's requests


async def test_no_proxy_naming_the_server_bypasses_the_proxy(
        member_kubeconfig: tuple[dict[str, Any], str],
        clean_environment: pytest.MonkeyPatch) -> None:
    kubeconfig, _ = member_kubeconfig
    async with connect_proxy() as (url, targets):
        clean_environment.setenv("HTTPS_PROXY", url)
        clean_environment.setenv("NO_PROXY", "localhost,127.0.0.1")
        async with await KubeClient.from_kubeconfig(kubeconfig, name="member-1") as client:
            info = await client.request("GET", "/version")
    assert info["gitVersion"].startswith("v1.")
    assert targets == []


async def test_no_request_looks_up_the_environment_again(
        member_kubeconfig: tuple[dict[str, Any], str],
        clean_environment: pytest.MonkeyPatch) -> None:
    """aiohttp's per-request lookups (proxy variables, netrc), counted where aiohttp calls
    them: zero over several requests, a watch and a failed request (they were one each per
    request with trust_env on)."""
    kubeconfig, _ = member_kubeconfig
    calls: list[str] = []
    lookup = aiohttp.client.get_env_proxy_for_url
    netrc = aiohttp.client.ClientSession._get_netrc_auth

    def counted_lookup(url: Any) -> Any:
        calls.append("proxy")
        return lookup(url)

    def counted_netrc(self: aiohttp.ClientSession, host: str) -> Any:
        calls.append("netrc")
        return netrc(self, host)

    clean_environment.setattr(aiohttp.client, "get_env_proxy_for_url", counted_lookup)
    clean_environment.setattr(aiohttp.client.ClientSession, "_get_netrc_auth", counted_netrc)
    async with await KubeClient.from_kubeconfig(kubeconfig, name="member-1") as client:
        for _ in range(3):
            await client.request("GET", "/version")
        stream = client.stream("/api/v1/nodes", query=[("watch", "true")], read_timeout=30)
        async with contextlib.aclosing(stream):
            async for _ in stream:
                break
        with contextlib.suppress(Exception):
            await client.request("GET", "/api/v1/namespaces/no-such-namespace")
    assert calls == []
