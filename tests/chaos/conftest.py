"""Chaos suite options and its private fleet.

``--chaos-rounds N`` (default 5: one round per fault kind), ``--chaos-seed S`` (default
fixed, so CI failures replay; the seed of round i is derived from S and i) and
``--chaos-members static|membercluster`` (members from the controller's config, default,
or registered as MemberCluster objects with kubeconfig Secrets) and ``--chaos-fleet
light|real`` (default light: member apiservers only, a round marks copies running by hand;
real: members with kube-scheduler, kube-controller-manager, kwok and the workload operators,
whose statuses are the operators' own). The fleet,
controller replicas and logs live under one temporary directory for the session; it is
kept after the run so the controller logs can be read (path in the failure message):
``$TMPDIR/dispatcher-chaos/run-<time>-<pid>`` (outside pytest's rotating temp folders).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .env import ChaosEnv

DEFAULT_ROUNDS = 5
DEFAULT_SEED = 20261129
DEFAULT_MEMBERS = "static"
DEFAULT_FLEET = "light"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos")
    group.addoption("--chaos-rounds", type=int, default=DEFAULT_ROUNDS,
                    help=f"chaos rounds to run (default {DEFAULT_ROUNDS})")
    group.addoption("--chaos-seed", type=int, default=DEFAULT_SEED,
                    help=f"base seed of the chaos rounds (default {DEFAULT_SEED})")
    group.addoption("--chaos-members", choices=("static", "membercluster"),
                    default=DEFAULT_MEMBERS,
                    help="how the controller learns its members: static config entries or "
                         f"MemberCluster objects with kubeconfig Secrets (default "
                         f"{DEFAULT_MEMBERS})")
    group.addoption("--chaos-fleet", choices=("light", "real"), default=DEFAULT_FLEET,
                    help="light: member apiservers only; real: members with scheduler, "
                         "controller-manager, kwok and the workload operators (default "
                         f"{DEFAULT_FLEET})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault-injection rounds on a private fleet")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A real chaos fleet takes minutes to start (operators, webhooks), inside the first
    round's time: the rounds get 1200 s instead of 400 s then."""
    if config.getoption("--chaos-fleet", default=DEFAULT_FLEET) == "real":
        for item in items:
            if "chaos_round" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.timeout(1200))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_round" in metafunc.fixturenames:
        rounds = int(metafunc.config.getoption("--chaos-rounds", default=DEFAULT_ROUNDS))
        metafunc.parametrize("chaos_round", range(rounds), ids=[f"round{i}" for i in range(rounds)])


@pytest.fixture(scope="session")
def chaos_seed(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--chaos-seed", default=DEFAULT_SEED))


@pytest.fixture(scope="session")
async def chaos_env(request: pytest.FixtureRequest) -> AsyncIterator[ChaosEnv]:
    os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1",
                                                    "localhost"]))
    root = (Path(tempfile.gettempdir()) / "dispatcher-chaos"
            / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    members = str(request.config.getoption("--chaos-members", default=DEFAULT_MEMBERS))
    real = request.config.getoption("--chaos-fleet", default=DEFAULT_FLEET) == "real"
    env = await ChaosEnv.start(root, members=members, real=real)
    try:
        yield env
    finally:
        await env.close()
