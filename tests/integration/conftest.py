"""Async clients for the integration fleet, one per cluster, built from its kubeconfig."""

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


@pytest.fixture
async def connect(dev_fleet: FleetState) -> AsyncIterator[Connect]:
    """``await connect("member-1")``: an admin KubeClient, closed after the test."""
    opened: list[KubeClient] = []

    async def _connect(name: str) -> KubeClient:
        kubeconfig = yaml.safe_load(Path(dev_fleet.cluster(name).kubeconfig).read_text())
        client = await KubeClient.from_kubeconfig(kubeconfig, name=name)
        opened.append(client)
        return client

    yield _connect
    for client in opened:
        await client.close()
