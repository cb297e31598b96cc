"""The definition watcher's pure bits: a status already saying the verdict is not rewritten.

Left out: the informers and the writes (tests/integration/test_live_definitions.py).
"""

from __future__ import annotations

from dispatcher.control.definitions import _status_says
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.hubdefinitions import Acceptance

KIND = GroupVersionKind("a", "v1", "K")


def test_a_status_already_written_is_recognised_without_its_transition_time() -> None:
    verdict = Acceptance(True, "Accepted", "serves a/v1 K", 2, KIND, "")
    body = verdict.status()
    written = {**body, "conditions": [{**body["conditions"][0],
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    written = {k: v for k, v in written.items() if v is not None}  # merge patch drops nulls
    assert _status_says(written, body)
    newer = Acceptance(True, "Accepted", "serves a/v1 K", 3, KIND, "").status()
    assert not _status_says(written, newer)
    assert not _status_says(None, body)
