"""``dispatcher run --check``: every shipped config prints as JSON (sets included), and an
unreachable hub is a warning, never an error (the check is advice)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", ["config/default.yaml", "config/local.yaml",
                                    "deploy/base/config.yaml"])
def test_check_prints_the_config_and_warns_on_an_unreachable_hub(config: str,
                                                                 tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "run", "--config", str(ROOT / config), "--check",
         "--hub-kubeconfig", str(tmp_path / "missing"),
         "--set", "submit.podTemplate.allowedPriorityClasses=[high]"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["control"]["hub_mode"] == "dedicated"
    assert "could not read the hub to check hub.mode" in done.stderr


def test_as_multikueues_dispatcher_the_hub_mode_is_not_checked(tmp_path: Path) -> None:
    """Kueue's webhooks on the hub are that install, not a shared hub's sign: no hub.mode
    warning, and the hub is not read for one."""
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "run", "--config", str(ROOT / "config/local.yaml"),
         "--check", "--mode", "multikueue-dispatcher",
         "--hub-kubeconfig", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["control"]["mode"] == "multikueue-dispatcher"
    assert "hub.mode" not in done.stderr, done.stderr
