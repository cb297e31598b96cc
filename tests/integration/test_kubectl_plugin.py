"""``kubectl dispatcher`` through the real kubectl: the plugin mechanism itself, on the dev fleet.

kubectl (the fleet's own build) finds ``kubectl-dispatcher`` on PATH (the package's console
script, in this venv's bin) and execs it with the arguments after ``dispatcher``. A JobSet
that no member can fit (three pods of 8 GPUs: member-1 has two free 8-GPU nodes, member-2's
only 8-GPU node is tainted) waits under an in-process controller; ``kubectl dispatcher why``
prints the controller's reason from its Dispatch and every member's verdict with numbers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from tests.builders import jobset
from tests.integration.harness import eventually, get_or_none, running

pytestmark = pytest.mark.integration

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
MEMBERS = ("member-1", "member-2")


def plugin_config(path: Path, state: FleetState) -> Path:
    """The controller config the plugin reads its members from (no hub: --kubeconfig)."""
    path.write_text(yaml.safe_dump({"fleet": {
        "watchMemberClusters": False,
        "staticMembers": [{"name": n, "kubeconfig": state.cluster(n).kubeconfig}
                          for n in MEMBERS]}}))
    return path


async def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl with this venv's bin (``kubectl-dispatcher``) first on PATH; in a
    thread, so the in-process controller keeps running meanwhile."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    env.pop("DISPATCHER_CONFIG", None)
    command = [str(ensure_binaries().kubectl), *args]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                   timeout=120, env=env, check=False)


async def test_why_prints_each_members_reason_with_numbers(dev_fleet: FleetState,
                                                           tmp_path: Path) -> None:
    hub = dev_fleet.cluster("hub").kubeconfig
    config = plugin_config(tmp_path / "config.yaml", dev_fleet)
    name = f"wide-{uuid.uuid4().hex[:6]}"
    async with running(dev_fleet) as h:
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset(name, namespace=h.namespace, replicas=3, gpus=8))

        async def waiting() -> Any:
            record = await get_or_none(h.hub, DISPATCHES.item(f"jobset-{name}", h.namespace))
            conditions = ((record or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Placed"
                         and c["status"] == "False"), None)

        condition = await eventually(waiting, what="the JobSet Pending with a reason")
        flags = ("--kubeconfig", hub, "--config", str(config))

        done = await kubectl("dispatcher", "why", "-n", h.namespace, f"jobset/{name}", *flags)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert f"JobSet/{name} in {h.namespace}: Pending" in out, out
        assert condition["reason"] in out and condition["message"] in out
        assert "members now (live):" in out
        assert f"JobSet/{name}: 3 pod(s), 24 GPU(s)" in out
        for member in MEMBERS:
            row = next((line for line in out.splitlines() if line.startswith(member)), "")
            assert re.match(rf"{member}\s+no\s+\d+\s", row), out  # verdict, free GPUs
            assert re.search(r"\d+ GPUs? free", row), row
            assert re.search(r"of 8 GPUs|needs 8", row), row  # what the pod asks
        assert "chosen: none" in out
        print(out)  # shown with -s: what a user sees

        # pflag spellings, a plural and -o json: the same answer as data
        done = await kubectl("dispatcher", "why", f"-n={h.namespace}", f"jobsets/{name}",
                             "-o=json", *flags)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["dispatch"]["phase"] == "Pending"
        assert answer["dispatch"]["reason"] == condition["reason"]
        verdicts = {v["member"]: v for v in answer["members"]["members"]}
        assert set(verdicts) == set(MEMBERS)
        for verdict in verdicts.values():
            assert verdict["feasible"] is False and re.search(r"\d", verdict["reason"])

        # without a name: the namespace's waiting workloads, from the Dispatches alone
        done = await kubectl("dispatcher", "why", "-n", h.namespace, "--kubeconfig", hub)
        assert done.returncode == 0, done.stderr
        assert re.search(rf"JobSet/{name}\s+{condition['reason']}\s", done.stdout), done.stdout


async def test_kubectl_hands_the_plugin_its_flags_and_help(dev_fleet: FleetState) -> None:
    hub = dev_fleet.cluster("hub").kubeconfig
    done = await kubectl("dispatcher", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: kubectl dispatcher")
    done = await kubectl("plugin", "list")
    assert "kubectl-dispatcher" in done.stdout, done.stdout + done.stderr

    # kubectl reads no flag before the plugin's name: it says so itself
    done = await kubectl("--kubeconfig", hub, "dispatcher", "clusters")
    assert done.returncode != 0
    assert "flags cannot be placed before plugin name" in done.stderr

    # after it, they are the plugin's: the hub's MemberClusters as a List (the dev fleet's
    # members are static, so there may be none), read through --kubeconfig
    done = await kubectl("dispatcher", "clusters", "--kubeconfig", hub, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "List"

    # a kubectl flag the plugin cannot honour is refused, never ignored
    done = await kubectl("dispatcher", "why", "--server", "https://elsewhere.invalid")
    assert done.returncode == 2
    assert "--server is a kubectl flag kubectl dispatcher does not honour" in done.stderr
