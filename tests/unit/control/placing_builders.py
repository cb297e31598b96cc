"""Builders for placement inputs: real Job objects resolved through the built-in catalog,
real capacity models and the controller's own PendingQueue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatcher.control.core.parking import BareFleet
from dispatcher.control.core.placing import PlacementInput
from dispatcher.control.core.priority import PriorityPolicy
from dispatcher.control.core.queue import PendingQueue
from dispatcher.placement.model import MemberSnapshot
from dispatcher.workloads.catalog import Catalog
from tests.unit.placement.builders import cluster

NOW = 1_000_000.0
CATALOG = Catalog.builtin()


def job(name: str = "train", *, gpus: int = 4, parallelism: int = 2, namespace: str = "team-a",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-11-30T10:00:00Z",
                         "annotations": annotations or {}},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": "busybox",
                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}


def members(used_a: int = 0) -> list[MemberSnapshot]:
    """a: 2 x 8 GPUs (``used_a`` of a0 taken); b: 1 x 4 GPUs, only for namespace team-b."""
    return [MemberSnapshot(name="a", capacity=cluster({"name": "a0", "gpus": 8, "used": used_a},
                                                      {"name": "a1", "gpus": 8})),
            MemberSnapshot(name="b", capacity=cluster({"name": "b0", "gpus": 4}),
                           allowed_namespaces=("team-b",))]


def given(workload: dict[str, Any], *, fleet: Sequence[MemberSnapshot] | None = None,
          queue: PendingQueue | None = None, held: tuple[str, ...] = (),
          excluded: tuple[str, ...] = (),
          resolution: Any = None) -> PlacementInput:
    the_fleet = list(members() if fleet is None else fleet)
    return PlacementInput(
        uid=workload["metadata"]["uid"], workload=workload,
        resolution=CATALOG.resolve(workload) if resolution is None else resolution,
        excluded=excluded, held=held, members=lambda: the_fleet, bare=BareFleet(),
        queue=queue or PendingQueue(backfill_limit=2), priority=PriorityPolicy(),
        default_policy="most-free", reservation_ttl_s=60.0, now=NOW)
