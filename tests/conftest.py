"""Shared fixtures.

``dev_fleet`` (session) starts real control planes through ``dispatcher.devfleet``: one etcd,
a dedicated hub (kube-apiserver + a kube-controller-manager with only the namespace, garbage
collector, service-account, ClusterRole-aggregation and TTL controllers) and two members
with GPU Nodes (tests/integration/fleet.yaml), apiservers only (the light profile: nothing
fights a test that patches member objects by hand). ``real_fleet`` (session) is the same
dedicated hub and members with kube-controller-manager, kube-scheduler, kwok and the
operators on each member; ``shared_hub_fleet`` (session) is ``real_fleet`` with a shared hub
(a full cluster like a member: every controller, scheduler, kwok Nodes from the fleet
file's ``hub:`` section, the operators and their webhooks). Each has its own state
directory, etcd and ports, so all can run in one session. Each is started only when a test
asks for it, so unit tests never pay for it.
When the binaries cannot be built the fixtures fail (never skip): a skipped integration
suite would hide a broken set-up.

``kueue_fleet`` (session) is the real fleet with the Kueue profile (MultiKueue manager on
the hub, workers on the members) and only the JobSet operator; the tests using it (marked
``kueue``) run only with ``pytest --kueue``: building Kueue and starting it cost more than
the normal suite's budget. They are deselected otherwise (reported as such), never skipped.
``member_kueue_fleet`` (session) is the ``--member-kueue`` profile: each member runs its own
Kueue (``clusters/kueue-members.yaml``), the hub none; its tests run in every suite.
``v137_fleet`` (module) runs Kubernetes 1.37 everywhere, one member with its gang API gate
off (``integration/fleet-v137.yaml``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dispatcher.control.nominator import DISPATCHER_NAME
from dispatcher.devfleet import devfleet, orphans
from dispatcher.devfleet.binaries import cache_root
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.devfleet.kueue import ClientLimits
from dispatcher.fleet.fleetfile import FleetSpec, load_fleet

TEST_FLEET = Path(__file__).parent / "integration" / "fleet.yaml"

# Loopback only: never send control-plane traffic through a proxy from the environment.
os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1",
                                                "localhost"]))


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a CI or `timeout` kill) ends the run like Ctrl-C, so session fixtures still
    stop the control planes they started instead of leaving orphan apiservers behind."""
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _interrupt)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop what an earlier run killed with SIGKILL left running (its fixtures could not):
    orphaned control planes and controllers under pytest's temporary root, never a fleet
    of `dispatcher dev up`."""
    marker = f"{session.config._tmp_path_factory.getbasetemp().parent}{os.sep}"  # type: ignore[attr-defined]
    left = orphans.orphans(marker=marker, programs=cache_root())
    if left:
        print(f"\nstopping {len(left)} processes an earlier killed run left: {left}",
              file=sys.stderr)
        orphans.reap(left)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kueue", action="store_true",
                     help="also run the tests marked 'kueue' (builds Kueue v0.17.0 on first "
                          "use, starts a fleet with MultiKueue)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--kueue"):
        return
    kept = [item for item in items if item.get_closest_marker("kueue") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def fleet_spec() -> FleetSpec:
    """The members and node pools of the integration fleet."""
    return load_fleet(TEST_FLEET)


@pytest.fixture(scope="session")
def dev_fleet(tmp_path_factory: pytest.TempPathFactory, fleet_spec: FleetSpec
              ) -> Iterator[FleetState]:
    """A running hub + members for the whole session; stopped and removed afterwards."""
    root = tmp_path_factory.mktemp("devfleet")
    state = devfleet.up(root=root, fleet=fleet_spec)
    try:
        yield state
    finally:
        devfleet.down(root=root)


def _real(root: Path, fleet_spec: FleetSpec, *, hub: devfleet.HubMode) -> Iterator[FleetState]:
    """Real members and a hub of mode ``hub``, stopped and removed afterwards (also when
    starting fails half-way)."""
    try:
        state = devfleet.up(root=root, fleet=fleet_spec, real=True, hub=hub)
    except BaseException:
        devfleet.down(root=root)
        raise
    try:
        yield state
    finally:
        devfleet.down(root=root)


@pytest.fixture(scope="session")
def real_fleet(tmp_path_factory: pytest.TempPathFactory, fleet_spec: FleetSpec
               ) -> Iterator[FleetState]:
    """A running dedicated hub + real members (controllers, scheduler, kwok) for the whole
    session."""
    yield from _real(tmp_path_factory.mktemp("realfleet"), fleet_spec, hub="dedicated")


@pytest.fixture(scope="session")
def shared_hub_fleet(tmp_path_factory: pytest.TempPathFactory, fleet_spec: FleetSpec
                     ) -> Iterator[FleetState]:
    """A running shared hub (a full cluster, ``hub_mode == "shared"``) + real members for
    the whole session."""
    yield from _real(tmp_path_factory.mktemp("sharedhub"), fleet_spec, hub="shared")


MEMBER_KUEUE_FLEET = Path(__file__).parents[1] / "clusters" / "kueue-members.yaml"


@pytest.fixture(scope="session")
def member_kueue_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetState]:
    """A running hub + real members that each run their own Kueue (the ``--member-kueue``
    profile of ``clusters/kueue-members.yaml``) and the JobSet operator, for the whole
    session. A Job's pods run 10 minutes: quota stays taken while a test looks."""
    yield from _with_operators(tmp_path_factory.mktemp("memberkueue"), "jobset", lambda root: (
        devfleet.up(root=root, fleet=load_fleet(MEMBER_KUEUE_FLEET), real=True,
                    member_kueue=True, job_seconds=600)))


