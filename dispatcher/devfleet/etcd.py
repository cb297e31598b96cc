"""The dev fleet's one etcd: started for every cluster's apiserver (each with its own
``--etcd-prefix``), and compacted on demand (the 410s informers must survive)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from dispatcher.devfleet.processes import free_port, spawn
from dispatcher.devfleet.state import FleetState, ProcessInfo

__all__ = ["compact_etcd", "start_etcd"]


def start_etcd(binary: Path, root: Path) -> tuple[ProcessInfo, str]:
    """etcd on two free loopback ports, its data in ``root/etcd`` (no fsync: a dev fleet);
    the process and its client URL (not waited for)."""
    etcd_port, peer_port = free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    etcd = spawn([str(binary), "--name=devfleet", f"--data-dir={root / 'etcd'}",
                  f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                  f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                  f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                  f"--initial-cluster=devfleet=http://127.0.0.1:{peer_port}",
                  "--unsafe-no-fsync=true", "--log-level=warn"], root / "etcd.log",
                 role="etcd", health=f"{etcd_url}/health")
    return etcd, etcd_url


def compact_etcd(state: FleetState) -> int:
    """Compact etcd up to its current revision (through its HTTP gateway); returns it.

    Older resourceVersions are then gone for every cluster: watches from them get 410, the
    situation informers must survive.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(f"{state.etcd_url}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    revision = int(post("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision
