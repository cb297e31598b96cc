"""The hub as the ``clusters`` commands reach it: ``--hub-kubeconfig``/``--hub-context``,
a client from them, and the one way an error is printed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["fail", "hub_client", "hub_flags", "hub_kubeconfig"]


def hub_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hub-kubeconfig", type=Path, default=argparse.SUPPRESS,
                        help="kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--hub-context", default=argparse.SUPPRESS,
                        help="context in the hub kubeconfig (default: current)")


def hub_kubeconfig(args: argparse.Namespace) -> Path:
    path: Path | None = getattr(args, "hub_kubeconfig", None)
    if path is not None:
        return path
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), "")
    return Path(first) if first else Path.home() / ".kube" / "config"


async def hub_client(args: argparse.Namespace) -> Any:
    import yaml

    from dispatcher.kube.client import KubeClient, KubeconfigError

    path = hub_kubeconfig(args)
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise KubeconfigError(f"hub kubeconfig {path} is not valid YAML") from None
    if not isinstance(config, dict):
        raise KubeconfigError(f"hub kubeconfig {path} is not a kubeconfig")
    return await KubeClient.from_kubeconfig(config, name="hub",
                                            context=getattr(args, "hub_context", None))


def fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
