"""One seeded chaos round: a stream of workloads, a fault, then the invariants.

A round creates catalog workloads on the hub (random kinds, names, gaps), marks some
"running" on their member (on the light fleet there is no kubelet: the copy's status
subresource is patched with the framework's own running status; on the real fleet the
members' operators, scheduler and kwok run the copies and write their statuses, and the
round only watches), deletes some from the hub, and meanwhile injects its fault (plus, in
half the member and replica rounds, an extra kill -9 of the leader). After recovery it
waits, up to ``BOUND_S``, for the invariants, and measures how long they took:

- no loss: every live workload has a Dispatch with a decision and its copy on a member;
- no duplicate: exactly one copy per workload over all members (listed by origin label);
- agreement: the copy is on the member the Dispatch names, stamped with the hub uid;
- deletions: a deleted hub workload and its Dispatch are gone (the Dispatch's finalizer
  released) with no copy anywhere;
- status: a member copy's status is mirrored to the hub object, and the Dispatch shows the
  generic status the definition reads from the copy;
- no leaked reservation: after cleanup (on the real fleet: once the members' garbage
  collectors removed the pods too), probes needing each member's whole GPU capacity
  (pinned there) are submitted at once;
- leader election: a replica acts only after it acquired the Lease and never after a later
  replica acquired it; no undocumented controller exit and no crashed background task;
- secrets: no token or key line of the fleet in any controller log or hub Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.control.core.record import decision_of
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound, ServerError, Unreachable
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.resolve import status_of

from .env import HUB_ID, MEMBERS, ChaosEnv
from .stream import Sample, instance, pick, ref_of

__all__ = ["BOUND_S", "FAULT_KINDS", "RoundResult", "run_round"]

FAULT_KINDS = ("controller-kill", "member-restart", "hub-restart", "two-replicas",
               "slow-member")
BOUND_S = 60.0
"""Convergence bound after the last fault ended (failover needs memberLostAfter + sweep)."""
GPU_BUDGET = 14
"""GPUs per round: everything fits on either member alone (failover has room)."""
ACTING = frozenset({"placement.decided", "workload.submitted", "status.mirrored",
                    "workload.deleted", "copy.swept", "workload.requeued", "workload.failed",
                    "workload.pending", "member.lost", "workload.conflict"})
PROBES = {"member-1": (2, 8, "NVIDIA-H100-80GB-HBM3"), "member-2": (4, 4, "NVIDIA-A100-SXM4-80GB")}
"""Per member: pods x GPUs of one product = every schedulable GPU it has."""

T = TypeVar("T")
CATALOG = Catalog.builtin()


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """What one round did and found (counts of violations; zero is a pass)."""

    index: int
    seed: int
    fault: str
    faults: Mapping[str, int]
    members: str = "static"
    """How the controller learned its members (static config or MemberCluster objects)."""
    fleet: str = "light"
    """light (apiservers only, statuses patched by the round) or real (operators, kwok)."""
    workloads: int
    deleted: int
    losses: int = 0
    duplicates: int = 0
    misplaced: int = 0
    undeleted: int = 0
    unmirrored: int = 0
    leaked: int = 0
    leader_violations: int = 0
    crashes: int = 0
    secrets: int = 0
    leader_changes: int = 0
    """Leases acquired during the round."""
    leader_losses: int = 0
    """Leaders that gave up for lack of renewal (0 in a hub-restart round: the leader rode
    through it and its watches resumed through 410 Gone after the compaction)."""
    converge_s: float | None = None
    mirror_s: float | None = None
    violations: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Tracked:
    """A workload this round created."""

    name: str
    sample: Sample
    ref: ResourceRef
    uid: str
    deleted: bool = False
    problems: list[str] = field(default_factory=list)


async def retry(call: Callable[[], Awaitable[T]], *, within: float = BOUND_S) -> T:
    """Retry through outages (no answer, 5xx, 429) for up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (Unreachable, ServerError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _get(client: KubeClient, path: str) -> Any:
    try:
        return await client.request("GET", path, request_timeout=3)
    except NotFound:
        return None


# -- faults ------------------------------------------------------------------------------

async def inject(env: ChaosEnv, fault: str, rng: random.Random) -> None:
    """The round's main fault, at a random point of the stream."""
    await asyncio.sleep(rng.uniform(0.3, 5.0))
    member = rng.choice(MEMBERS)
    if fault == "controller-kill":
        await env.kill_leader()
    elif fault == "member-restart":
        await env.member_outage(member, rng.uniform(1.0, 9.0))
    elif fault == "hub-restart":
        await env.hub_restart()
    elif fault == "two-replicas":
        await env.second_replica(rng.uniform(6.0, 10.0), kill_leader_after=rng.uniform(2, 5))
    elif fault == "slow-member":
        await env.slow_member(member, rng.uniform(2.0, 6.0))
    else:
        raise ValueError(f"unknown fault {fault!r}")


async def extra_kill(env: ChaosEnv, rng: random.Random) -> None:
    await asyncio.sleep(rng.uniform(0.0, 8.0))
    await env.kill_leader()


# -- the stream --------------------------------------------------------------------------

async def _create(env: ChaosEnv, body: Mapping[str, Any], ref: ResourceRef) -> str:
    meta = body["metadata"]

    async def call() -> str:
        try:
            created = await env.hub.request("POST", ref.collection(meta["namespace"]),
                                            body=body)
        except Conflict:  # the first POST went through before the connection broke
            created = await env.hub.request("GET", ref.item(meta["name"], meta["namespace"]))
        return str(created["metadata"]["uid"])
    return await retry(call)


async def copies_of(env: ChaosEnv, t: Tracked, namespace: str) -> list[tuple[str, Any]]:
    """(member, object) of every copy of ``t``, listed by origin and hub-uid labels."""
    found: list[tuple[str, Any]] = []
    selector = f"{ORIGIN_LABEL}={HUB_ID},{HUB_UID_LABEL}={t.uid}"
    for member, client in env.members.items():
        listing = await retry(lambda c=client: c.request(  # type: ignore[misc]
            "GET", t.ref.collection(namespace), query=[("labelSelector", selector)],
            request_timeout=3))
        found += [(member, item) for item in listing.get("items") or ()]
    return found


async def mark_running(env: ChaosEnv, t: Tracked, namespace: str) -> bool:
    """Patch the framework's running status onto the copy, wherever it is (best effort).
    On the real fleet the operator owns the status: nothing is patched, and every copy is
    checked as marked (its status, whatever the operator wrote, must be mirrored)."""
    if env.real:
        return True
    try:
        copies = await copies_of(env, t, namespace)
    except KubeError:
        return False
    marked = False
    for member, obj in copies:
        client = env.members[member]
        try:
            await client.request(
                "PATCH", t.ref.item(obj["metadata"]["name"], namespace, "status"),
                body={"status": dict(t.sample.running_status)},
                content_type=JSON_MERGE_PATCH, request_timeout=3)
            marked = True
        except KubeError:
            pass
    return marked


async def delete_hub(env: ChaosEnv, t: Tracked, namespace: str) -> None:
    async def call() -> None:
        with contextlib.suppress(NotFound):
            await env.hub.request("DELETE", t.ref.item(t.name, namespace))
    await retry(call)
    t.deleted = True


# -- invariants --------------------------------------------------------------------------

async def check_workload(env: ChaosEnv, t: Tracked, namespace: str, *,
                         running: bool) -> list[str]:
    """What is wrong with ``t`` right now (empty: converged)."""
    copies = await copies_of(env, t, namespace)
    hub_obj = await retry(lambda: _get(env.hub, t.ref.item(t.name, namespace)))
    dispatch_name = f"{t.sample.kind.lower()}-{t.name}"
    record = await retry(lambda: _get(env.hub, DISPATCHES.item(dispatch_name, namespace)))
    if t.deleted:
        out = [f"{t.name}: deleted on the hub but a copy is still on {m}" for m, _ in copies]
        if hub_obj is not None and hub_obj["metadata"]["uid"] == t.uid:
            out.append(f"{t.name}: deleted but still on the hub (a finalizer not released)")
        if record is not None and record["spec"]["workload"]["uid"] == t.uid:
            out.append(f"{t.name}: deleted but its Dispatch is still there (its finalizer "
                       f"not released)")
        return out
    if hub_obj is None:
        return [f"LOST {t.name}: the hub object is gone"]
    if record is None:
        return [f"LOST {t.name}: no Dispatch"]
    status = record.get("status") or {}
    cluster = decision_of(record).get("cluster")
    phase = status.get("phase")
    if len(copies) > 1:
        return [f"DUPLICATE {t.name}: copies on {sorted(m for m, _ in copies)}"]
    if not copies:
        return [f"LOST {t.name}: no copy on any member (Dispatch phase {phase}, "
                f"cluster {cluster})"]
    (member, obj), = copies
    if cluster != member:
        return [f"MISPLACED {t.name}: Dispatch says {cluster}, copy is on {member}"]
    if phase in (None, "", "Pending", "Placed", "Conflict", "Failed", "Unknown"):
        return [f"LOST {t.name}: Dispatch phase {phase} with the copy on {member}"]
    if running:
        copy_status = obj.get("status") or {}
        hub_status = hub_obj.get("status") or {}
        if hub_owns_status(env, t) and hub_status == copy_status and copy_status:
            return [f"MIRRORED {t.name}: a pause-held kind's hub status is the hub "
                    f"controller's, yet the copy's was written there"]
        if not hub_owns_status(env, t) and any(
                hub_status.get(k) != v for k, v in copy_status.items()):
            return [f"UNMIRRORED {t.name}: hub status differs from the copy's on {member}"]
        expected = status_of(obj, catalog=CATALOG).status  # the definition's reading
        if status.get("genericStatus") != expected:
            return [f"UNMIRRORED {t.name}: Dispatch genericStatus "
                    f"{status.get('genericStatus')!r}, the copy's is {expected!r}"]
    return []


def hub_owns_status(env: ChaosEnv, t: Tracked) -> bool:
    """On a shared hub a pause-held kind's status is its hub controller's, not mirrored."""
    definition = CATALOG.find(str(t.sample.body["apiVersion"]), t.sample.kind)
    return env.shared and definition is not None and definition.hold is not None \
        and definition.hold.hub_writes_status


async def wait_converged(env: ChaosEnv, tracked: Sequence[Tracked], namespace: str, *,
                         running: set[str], bound: float) -> tuple[float | None, list[str]]:
    """Seconds until every invariant held (None and the last problems after ``bound``)."""
    start = time.monotonic()
    problems: list[str] = []
    while time.monotonic() - start < bound:
        problems = []
        try:
            for t in tracked:
                problems += await check_workload(env, t, namespace, running=t.name in running)
        except KubeError as exc:
            problems = [f"check failed: {type(exc).__name__}: {exc}"]
        if not problems:
            return time.monotonic() - start, []
        await asyncio.sleep(0.5)
    return None, problems


def leader_problems(env: ChaosEnv, since: float) -> list[str]:
    """Acting log lines outside a replica's leadership (two replicas acting at once)."""
    out = []
    acquired = []
    lines = {}
    for inst in env.supervisor.instances:
        lines[inst.number] = inst.lines()
        first = next((line for line in lines[inst.number]
                      if line.get("event") == "leader.acquired"), None)
        if first is not None:
            acquired.append((str(first["ts"]), inst.number))
    acquired.sort()
    for inst in env.supervisor.instances:
        if inst.ended is not None and inst.ended < since:
            continue
        mine = next((ts for ts, n in acquired if n == inst.number), None)
        later = next((ts for ts, n in acquired if mine is not None and ts > mine), None)
        for line in lines[inst.number]:
            if line.get("event") not in ACTING:
                continue
            ts = str(line.get("ts"))
            if mine is None or ts < mine:
                out.append(f"replica #{inst.number} acted ({line['event']}) without the Lease")
                break
            if later is not None and ts > later:
                out.append(f"replica #{inst.number} acted ({line['event']}) at {ts} after "
                           f"another replica acquired the Lease at {later}")
                break
    return out


async def secret_problems(env: ChaosEnv, namespace: str) -> list[str]:
    """Any credential of the fleet in a controller log or an Event of the round."""
    secrets = env.secrets()
    texts = {f"controller log #{i.number}": i.text() for i in env.supervisor.instances}
    events = await retry(lambda: env.hub.request(
        "GET", f"/api/v1/namespaces/{namespace}/events"))
    texts["hub Events"] = "\n".join(
        f"{e.get('reason')} {e.get('message')} {e.get('note', '')}"
        for e in events.get("items") or ())
    return [f"SECRET {what} appears in {where}" for where, text in texts.items()
            for what, value in secrets.items() if value and value in text]


async def probe_capacity(env: ChaosEnv, namespace: str) -> tuple[int, list[str]]:
    """Pinned probes needing every GPU of each member; any that stays Pending: a leak."""
    ref = ref_of("jobset.x-k8s.io/v1alpha2", "JobSet")
    names = {}
    for member, (pods, gpus, product) in PROBES.items():
        name = f"probe-{member}"
        body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": name, "namespace": namespace,
                             "annotations": {"dispatcher.io/cluster": member}},
                "spec": {"replicatedJobs": [{"name": "w", "replicas": pods, "template": {
                    "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                        "nodeSelector": {"nvidia.com/gpu.product": product},
                        "containers": [{"name": "w", "image": "x", "resources": {
                            "limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}
        await _create(env, body, ref)
        names[member] = name
    deadline = time.monotonic() + 20.0
    pending = dict(names)
    last: dict[str, Any] = {}
    while pending and time.monotonic() < deadline:
        for member, name in list(pending.items()):
            record = await retry(lambda n=name: _get(  # type: ignore[misc]
                env.hub, DISPATCHES.item(f"jobset-{n}", namespace)))
            status = (record or {}).get("status") or {}
            last[member] = status
            if (status.get("decision") or {}).get("cluster") == member and \
                    status.get("phase") not in (None, "", "Pending"):
                del pending[member]
        await asyncio.sleep(0.3)
    problems = []
    for member in pending:
        message = next((c.get("message") for c in last.get(member, {}).get("conditions") or ()
                        if c.get("type") == "Placed"), "")
        problems.append(f"LEAK on {member}: a probe for its whole capacity stays "
                        f"{last.get(member, {}).get('phase')!r}: {message}")
    for name in names.values():
        path = ref.item(name, namespace)
        await retry(lambda p=path: _delete_quiet(env.hub, p))  # type: ignore[misc]
    if env.real:  # the probes' copies hold every GPU until their pods are gone
        problems += await _copies_gone(env, ref, namespace, list(names.values()))
        problems += await pods_gone(env, namespace)
    return len(pending), problems


async def _copies_gone(env: ChaosEnv, ref: ResourceRef, namespace: str,
                       names: Sequence[str]) -> list[str]:
    deadline = time.monotonic() + BOUND_S
    left: list[str] = list(names)
    while left and time.monotonic() < deadline:
        left = [f"{n} on {m}" for n in names for m, client in env.members.items()
                if await retry(lambda c=client, n=n: _get(  # type: ignore[misc]
                    c, ref.item(n, namespace))) is not None]
        await asyncio.sleep(0.5)
    return [f"probe {what} not deleted" for what in left]


async def _delete_quiet(client: KubeClient, path: str) -> None:
    with contextlib.suppress(NotFound):
        await client.request("DELETE", path)


async def cleanup(env: ChaosEnv, tracked: Sequence[Tracked], namespace: str) -> list[str]:
    """Delete every workload of the round; wait until hub objects and copies are gone (and
    on the real fleet their pods)."""
    for t in tracked:
        if not t.deleted:
            await delete_hub(env, t, namespace)
    _, problems = await wait_converged(env, tracked, namespace, running=set(), bound=BOUND_S)
    return problems + await pods_gone(env, namespace)


async def pods_gone(env: ChaosEnv, namespace: str) -> list[str]:
    """On the real fleet: wait until no pod is left in ``namespace`` on any member (the
    copies are gone; their pods go through the members' garbage collectors). A pod still
    there after ``BOUND_S`` is a deletion not completed."""
    if not env.real:
        return []
    deadline = time.monotonic() + BOUND_S
    left: dict[str, int] = {}
    while time.monotonic() < deadline:
        left = {}
        for member, client in env.members.items():
            listing = await retry(lambda c=client: c.request(  # type: ignore[misc]
                "GET", f"/api/v1/namespaces/{namespace}/pods", request_timeout=3))
            if listing.get("items"):
                left[member] = len(listing["items"])
        if not left:
            return []
        await asyncio.sleep(0.5)
    return [f"{count} pods of deleted workloads still on {member}"
            for member, count in left.items()]


# -- the round ---------------------------------------------------------------------------

async def run_round(env: ChaosEnv, *, index: int, seed: int, samples: Sequence[Sample]
                    ) -> RoundResult:
    """Run round ``index`` with ``seed``; never raises for a violation (see ``violations``)."""
    rng = random.Random(seed)
    fault = FAULT_KINDS[index % len(FAULT_KINDS)]
    before = Counter(env.faults)
    started = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started))  # log ts prefix, UTC
    namespace = f"chaos-{index:03d}-{seed % 100000:05d}"
    await retry(lambda: _ensure_namespace(env.hub, namespace))
    await env.long_lease(fault == "hub-restart")
    await env.wait_leading()
    crashes_before = len(env.supervisor.crashes)

    chosen = pick(samples, rng, budget=GPU_BUDGET)[:rng.randint(4, 6)]
    # The faults draw from their own generator: sharing one with the workload steps let
    # the scheduling of the two tasks decide which workloads a seed deletes.
    fault_rng = random.Random(rng.getrandbits(64))
    faults = [asyncio.create_task(inject(env, fault, fault_rng))]
    if fault not in ("controller-kill", "hub-restart") and rng.random() < 0.5:
        faults.append(asyncio.create_task(extra_kill(env, random.Random(rng.getrandbits(64)))))
    tracked: list[Tracked] = []
    try:
        for i, sample in enumerate(chosen):
            await asyncio.sleep(rng.uniform(0.0, 1.2))
            name = f"w{i}-{sample.kind.lower()}"
            ref = ref_of(str(sample.body["apiVersion"]), sample.kind)
            body = instance(sample, name=name, namespace=namespace)
            uid = await _create(env, body, ref)
            tracked.append(Tracked(name=name, sample=sample, ref=ref, uid=uid))
        await asyncio.sleep(rng.uniform(0.5, 2.5))
        running: set[str] = set()
        for t in rng.sample(tracked, k=len(tracked) // 2):
            if await mark_running(env, t, namespace):
                running.add(t.name)
        for t in rng.sample(tracked, k=rng.randint(1, 2)):
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await delete_hub(env, t, namespace)
    finally:
        await asyncio.gather(*faults)

    # Statuses a failover moved away from are gone: only what is marked now must mirror.
    converge_s, problems = await wait_converged(env, tracked, namespace, running=set(),
                                                bound=BOUND_S)
    mirror_s = None
    if converge_s is not None:
        running = set()
        for t in tracked:
            if not t.deleted and await mark_running(env, t, namespace):
                running.add(t.name)
        mirror_s, problems = await wait_converged(env, tracked, namespace, running=running,
                                                  bound=BOUND_S)
    violations = list(problems)
    deleted = sum(1 for t in tracked if t.deleted)
    violations += await cleanup(env, tracked, namespace)
    leaked, leak_problems = await probe_capacity(env, namespace)
    violations += leak_problems
    violations += leader_problems(env, since=started)
    crashes = env.supervisor.crashes[crashes_before:]
    crashes += [f"controller #{inst.number}: task {line.get('task')} crashed: "
                f"{line.get('error')}: {line.get('message')}"
                for inst in env.supervisor.instances for line in inst.lines()
                if line.get("event") == "task.crashed" and str(line.get("ts")) > stamp]
    violations += [f"CRASH {c}" for c in crashes]
    secrets = await secret_problems(env, namespace)
    violations += secrets

    def events(name: str) -> int:
        return sum(1 for inst in env.supervisor.instances for line in inst.lines()
                   if line.get("event") == name and str(line.get("ts")) > stamp)
    changes, losses = events("leader.acquired"), events("leader.lost")

    def count(prefix: str) -> int:
        return sum(1 for v in violations if v.startswith(prefix))
    return RoundResult(
        index=index, seed=seed, fault=fault, faults=dict(Counter(env.faults) - before),
        members=env.mode, fleet="real" if env.real else "light",
        workloads=len(tracked), deleted=deleted,
        losses=count("LOST"), duplicates=count("DUPLICATE"), misplaced=count("MISPLACED"),
        undeleted=sum(1 for v in violations if "deleted" in v),
        unmirrored=count("UNMIRRORED"), leaked=leaked,
        leader_violations=sum(1 for v in violations if v.startswith("replica #")),
        crashes=len(crashes), secrets=len(secrets), leader_changes=changes,
        leader_losses=losses,
        converge_s=converge_s,
        mirror_s=mirror_s, violations=tuple(violations))


async def _ensure_namespace(hub: KubeClient, namespace: str) -> None:
    with contextlib.suppress(Conflict):
        await hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
