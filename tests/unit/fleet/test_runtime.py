"""Fleet runtime over static members without a hub: reads are safe in every state.

Covers: static members appear in names(), members() and snapshots() (not Ready, with the
reason) even when their kubeconfig cannot be read; client() raises NotConnected or
UnknownMember while client_or_none() returns None; reservations exist per member; the change
pulse moves when health changes; stop() ends everything. Not covered: hub watches and
status writes (integration tests).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dispatcher.fleet.connection import NotConnected
from dispatcher.fleet.runtime import Fleet, UnknownMember
from dispatcher.fleet.settings import FleetSettings, StaticMember


async def test_unreadable_static_member(tmp_path: Path) -> None:
    settings = FleetSettings(static_members=(
        StaticMember(name="gone", kubeconfig=str(tmp_path / "missing.yaml"),
                     labels={"tier": "x"}, cordoned=True),), reconnect_initial_s=30.0)
    async with Fleet(hub=None, settings=settings) as fleet:
        assert fleet.names() == ("gone",)
        async with asyncio.timeout(5):
            seen = fleet.version
            while fleet.health("gone").reason != "KubeconfigInvalid":
                seen = await fleet.wait_changed(seen)
        state = fleet.members()["gone"]
        assert (state.static, state.cordoned, dict(state.labels)) == (True, True, {"tier": "x"})
        assert state.client is None
        assert state.capacity.nodes == 0
        [snapshot] = fleet.snapshots()
        assert not snapshot.ready
        assert snapshot.not_ready_reason.startswith("KubeconfigInvalid: cannot read kubeconfig")
        assert snapshot.served_kinds is None
        with pytest.raises(NotConnected):
            fleet.client("gone")
        with pytest.raises(UnknownMember):
            fleet.client("other")
        assert fleet.client_or_none("gone") is None
        assert fleet.reservations("gone").member == "gone"
    assert fleet.names() == ()


async def test_fixing_a_static_kubeconfig_file_retries_at_once(tmp_path: Path) -> None:
    """The retry backoff is long; only the file watch can trigger the second attempt."""
    path = tmp_path / "kubeconfig"
    path.write_text("not: [valid")
    settings = FleetSettings(static_members=(StaticMember(name="m", kubeconfig=str(path)),),
                             reconnect_initial_s=30.0, probe_interval_s=0.05)
    async with Fleet(hub=None, settings=settings) as fleet:
        async with asyncio.timeout(5):
            seen = fleet.version
            while fleet.health("m").message != f"kubeconfig {path} is not valid YAML":
                seen = await fleet.wait_changed(seen)
        path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: missing\n")
        async with asyncio.timeout(5):
            while "no context named 'missing'" not in fleet.health("m").message:
                seen = await fleet.wait_changed(seen)
        assert fleet.health("m").reason == "KubeconfigInvalid"
