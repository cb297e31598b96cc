"""The installed controller with only its own identities: a full dispatch, mirror, delete.

`kubectl apply -k deploy/` on the test hub; each member registered with
`dispatcher clusters add --create-identity --namespace NS --create-namespaces`
(deploy/member applied with the admin kubeconfig, the write role bound in the test
namespace only, only a TokenRequest token of its ServiceAccount stored on the hub); then
`dispatcher run` as a separate process whose hub kubeconfig holds only the dispatcher
ServiceAccount's token (no $KUBECONFIG, no ~/.kube/config to fall back to). Three runs of
the whole module: ``memberclusters`` (the controller reads the MemberClusters and their
kubeconfig Secrets with its own token, the production path), ``static`` (the same minted
kubeconfigs as config-file members), both with the namespaced identity and
``submit.createNamespaces: false``, and ``cluster-wide`` (MemberClusters, the opt-in
`--cluster-wide --create-namespaces` identity, ``submit.createNamespaces: true``: the
controller creates the namespace on the member itself). A JobSet pinned to
one member is dispatched (Dispatch record, stamped copy), its member status is mirrored to
the hub, a spec change on the hub reaches the copy, and deleting it on the hub removes the
copy and then the Dispatch (its finalizer released); `kubectl get memberclusters` and
`kubectl get dispatches -A` show
what the controller wrote (readiness, nodes, GPUs; workload, kind, GPUs, member, status).
The controller's log carries no Forbidden answer at any step, so the shipped RBAC is
enough; the very tokens it runs with are refused Secrets outside dispatcher-system on the
hub and kube-system objects on a member (the namespaced ones also any workload write in
kube-system); SIGTERM exits 0 and frees the Lease.
Not covered: member outages and failover with these identities (same RBAC, other suites).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.kube.resources import DISPATCHES, MEMBER_CLUSTERS, NAMESPACES, SECRETS
from tests import builders

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "dispatcher-system"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
DISPATCHES_PATH = "/apis/dispatcher.io/v1alpha1"
TIMEOUT_S = 40.0
HUB_ID = f"e2e-rbac-{uuid.uuid4().hex[:6]}"


def eventually(check: Callable[[], Any], *, what: str, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def get_or_none(rest: Rest, path: str) -> Any:
    try:
        return rest.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def token_rest(admin: Rest, token: str) -> Rest:
    return Rest(server=admin.server, token=token, ca_file=admin.ca_file)


def stored_token(hub: Rest, member: str) -> str:
    """The member token `clusters add` stored on the hub (what the controller reads)."""
    secret = hub.get(SECRETS.item(f"{member}-kubeconfig", SYSTEM))
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    (user,) = kubeconfig["users"]
    assert set(user["user"]) == {"token"}
    return str(user["user"]["token"])


class Controller:
    """``dispatcher run`` as a child process, its JSON log in a file."""

    def __init__(self, *, config: Path, home: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost")
        self.log = log
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dispatcher", "run", "--config", str(config)],
                stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=home,
                start_new_session=True)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code, None if it had to be killed."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
                return None
        return self.proc.returncode


def kubectl(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    done = subprocess.run([str(ensure_binaries().kubectl), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done


def table(output: str) -> list[dict[str, str]]:
    """Rows of a kubectl table, cut at the header's column starts."""
    header, *lines = output.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    return [dict(zip(header.split(), [line[a:b].strip() for a, b in
                                      zip(starts, [*starts[1:], None], strict=True)],
                     strict=True)) for line in lines]


