"""Benchmark: a large gang of one namespace against another namespace's stream of small Jobs.

``benchmarks/scenarios/gang-vs-stream.yaml`` on the dev fleet (``clusters/local.yaml``):
team-a streams 1-GPU Jobs, more than the fleet can run, team-b submits a 4 x 8-GPU JobSet
that only member-1's H100 nodes can hold. The run is ``dispatcher simulate``'s: the
controller's own queue and placement core (``control.core.queue``, ``placing.place_ask``)
over the real capacity model, in virtual time, so it is deterministic for a seed. Each case
is the same stream with another ``queue.claimAfter`` (0: no claims, as before claims
existed; the default 300 s).

Prints one JSON object per case: bench, case, claim_after_s, gang_wait_s (hub create ->
placed, virtual seconds), bound_s (claimAfter plus the longest small run: what the claim
promises), small_wait_p50_s / small_wait_p99_s (team-a's Jobs), gpu_utilization (the whole
run), dispatched, wall_s (this machine), machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

from dispatcher.sim.runner import run_scenario
from dispatcher.sim.scenario import load_scenario

SCENARIO = Path(__file__).parent / "scenarios" / "gang-vs-stream.yaml"
LONGEST_SMALL_RUN_S = 15 * 60  # the scenario's runTime upper bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claim-after", type=float, action="append",
                        help="seconds (repeatable; default: 0 and the scenario's value)")
    args = parser.parse_args()
    base = load_scenario(SCENARIO)
    cases = args.claim_after or [0.0, base.queue.claim_after_s]
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, " \
              f"Python {platform.python_version()}"
    for claim_after in cases:
        scenario = replace(base, queue=replace(base.queue, claim_after_s=claim_after))
        started = time.perf_counter()
        result = run_scenario(scenario).results[0]
        wall = time.perf_counter() - started
        gang = [d for d in result.decisions if d.namespace == "team-b"]
        smalls = sorted(d.wait for d in result.decisions if d.namespace == "team-a")
        print(json.dumps({
            "bench": "starvation", "case": "no claims" if claim_after <= 0 else "claims",
            "claim_after_s": claim_after,
            "gang_wait_s": round(gang[0].wait, 1) if gang else None,
            "bound_s": claim_after + LONGEST_SMALL_RUN_S if claim_after > 0 else None,
            "small_wait_p50_s": round(smalls[len(smalls) // 2], 1) if smalls else None,
            "small_wait_p99_s": round(smalls[int(len(smalls) * 0.99)], 1) if smalls else None,
            "gpu_utilization": round(result.utilization, 3),
            "dispatched": len(result.decisions), "wall_s": round(wall, 2),
            "machine": machine}), flush=True)


if __name__ == "__main__":
    main()
