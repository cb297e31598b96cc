"""A dev fleet process does not inherit the user's ``KUBECONFIG`` (``devfleet.processes``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dispatcher.devfleet.processes import spawn


def test_the_users_kubeconfig_is_not_passed_on(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "not-yet-written"))
    log = tmp_path / "out.log"
    spawn(["sh", "-c", 'echo "kubeconfig=${KUBECONFIG-unset} extra=$EXTRA"'], log, role="t",
          env={"EXTRA": "kept"})
    for _ in range(100):
        if log.read_text():
            break
        time.sleep(0.05)
    assert log.read_text().strip() == "kubeconfig=unset extra=kept"