@pytest.fixture(scope="module")
def mk_dispatcher_fleet(tmp_path_factory: pytest.TempPathFactory, fleet_spec: FleetSpec
                        ) -> Iterator[FleetState]:
    """The ``--with-kueue --kueue-dispatcher ours`` profile (a MultiKueue manager on the
    hub whose ``multiKueue.dispatcherName`` is ours, a worker on each member) with the
    JobSet operator, for one module: three Kueue instances are stopped once it is done."""
    yield from _with_operators(tmp_path_factory.mktemp("mkdispatcher"), "jobset", lambda root: (
        devfleet.up(root=root, fleet=fleet_spec, real=True,
                    kueue=ClientLimits(dispatcher_name=DISPATCHER_NAME))))


V137_FLEET = Path(__file__).parent / "integration" / "fleet-v137.yaml"


@pytest.fixture(scope="module")
def v137_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetState]:
    """A dedicated 1.37 hub and two real 1.37 members (``fleet-v137.yaml``: the built-in gang
    API on one, its gate off on the other) with the JobSet operator, for one module."""
    yield from _with_operators(tmp_path_factory.mktemp("v137"), "jobset", lambda root: (
        devfleet.up(root=root, fleet=load_fleet(V137_FLEET), real=True)))


def _with_operators(root: Path, operators: str,
                    start: Callable[[Path], FleetState]) -> Iterator[FleetState]:
    """A fleet ``start``ed under ``root`` with only ``operators`` built and run
    (``DISPATCHER_DEV_OPERATORS``), stopped and removed afterwards (also when starting
    fails half-way)."""
    saved = os.environ.get("DISPATCHER_DEV_OPERATORS")
    os.environ["DISPATCHER_DEV_OPERATORS"] = operators
    try:
        state = start(root)
    except BaseException:
        devfleet.down(root=root)
        raise
    finally:
        if saved is None:
            del os.environ["DISPATCHER_DEV_OPERATORS"]
        else:
            os.environ["DISPATCHER_DEV_OPERATORS"] = saved
    try:
        yield state
    finally:
        devfleet.down(root=root)


@pytest.fixture(scope="session")
def kueue_fleet(tmp_path_factory: pytest.TempPathFactory, fleet_spec: FleetSpec
                ) -> Iterator[FleetState]:
    """A running hub + real members with Kueue (the ``--with-kueue`` profile at Kueue's
    default client limits) and the JobSet operator only, for the whole session."""
    yield from _with_operators(tmp_path_factory.mktemp("kueuefleet"), "jobset", lambda root: (
        devfleet.up(root=root, fleet=fleet_spec, real=True, kueue=ClientLimits())))
