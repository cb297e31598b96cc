"""What the event loop asks of the placement cores, as a narrow protocol.

The simulator runs the real capacity model and placement engine; ``dispatcher.sim.cores``
adapts them to this protocol. Keeping the loop behind it lets the loop be read (and tested)
without knowing the cores' internals, and keeps the adaptation in one place when they change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from dispatcher.placement.model import (
    PIN_ANNOTATION,
    POLICY_ANNOTATION,
    SELECTOR_ANNOTATION,
    topology_from_annotations,
)
from dispatcher.workloads.demand import Demand, TopologyConstraint

__all__ = ["NO_RULES", "Backend", "Choice", "NoFit", "Outcome", "Rules", "View"]

View = Literal["live", "durable", "empty"]
"""Which capacity a question is about: ``live`` (everything running now), ``durable`` (only
workloads that never end, i.e. services: what is left once every batch job finishes) or
``empty`` (the bare fleet: can this workload ever run here?)."""


@dataclass(frozen=True, kw_only=True)
class Rules:
    """A workload's own placement rules, from its ``dispatcher.io/*`` annotations: pinned
    member, cluster selector, a policy that overrides the run's, and a topology level
    every gang must stay inside (``dispatcher.io/topology``)."""

    pin: str | None = None
    selector: str | None = None
    policy: str | None = None
    topology: TopologyConstraint | None = None

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Rules:
        """The rules written on a manifest (none when it has no such annotations)."""
        meta = manifest.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        if not isinstance(annotations, Mapping):
            return NO_RULES
        return cls(pin=_text(annotations.get(PIN_ANNOTATION)),
                   selector=_text(annotations.get(SELECTOR_ANNOTATION)),
                   policy=_text(annotations.get(POLICY_ANNOTATION)),
                   topology=topology_from_annotations(
                       {str(k): str(v) for k, v in annotations.items() if v is not None}))


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


NO_RULES = Rules()


@dataclass(frozen=True, kw_only=True)
class Choice:
    """A placement: the member and, per pod, the node and GPUs it gets."""

    member: str
    pods: tuple[tuple[str, int], ...]
    score: float = 0.0


@dataclass(frozen=True, kw_only=True)
class NoFit:
    """No feasible member; ``reasons`` maps each member to the placement's numeric reason."""

    reasons: Mapping[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: ``member-1: <reason>; member-2: <reason>``."""
        return "; ".join(f"{member}: {reason}" for member, reason in self.reasons.items())


Outcome = Choice | NoFit


class Backend(Protocol):
    """The capacity model and placement engine behind a simulated fleet (one policy run)."""

    def place(self, demand: Demand, *, policy: str, view: View = "live",
              exclude: frozenset[str] = frozenset(), rules: Rules = NO_RULES) -> Outcome:
        """Where ``demand`` fits on ``view``, members in ``exclude`` left out. A request
        the placement rejects (unknown pinned member, bad selector) is a NoFit whose reason
        says so."""
        ...

    def fitting(self, demand: Demand, *, rules: Rules = NO_RULES) -> frozenset[str]:
        """Members where ``demand`` fits now as a whole (live view), for fragmentation."""
        ...

    def bind(self, *, uid: str, choice: Choice, durable: bool) -> None:
        """Pods of ``uid`` now run on the chosen nodes (``durable``: until the end)."""
        ...

    def release(self, *, uid: str) -> None:
        """Pods of ``uid`` finished: their GPUs are free again."""
        ...
