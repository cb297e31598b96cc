"""A member copy's status as read through the current catalog (the copy cache's values).

Copies are re-read on every watch event, most of which change neither spec nor status, so
readings are memoised on the definition and those fields. Untrusted definitions are read
in the bounded worker pool (``workloads.bounded``), never on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dispatcher.control.caches import MemberCopy
from dispatcher.control.catalog import LiveCatalog
from dispatcher.kube.watch import lean
from dispatcher.workloads.bounded import DefinitionQuarantined, EvaluationUnavailable
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.model import GenericStatus

__all__ = ["forget_readings", "member_copy"]

_STATUS_MEMO: dict[tuple[int, str], tuple[str, tuple[str, ...]]] = {}
_STATUS_MEMO_SIZE = 4096


async def member_copy(obj: Mapping[str, Any], *, live: LiveCatalog, seen_at: float,
                      previous: MemberCopy | None = None) -> MemberCopy:
    """A copy as cached: its generic status read through the current catalog.

    Unknown when the definition cannot read it; when the kind has no definition any more
    (its hub definition deleted, no built-in one), the last reading is kept: the workload
    keeps running and its Dispatch is left alone. The reading depends only on the
    definition and the object's spec and status, so it is memoised on those (copies are
    re-read on every event, most of which change neither). Untrusted definitions are read
    in the bounded worker pool, never on the event loop, in the copy's namespace's turn; a
    bound broken on this copy quarantines it there (``workloads.quarantine``: Unknown,
    read again once the copy changes). An evaluation that could not run (a busy host)
    keeps the last reading and is not memoised.
    """
    obj = lean(obj)
    definition = live.current.find(str(obj.get("apiVersion")), str(obj.get("kind")))
    if definition is None:
        generic, statuses = ((previous.generic, previous.statuses) if previous is not None
                             else (GenericStatus.UNKNOWN, (GenericStatus.UNKNOWN,)))
        return MemberCopy(obj=obj, generic=generic, statuses=statuses, seen_at=seen_at)
    try:
        key = (live.version, json.dumps([obj.get("apiVersion"), obj.get("kind"),
                                           obj.get("spec"), obj.get("status")],
                                          sort_keys=True, default=str))
    except (TypeError, ValueError):
        key = None
    cached = _STATUS_MEMO.get(key) if key is not None else None
    if cached is None:
        try:
            reading = (live.evaluator.status(obj) if live.trusted(definition)
                       else await live.evaluator.status_async(obj))
            cached = (reading.status, reading.statuses)
        except EvaluationUnavailable:
            generic, statuses = ((previous.generic, previous.statuses) if previous is not None
                                 else (GenericStatus.UNKNOWN, (GenericStatus.UNKNOWN,)))
            return MemberCopy(obj=obj, generic=generic, statuses=statuses, seen_at=seen_at)
        except WorkloadError as exc:
            if isinstance(exc, DefinitionQuarantined):
                live.notify_quarantine()
            cached = (GenericStatus.UNKNOWN, (GenericStatus.UNKNOWN,))
        if key is not None:
            if len(_STATUS_MEMO) >= _STATUS_MEMO_SIZE:
                _STATUS_MEMO.clear()
            _STATUS_MEMO[key] = cached
    return MemberCopy(obj=obj, generic=cached[0], statuses=cached[1], seen_at=seen_at)


def forget_readings() -> None:
    """The catalog changed: every reading is of the old one (keyed by
    ``LiveCatalog.version``, so never read again; this frees them)."""
    _STATUS_MEMO.clear()
