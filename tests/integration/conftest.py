"""Async clients for the integration fleets (light, real, shared hub), one per cluster, built
from its kubeconfig."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient

pytestmark = pytest.mark.integration

Connect = Callable[[str], Coroutine[Any, Any, KubeClient]]


async def _clients(fleet: FleetState) -> AsyncIterator[Connect]:
    opened: list[KubeClient] = []

    async def _connect(name: str) -> KubeClient:
        kubeconfig = yaml.safe_load(Path(fleet.cluster(name).kubeconfig).read_text())
        client = await KubeClient.from_kubeconfig(kubeconfig, name=name)
        opened.append(client)
        return client

    yield _connect
    for client in opened:
        await client.close()


@pytest.fixture
async def connect(dev_fleet: FleetState) -> AsyncIterator[Connect]:
    """``await connect("member-1")``: an admin KubeClient of the light fleet, closed after
    the test."""
    async for factory in _clients(dev_fleet):
        yield factory


@pytest.fixture
async def connect_real(real_fleet: FleetState) -> AsyncIterator[Connect]:
    """``await connect_real("member-1")``: an admin KubeClient of the real fleet (members run
    controllers, scheduler and kwok), closed after the test."""
    async for factory in _clients(real_fleet):
        yield factory


@pytest.fixture
async def connect_shared(shared_hub_fleet: FleetState) -> AsyncIterator[Connect]:
    """``await connect_shared("hub")``: an admin KubeClient of the fleet with a shared hub
    (the hub a full cluster with nodes and operators; real members), closed after the test."""
    async for factory in _clients(shared_hub_fleet):
        yield factory


@pytest.fixture
async def connect_kueue(kueue_fleet: FleetState) -> AsyncIterator[Connect]:
    """``await connect_kueue("hub")``: an admin KubeClient of the fleet with Kueue."""
    async for factory in _clients(kueue_fleet):
        yield factory
