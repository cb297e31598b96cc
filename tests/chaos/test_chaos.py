"""Seeded chaos rounds against a private fleet: nothing lost, duplicated, leaked or leaked out.

Round i injects fault kind i mod 5 (controller kill -9, member restart, hub restart with
etcd compaction, two replicas, slow member), so the default five rounds cover every kind;
``--chaos-rounds 20`` runs four of each. See ``rounds`` for the invariants.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.workloads.catalog import Catalog

from .env import ChaosEnv
from .rounds import FAULT_KINDS, run_round
from .stream import load_samples

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]

SAMPLES = load_samples()
REAL_SAMPLES = load_samples(real=True)


def round_seed(base: int, index: int) -> int:
    return base * 1000 + index


def test_samples_cover_the_main_frameworks() -> None:
    kinds = {s.kind for s in SAMPLES}
    assert {"JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet"} <= kinds
    assert {s.kind for s in REAL_SAMPLES} == {"JobSet", "RayJob", "LeaderWorkerSet",
                                              "TFJob", "MPIJob"}


async def test_round(chaos_env: ChaosEnv, chaos_round: int, chaos_seed: int) -> None:
    result = await run_round(chaos_env, index=chaos_round,
                             seed=round_seed(chaos_seed, chaos_round),
                             samples=REAL_SAMPLES if chaos_env.real else SAMPLES)
    assert result.faults.get(result.fault, 0) >= 1, f"the {result.fault} fault never happened"
    assert result.workloads >= 3
    assert result.ok, (f"round {chaos_round} (seed {result.seed}, fault {result.fault}) "
                       f"violations, logs in {chaos_env.root / 'logs'}:\n"
                       + "\n".join(result.violations))


@pytest.mark.timeout(1200)  # the first user of the session's real fleet waits for its start
async def test_controller_kill_round_on_the_real_fleet(real_fleet: FleetState,
                                                       chaos_seed: int) -> None:
    """A controller-kill round on the session's real fleet: the operators write every
    status, kube-scheduler binds the pods (reservations shrink as they bind), kwok runs
    them; the replica is stopped after the round (it watches every hub namespace)."""
    index = FAULT_KINDS.index("controller-kill")
    root = (Path(tempfile.gettempdir()) / "dispatcher-chaos"
            / f"real-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    env = await ChaosEnv.attach(root, real_fleet, real=True)
    try:
        result = await run_round(env, index=index, seed=round_seed(chaos_seed, index),
                                 samples=REAL_SAMPLES)
    finally:
        await env.close()
    print(result)
    assert result.faults.get("controller-kill", 0) >= 1
    assert result.workloads >= 3
    assert result.ok, (f"real-fleet round (seed {result.seed}) violations, logs in "
                       f"{root / 'logs'}:\n" + "\n".join(result.violations))


@pytest.mark.timeout(1200)  # the first user of the session's shared hub waits for its start
async def test_controller_kill_round_on_the_shared_hub(shared_hub_fleet: FleetState,
                                                       chaos_seed: int) -> None:
    """The same round on a shared hub (its own controllers, scheduler, nodes and operators
    run): the replicas serve the webhook, every workload is held on the hub as its
    definition declares (kinds nothing can hold are left out: they are refused there), and
    after the kill nothing is lost, duplicated or run on the hub; a pause-held kind's hub
    status stays the hub controller's."""
    from dispatcher.kube import watch
    from dispatcher.kube.resources import PODS

    catalog = Catalog.builtin()
    holdable = []
    for sample in REAL_SAMPLES:
        definition = catalog.find(str(sample.body["apiVersion"]), sample.kind)
        if definition is not None and definition.hold is not None \
                and definition.hold.kind != "refuse":
            holdable.append(sample)
    assert {s.kind for s in holdable} == {"JobSet", "MPIJob", "TFJob"}
    index = FAULT_KINDS.index("controller-kill")
    root = (Path(tempfile.gettempdir()) / "dispatcher-chaos"
            / f"shared-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    env = await ChaosEnv.attach(root, shared_hub_fleet, real=True, shared=True)
    try:
        result = await run_round(env, index=index, seed=round_seed(chaos_seed, index),
                                 samples=holdable)
        hub_pods = [p for p in (await watch.list_objects(env.hub, PODS)).objects
                    if p["metadata"]["namespace"].startswith("chaos-")]
    finally:
        await env.close()
    print(result)
    assert result.faults.get("controller-kill", 0) >= 1
    assert result.workloads >= 3
    assert hub_pods == [], [p["metadata"]["name"] for p in hub_pods]
    assert result.ok, (f"shared-hub round (seed {result.seed}) violations, logs in "
                       f"{root / 'logs'}:\n" + "\n".join(result.violations))
