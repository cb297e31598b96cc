"""Which of our copies on a member the orphan sweep deletes (pure; the sweep is the shell).

A copy is ours (origin label and hub uid, ``copies.owner_state``); it is *stale* when the
workload moved to another member (a failover left it behind), or when its hub object is
gone or was replaced by a namesake. The sweep judges only what it can see for sure: a
workload still cached is judged against its record; one not cached only once its kind's hub
watch has listed (exactly that kind), and then only after the hub itself says the object
is gone (``after_lookup``). A judgement never guesses: anything unsure keeps the copy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.control.core.record import DispatchRecord
from dispatcher.kube.resources import GroupVersionKind

__all__ = ["KEEP", "Judgement", "after_lookup", "judge"]


@dataclass(frozen=True)
class Judgement:
    """``stale``: why the copy goes (None: it stays, unless ``ask_hub``); ``ask_hub``: read
    the hub object first and decide with ``after_lookup``."""

    stale: str | None = None
    ask_hub: bool = False


KEEP = Judgement()


def judge(*, member: str, cached: bool, record: DispatchRecord | None,
          same_cluster: Callable[[str, str], bool], kind: GroupVersionKind,
          listed_kinds: Collection[GroupVersionKind]) -> Judgement:
    """The copy on ``member`` of a workload (``cached``: its hub object is in the cache, with
    ``record``); ``listed_kinds`` the hub kinds whose watch has listed (``kind`` is the
    copy's)."""
    if cached:
        if record is None or record.cluster is None or same_cluster(record.cluster, member):
            return KEEP  # where the record says it is (maybe under a second name)
        return Judgement(stale=f"workload moved to {record.cluster}")
    if kind not in listed_kinds:
        return KEEP  # the hub kind is not watched (yet): never guess
    return Judgement(ask_hub=True)


def after_lookup(hub_obj: Mapping[str, Any] | None, uid: str) -> str | None:
    """Why the copy of ``uid`` goes, given the hub object now (None: not found)."""
    if hub_obj is None:
        return "hub object gone"
    if str((hub_obj.get("metadata") or {}).get("uid")) != uid:
        return "hub object replaced"
    return None
