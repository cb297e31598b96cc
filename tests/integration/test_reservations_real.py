"""A dispatched Job's reservation shrinks as the real scheduler binds its pods.

On the ``real_fleet`` (kube-scheduler and kwok on every member), the in-process controller
dispatches a hub Job pinned to member-2 (otherwise idle in this session); the test records
the member's capacity at *every* pod event the controller's informer applies (by wrapping
the member's ``MemberReservations.upsert_pod``) and also samples it on a timer. At each
sample, GPUs of bound pods + GPUs still reserved must equal the Job's demand once it is
placed: more would be a GPU counted twice, less one forgotten.
Not covered here: off-plan bindings (unit tests), timings.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.connection import MemberConnection
from dispatcher.kube.resources import ResourceRef
from dispatcher.placement.model import PIN_ANNOTATION

from .harness import Harness, eventually, running

pytestmark = pytest.mark.integration

MEMBER = "member-2"
PODS, GPUS_PER_POD = 4, 4
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)

Sample = tuple[str, int, int, int]  # (when, GPUs still reserved for the Job, used, reserved)


@pytest.fixture(scope="module")
async def harness(real_fleet: FleetState) -> AsyncIterator[Harness]:
    async with running(real_fleet) as h:
        yield h


def job(name: str, namespace: str) -> dict[str, Any]:
    """4 pods x 4 GPUs of A100 (member-2's a100 pool: 4 nodes x 4), running for a minute."""
    pod_spec = {"restartPolicy": "Never",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                "containers": [{"name": "train", "image": "registry.invalid/train:1",
                                "resources": {"limits": {"nvidia.com/gpu": GPUS_PER_POD}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {PIN_ANNOTATION: MEMBER}},
            "spec": {"parallelism": PODS, "completions": PODS, "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "60s"}},
                "spec": pod_spec}}}


def _sampler(conn: MemberConnection, uid: Callable[[], str],
             samples: list[Sample]) -> Callable[[str], None]:
    def sample(when: str) -> None:
        held = conn.reservations.get(uid())
        summary = conn.capacity.summary()
        samples.append((when, held.gpus if held is not None else 0, summary.used,
                        summary.reserved))
    return sample


async def test_reservation_shrinks_as_pods_bind_and_never_double_counts(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = harness.controller.fleet.fleet.connection(MEMBER)  # type: ignore[attr-defined]
    assert isinstance(conn, MemberConnection)

    async def idle() -> bool:
        summary = conn.capacity.summary()
        return summary.used == 0 and summary.reserved == 0

    await eventually(idle, what=f"{MEMBER} idle (earlier tests' pods finished)")
    uid = ""
    samples: list[Sample] = []
    sample = _sampler(conn, lambda: uid, samples)
    upsert = conn.reservations.upsert_pod

    def recording(pod: Mapping[str, Any]) -> None:
        upsert(pod)
        sample("pod")

    monkeypatch.setattr(conn.reservations, "upsert_pod", recording)

    async def timer() -> None:
        while True:
            sample("timer")
            await asyncio.sleep(0.005)

    ticking = asyncio.create_task(timer())
    try:
        created = await harness.hub.request(
            "POST", JOBS.collection(harness.namespace), body=job("fill", harness.namespace))
        uid = created["metadata"]["uid"]

        async def all_bound_and_released() -> bool:
            summary = conn.capacity.summary()
            return summary.used == PODS * GPUS_PER_POD and conn.reservations.get(uid) is None
        await eventually(all_bound_and_released, what="every pod bound, reservation gone")
    finally:
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    demand = PODS * GPUS_PER_POD
    placed = [s for s in samples if s[1] or s[2]]
    assert placed, "the reservation was never seen"
    # From placement on: bound + reserved == demand at every sample (no double, no zero).
    assert [s for s in placed if s[2] + s[3] != demand] == []
    # Shrunk by the pods themselves, one pod's GPUs at a time (not all at once by the mirror).
    held_at_pod_events = [s[1] for s in placed if s[0] == "pod"]
    assert demand - GPUS_PER_POD in held_at_pod_events
    assert held_at_pod_events[-1] == 0
    assert conn.capacity.free == conn.capacity.summary().allocatable - demand
