"""The fleet view in a real headless Chromium, served by ``dispatcher run`` on the dev fleet.

The controller runs as its own process with ``server.fleetView: true``; a JobSet no member
can fit (three pods of 8 GPUs) waits ``Unplaceable``, and one whose cluster selector a
tenant wrote as markup waits ``InvalidAnnotation``. Chromium (Debian's ``chromium``;
``scripts/test`` installs it; missing, the test fails rather than skip) loads ``/fleet``:
its DOM lists both members and the waiting workload's reason, the tenant's markup is text
(no element made of it), and the screenshot is saved under the test's tmp dir and copied
to /tmp/fleetview.png to look at.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import aiohttp
import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NAMESPACES, ResourceRef
from tests.builders import jobset

from .conftest import ControllerProcess, eventually

pytestmark = pytest.mark.e2e

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
MARKUP = "<img src=x onerror=alert(1)>"
SHOWN = Path("/tmp/fleetview.png")


def chromium() -> str:
    """The browser binary; missing is a failure with the fix, never a skip."""
    found = os.environ.get("DISPATCHER_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    if not found:
        pytest.fail("no chromium on PATH: scripts/test installs it (Debian: apt-get install "
                    "chromium), or point DISPATCHER_CHROMIUM at a Chromium binary")
    return found


async def browse(url: str, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", *flags, url]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                   timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


async def fetch(url: str, method: str = "GET") -> tuple[int, str]:
    try:
        async with aiohttp.ClientSession() as session, session.request(
                method, url, allow_redirects=False) as response:
            return response.status, await response.text()
    except aiohttp.ClientError:
        return 0, ""


async def test_the_fleet_view_in_a_browser(dev_fleet: FleetState, controller: ControllerProcess,
                                           tmp_path: Path) -> None:
    chromium()  # before anything starts: a missing browser says so first
    config = yaml.safe_load(controller.config.read_text())
    config["server"]["fleetView"] = True
    controller.config.write_text(yaml.safe_dump(config))
    base = f"http://127.0.0.1:{controller.port}"
    kubeconfig = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    hub = await KubeClient.from_kubeconfig(kubeconfig, name="hub")
    wide, tagged = f"wide-{uuid.uuid4().hex[:5]}", f"tagged-{uuid.uuid4().hex[:5]}"
    small = f"small-{uuid.uuid4().hex[:5]}"
    try:
        await hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": controller.namespace}})
        controller.start()

        async def ready() -> bool:
            return (await fetch(f"{base}/readyz"))[0] == 200

        await eventually(ready, what="the controller ready")
        for body in (jobset(small, replicas=2, gpus=2), jobset(wide, replicas=3, gpus=8),
                     jobset(tagged, replicas=1, gpus=1,
                            annotations={"dispatcher.io/cluster-selector": MARKUP})):
            await hub.request("POST", JOBSETS.collection(controller.namespace), body=body)

        async def both_waiting() -> str | None:
            status, text = await fetch(f"{base}/fleet")
            return text if status == 200 and "Unplaceable" in text \
                and "InvalidAnnotation" in text and wide in text and small in text else None

        await eventually(both_waiting, what="two workloads waiting and one placed, on the page")
    finally:
        await hub.close()

    # read-only: nothing but reads, on the metrics port
    assert (await fetch(f"{base}/fleet", "POST"))[0] == 405
    assert (await fetch(f"{base}/metrics"))[0] == 200

    dom = (await browse(f"{base}/", tmp_path, "--dump-dom")).stdout  # / leads to /fleet
    assert "<title>dispatcher fleet" in dom
    for member in ("member-1", "member-2"):
        assert f"<b>{member}</b>" in dom, member
    assert wide in dom and "Unplaceable" in dom and "GPUs free" in dom  # reason, numbers
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt;" in dom
    # the placed one: its decision with every member's verdict
    assert "→ member-" in dom and ">chosen<" in dom

    screenshot = tmp_path / "fleetview.png"
    await browse(f"{base}/fleet", tmp_path, f"--screenshot={screenshot}",
                 "--window-size=1400,1500")
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one
    shutil.copyfile(screenshot, SHOWN)