def ready(port: int) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module", params=["memberclusters", "static", "cluster-wide"])
def installed(request: pytest.FixtureRequest, dev_fleet: FleetState,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """deploy/ on the hub, two members registered with minted identities, the controller
    running with the ServiceAccount token only. Yields what the tests need."""
    mode = str(request.param)
    hub = dev_fleet.cluster("hub")
    admin = hub.rest()
    kubectl("apply", "-k", str(ROOT / "deploy"), kubeconfig=hub.kubeconfig)
    for _ in range(3):  # a changed CRD re-initialises its storage for a moment
        time.sleep(0.3)
        for ref in (MEMBER_CLUSTERS, DISPATCHES):
            admin.wait_ok(ref.collection(), timeout=30)

    suffix = uuid.uuid4().hex[:6]
    namespace = f"e2e-rbac-{suffix}"
    members = {f"rbac-{suffix}-1": "member-1", f"rbac-{suffix}-2": "member-2"}
    cluster_wide = mode == "cluster-wide"
    # namespaced: the write RoleBinding in the test namespace, which the command creates;
    # cluster-wide: the opt-in with namespace creation, the controller creates it
    scope = (["--cluster-wide"] if cluster_wide else ["--namespace", namespace])
    for alias, cluster in members.items():
        code = main(["clusters", "add", alias, "--kubeconfig",
                     dev_fleet.cluster(cluster).kubeconfig, "--create-identity", *scope,
                     "--create-namespaces", "--token-source", "request",
                     "--hub-kubeconfig", hub.kubeconfig])
        assert code == 0

    answer = admin.request("POST", f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/dispatcher/"
                           "token", {"apiVersion": "authentication.k8s.io/v1",
                                     "kind": "TokenRequest",
                                     "spec": {"expirationSeconds": 3600}})
    sa_token = answer["status"]["token"]
    home = tmp_path_factory.mktemp("controller")
    hub_kubeconfig = home / "hub-sa.kubeconfig"
    ca = base64.b64encode(Path(hub.ca_file).read_bytes()).decode()
    hub_kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dispatcher",
        "clusters": [{"name": "hub", "cluster": {"server": hub.server,
                                                 "certificate-authority-data": ca}}],
        "users": [{"name": "dispatcher", "user": {"token": sa_token}}],
        "contexts": [{"name": "dispatcher", "context": {"cluster": "hub",
                                                         "user": "dispatcher"}}]}))
    hub_kubeconfig.chmod(0o600)

    admin.request("POST", NAMESPACES.collection(), {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    fleet: dict[str, Any] = {"watchMemberClusters": True, "secretNamespace": SYSTEM,
                             "probeInterval": 1, "statusMinInterval": 1}
    if mode == "static":
        statics = []
        for alias in members:
            path = home / f"{alias}.kubeconfig"
            secret = admin.get(SECRETS.item(f"{alias}-kubeconfig", SYSTEM))
            path.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
            path.chmod(0o600)
            statics.append({"name": alias, "kubeconfig": str(path),
                            "allowedNamespaces": [namespace]})
        fleet.update(watchMemberClusters=False, staticMembers=statics)
    port = free_port()
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump({
        "hubId": HUB_ID,
        "hub": {"kubeconfig": str(hub_kubeconfig)},
        "watch": {"namespaces": [namespace]},
        # The Lease name the Role allows (resourceNames); short, so a stale one clears soon.
        "leaderElection": {"enabled": True, "namespace": SYSTEM, "name": "dispatcher",
                           "leaseDuration": 6, "renewEvery": 2},
        "server": {"address": "127.0.0.1", "port": port},
        "sweep": {"interval": 5},
        # set, not defaulted: each identity is paired with the setting it supports
        "submit": {"createNamespaces": cluster_wide},
        "fleet": fleet}))
    controller = Controller(config=config, home=home, log=home / "controller.log")
    try:
        eventually(lambda: ready(port) or controller.proc.poll() is not None,
                   what="the controller's /readyz")
        assert controller.proc.poll() is None, controller.log.read_text()[-3000:]
        if not cluster_wide:  # the command made it on the members
            for cluster in members.values():
                assert dev_fleet.cluster(cluster).rest().get(NAMESPACES.item(namespace))
        yield {"hub": admin, "members": members, "namespace": namespace, "mode": mode,
               "controller": controller, "sa_token": sa_token, "fleet": dev_fleet}
    finally:
        code = controller.stop()
        print(f"controller exit code: {code} (None: needed SIGKILL); log tail:")
        print("\n".join(controller.log.read_text(errors="replace").splitlines()[-60:]))
        for alias in members:
            main(["clusters", "remove", alias, "--hub-kubeconfig", hub.kubeconfig])
        for rest in [admin, *(dev_fleet.cluster(c).rest() for c in members.values())]:
            with contextlib.suppress(ApiError):
                rest.request("DELETE", NAMESPACES.item(namespace))


def jobset(name: str, *, pin: str) -> dict[str, Any]:
    return builders.jobset(name, replicas=2, pod=builders.gpu_pod(4, restartPolicy="Never"),
                           annotations={"dispatcher.io/cluster": pin})


def test_members_register_ready_with_their_minted_identities(installed: dict[str, Any]
                                                              ) -> None:
    hub: Rest = installed["hub"]
    if installed["mode"] == "static":  # no MemberCluster status: the controller's log says
        controller: Controller = installed["controller"]

        def connected() -> bool:
            ready = {line.get("member") for line in controller.lines()
                     if line.get("event") == "member.ready"}
            return set(installed["members"]) <= ready

        eventually(connected, what="member.ready for both static members")
        return

    def all_ready() -> bool:
        for alias in installed["members"]:
            obj = hub.get(MEMBER_CLUSTERS.item(alias))
            conditions = {c["type"]: c["status"]
                          for c in (obj.get("status") or {}).get("conditions", [])}
            if conditions.get("Ready") != "True":
                return False
        return True

    eventually(all_ready, what="both MemberClusters Ready (status written by the controller)")
    assert forbidden(installed["controller"]) == []
    fleet: FleetState = installed["fleet"]
    got = kubectl("get", "memberclusters", *installed["members"],
                  kubeconfig=fleet.cluster("hub").kubeconfig)
    rows = {r["NAME"]: r for r in table(got.stdout)}
    for alias, cluster in installed["members"].items():
        nodes = fleet.cluster(cluster).rest().get("/api/v1/nodes")["items"]
        gpus = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
        row = rows[alias]
        assert (row["READY"], row["NODES"], row["GPUS"]) == ("True", str(len(nodes)), str(gpus))
        assert 0 <= int(row["FREE"]) <= gpus


def forbidden(controller: Controller) -> list[dict[str, Any]]:
    """Log lines reporting a 403: a request the shipped RBAC does not allow."""
    return [line for line in controller.lines()
            if "forbidden" in json.dumps(line).lower()
            or "403" in str(line.get("message", ""))]


def test_dispatch_mirror_delete_with_least_privilege(installed: dict[str, Any]) -> None:
    hub: Rest = installed["hub"]
    fleet: FleetState = installed["fleet"]
    namespace = installed["namespace"]
    alias, cluster = sorted(installed["members"].items())[1]
    member = fleet.cluster(cluster).rest()
    created = hub.request("POST", f"{JOBSETS}/namespaces/{namespace}/jobsets",
                          jobset("train", pin=alias))
    uid = created["metadata"]["uid"]
    copy_path = f"{JOBSETS}/namespaces/{namespace}/jobsets/train"

    copy = eventually(lambda: get_or_none(member, copy_path), what=f"the copy on {cluster}")
    if installed["mode"] == "cluster-wide":  # the controller created it with its own token
        assert member.get(NAMESPACES.item(namespace))
    assert copy["metadata"]["labels"]["dispatcher.io/origin"] == HUB_ID
    assert copy["metadata"]["annotations"]["dispatcher.io/hub-uid"] == uid
    record = hub.get(DISPATCHES.item("jobset-train", namespace))
    assert record["spec"]["workload"]["uid"] == uid
    assert record["status"]["decision"]["cluster"] == alias
    assert record["status"]["demand"]["gpus"] == 8

    status = {"conditions": [], "terminalState": "", "replicatedJobsStatus": [
        {"name": "worker", "ready": 2, "active": 2, "succeeded": 0, "failed": 0,
         "suspended": 0}]}
    member.request("PATCH", f"{copy_path}/status", {"status": status},
                   content_type="application/merge-patch+json")

    def mirrored() -> bool:
        hub_obj = hub.get(f"{JOBSETS}/namespaces/{namespace}/jobsets/train")
        rec = hub.get(DISPATCHES.item("jobset-train", namespace))
        return (hub_obj.get("status", {}).get("replicatedJobsStatus")
                == status["replicatedJobsStatus"]
                and rec.get("status", {}).get("phase") == "Running")

    eventually(mirrored, what="the member status on the hub object and Dispatch Running")

    got = kubectl("get", "dispatches", "-A", kubeconfig=fleet.cluster("hub").kubeconfig)
    rows = [r for r in table(got.stdout) if r["NAMESPACE"] == namespace]
    assert [(r["NAME"], r["WORKLOAD"], r["KIND"], r["GPUS"], r["CLUSTER"], r["STATUS"])
            for r in rows] == [("jobset-train", "train", "JobSet", "8", alias, "Running")]

    hub.request("PATCH", f"{JOBSETS}/namespaces/{namespace}/jobsets/train",
                {"spec": {"ttlSecondsAfterFinished": 600}},
                content_type="application/merge-patch+json")
    eventually(lambda: (get_or_none(member, copy_path) or {}).get("spec", {})
               .get("ttlSecondsAfterFinished") == 600, what="the hub spec change on the copy")

    hub.request("DELETE", f"{JOBSETS}/namespaces/{namespace}/jobsets/train")

    def deleted() -> bool:
        return (get_or_none(hub, f"{JOBSETS}/namespaces/{namespace}/jobsets/train") is None
                and get_or_none(member, copy_path) is None
                and get_or_none(hub, f"{DISPATCHES_PATH}/namespaces/{namespace}"
                                     f"/dispatches/jobset-train") is None)

    eventually(deleted, what="the hub object, the copy and the Dispatch (its finalizer "
                             "released) gone")

    controller: Controller = installed["controller"]
    assert controller.proc.poll() is None
    denied = forbidden(controller)
    assert denied == [], denied[:3]


def test_the_controller_tokens_are_refused_what_they_must_not_do(installed: dict[str, Any]
                                                                  ) -> None:
    hub: Rest = installed["hub"]
    fleet: FleetState = installed["fleet"]
    as_controller = token_rest(hub, installed["sa_token"])
    for path in ("/api/v1/namespaces/default/secrets", "/api/v1/namespaces/kube-system/secrets",
                 "/api/v1/secrets"):
        with pytest.raises(ApiError) as refused:
            as_controller.get(path)
        assert refused.value.status == 403
    with pytest.raises(ApiError) as refused:
        as_controller.request("DELETE", "/apis/apiextensions.k8s.io/v1/"
                                        "customresourcedefinitions/memberclusters.dispatcher.io")
    assert refused.value.status == 403
    assert as_controller.get(f"/api/v1/namespaces/{SYSTEM}/secrets")["items"]

    for alias, cluster in installed["members"].items():
        admin = fleet.cluster(cluster).rest()
        as_member = token_rest(admin, stored_token(hub, alias))
        name = f"probe-{uuid.uuid4().hex[:6]}"
        admin.request("POST", "/api/v1/namespaces/kube-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
        for method, path in (("GET", "/api/v1/namespaces/kube-system/secrets"),
                             ("GET", f"/api/v1/namespaces/kube-system/configmaps/{name}"),
                             ("DELETE", f"/api/v1/namespaces/kube-system/configmaps/{name}"),
                             ("DELETE", "/api/v1/namespaces/kube-system")):
            with pytest.raises(ApiError) as refused:
                as_member.request(method, path)
            assert refused.value.status == 403, (cluster, method, path)
        # the finding: a privileged hostPath Deployment in kube-system (dry run)
        attempt = ("POST", "/apis/apps/v1/namespaces/kube-system/deployments?dryRun=All",
                   root_deployment())
        if installed["mode"] == "cluster-wide":  # the opt-in's documented risk
            assert as_member.request(*attempt)["metadata"]["name"] == "root"
        else:
            with pytest.raises(ApiError) as refused:
                as_member.request(*attempt)
            assert refused.value.status == 403, cluster
        assert admin.get(f"/api/v1/namespaces/kube-system/configmaps/{name}")
        admin.request("DELETE", f"/api/v1/namespaces/kube-system/configmaps/{name}")


def root_deployment() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "root"},
            "spec": {"selector": {"matchLabels": {"app": "root"}}, "template": {
                "metadata": {"labels": {"app": "root"}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "securityContext": {"privileged": True},
                                         "volumeMounts": [{"name": "h", "mountPath": "/h"}]}],
                         "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}}}


def test_sigterm_exits_0_and_hands_the_lease_over(installed: dict[str, Any]) -> None:
    """What the Deployment's Recreate strategy relies on: a stopped pod frees the Lease."""
    hub: Rest = installed["hub"]
    controller: Controller = installed["controller"]
    lease = hub.get(f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/dispatcher")
    assert lease["spec"]["holderIdentity"]
    assert controller.stop() == 0, controller.log.read_text()[-2000:]
    lease = hub.get(f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/dispatcher")
    assert not lease["spec"].get("holderIdentity")
