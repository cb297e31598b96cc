"""Seeded chaos rounds against a private fleet: nothing lost, duplicated, leaked or leaked out.

Round i injects fault kind i mod 5 (controller kill -9, member restart, hub restart with
etcd compaction, two replicas, slow member), so the default five rounds cover every kind;
``--chaos-rounds 20`` runs four of each. See ``rounds`` for the invariants.
"""

from __future__ import annotations

import pytest

from .env import ChaosEnv
from .rounds import run_round
from .stream import load_samples

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]

SAMPLES = load_samples()


def round_seed(base: int, index: int) -> int:
    return base * 1000 + index


def test_samples_cover_the_main_frameworks() -> None:
    kinds = {s.kind for s in SAMPLES}
    assert {"JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet"} <= kinds


async def test_round(chaos_env: ChaosEnv, chaos_round: int, chaos_seed: int) -> None:
    result = await run_round(chaos_env, index=chaos_round,
                             seed=round_seed(chaos_seed, chaos_round), samples=SAMPLES)
    assert result.faults.get(result.fault, 0) >= 1, f"the {result.fault} fault never happened"
    assert result.workloads >= 3
    assert result.ok, (f"round {chaos_round} (seed {result.seed}, fault {result.fault}) "
                       f"violations, logs in {chaos_env.root / 'logs'}:\n"
                       + "\n".join(result.violations))
