"""The dev fleet as one operation: build binaries, start control planes, provision them.

Used by ``dispatcher dev up``, the pytest fixtures and the dispatch benchmark, so they all
get the same hub + members.
"""

from __future__ import annotations

import os
from pathlib import Path

from dispatcher.devfleet import provision
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState
from dispatcher.fleet.fleetfile import FleetSpec

__all__ = ["HUB", "default_root", "down", "up"]

HUB = "hub"


def default_root() -> Path:
    """State directory of ``dispatcher dev``: ``$DISPATCHER_DEVFLEET`` or a per-user cache."""
    override = os.environ.get("DISPATCHER_DEVFLEET")
    return Path(override) if override else Path.home() / ".cache" / "dispatcher" / "devfleet"


def up(*, root: Path, fleet: FleetSpec) -> FleetState:
    """Start (or reuse) a hub plus one apiserver per fleet member, provisioned.

    Safe to call twice: a running healthy fleet is reused and provisioning is idempotent.
    """
    planes = ControlPlanes(root=root, binaries=ensure_binaries())
    state = planes.up(names=[HUB, *(m.name for m in fleet.members)])
    provision.provision_hub(state.cluster(HUB).rest())
    for member in fleet.members:
        provision.provision_member(state.cluster(member.name).rest(), member)
    return state


def down(*, root: Path) -> None:
    """Stop everything started under ``root`` and remove its state."""
    ControlPlanes(root=root, binaries=ensure_binaries()).down()
