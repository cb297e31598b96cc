"""What the event loop asks of the simulated fleet, as a narrow protocol.

The loop places through the controller's own ``control.core.placing.place_ask`` over the member
snapshots this protocol gives; ``dispatcher.sim.cores`` adapts the real capacity model to
it (bind and release pods, the member views). Keeping the fleet behind it lets the loop be
read (and tested) without knowing how the capacity is fed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from dispatcher.placement.model import MemberSnapshot, PlacementRequest

__all__ = ["Backend", "Choice", "View"]

View = Literal["live", "durable", "empty"]
"""Which capacity a question is about: ``live`` (everything running now), ``durable`` (only
workloads that never end, i.e. services: what is left once every batch job finishes) or
``empty`` (the bare fleet: can this workload ever run here?)."""


@dataclass(frozen=True, kw_only=True)
class Choice:
    """A placement: the member and, per pod, the node and GPUs it gets."""

    member: str
    pods: tuple[tuple[str, int], ...]
    score: float = 0.0


class Backend(Protocol):
    """The capacity model behind a simulated fleet (one policy run)."""

    def members(self, view: View = "live") -> Sequence[MemberSnapshot]:
        """Every member as placement sees it on ``view`` (the same objects each call:
        their capacity follows ``bind`` and ``release``)."""
        ...

    def fitting(self, request: PlacementRequest) -> frozenset[str]:
        """Members where ``request`` fits now as a whole (live view), for fragmentation."""
        ...

    def bind(self, *, uid: str, choice: Choice, durable: bool) -> None:
        """Pods of ``uid`` now run on the chosen nodes (``durable``: until the end)."""
        ...

    def release(self, *, uid: str) -> None:
        """Pods of ``uid`` finished: their GPUs are free again."""
        ...
