"""Definitions on the hub: ResourceInterface and Karta objects -> the live catalog + status.

The thin shell around ``workloads.hubdefinitions.merge``: two informers keep the objects,
every change (and every quarantine the evaluator reports) re-runs the merge, swaps the
controller's catalog when its definitions changed, logs ``definition.applied`` /
``definition.rejected`` / ``definition.removed`` once per change, and merge-patches each
object's ``/status`` only when what it says changed. Linting (jq compiles, paths,
forbidden builtins, size limits: ``dispatcher definitions lint``) runs once per object
generation; it never evaluates an expression, so it is safe on the event loop.

When the CRDs are not installed on the hub, the watch fails and is retried; the
controller does not wait for it (``synced`` counts a failed first list as listed), so a
hub without them runs on the built-in and config catalog.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.aiotasks import cancel_all, guarded
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import record as records
from dispatcher.control.watchers import forever
from dispatcher.kube import watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import KARTAS, RESOURCE_INTERFACES, ResourceRef
from dispatcher.workloads.hubdefinitions import (
    Acceptance,
    Effective,
    HubDefinition,
    Key,
    lint,
    merge,
)
from dispatcher.workloads.model import Definition

__all__ = ["DefinitionWatcher"]

log = structlog.get_logger("dispatcher")

REFS = {ref.kind: ref for ref in (RESOURCE_INTERFACES, KARTAS)}


class DefinitionWatcher:
    """Feeds the live catalog from the hub's definition objects and reports on each."""

    def __init__(self, *, hub: KubeClient, live: LiveCatalog,
                 clock: Callable[[], float] = time.time) -> None:
        self._hub = hub
        self._live = live
        self._clock = clock
        self._objects: dict[Key, Mapping[str, Any]] = {}
        self._linted: dict[Key, tuple[str, int, HubDefinition]] = {}
        self._effective: Effective | None = None
        self._written: dict[Key, dict[str, Any]] = {}
        self._listed: set[str] = set()
        self._changed = asyncio.Event()
        self.merged = asyncio.Event()
        """Set once both kinds were listed (or found not installed) and merged."""
        self.reporting = True
        """Whether the objects' status is written: only by the leader (a standby replica
        follows the definitions for its webhook, and leaves their status to it)."""
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False

    @property
    def effective(self) -> Effective | None:
        """The last merge (verdicts per object), None before the first."""
        return self._effective

    def report(self) -> None:
        """Start writing the objects' status (this replica leads now)."""
        self.reporting = True
        self._changed.set()

    async def start(self) -> None:
        self.started = True
        for kind, ref in REFS.items():
            self._tasks.append(guarded(
                forever(f"hub {kind}", functools.partial(self._watch, ref),
                        on_error=functools.partial(self._listed_anyway, kind)),
                name=f"hub:definitions:{kind}"))
        self._tasks.append(guarded(self._apply_loop(), name="hub:definitions"))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    def _listed_anyway(self, kind: str) -> None:
        if kind not in self._listed:
            self._listed.add(kind)
            self._changed.set()

    async def _watch(self, ref: ResourceRef) -> None:
        async for item in watch.informer(self._hub, ref):
            if isinstance(item, watch.Listed):
                for key in [k for k in self._objects if k[0] == ref.kind]:
                    del self._objects[key]
                for obj in item.objects:
                    self._objects[(ref.kind, str(obj["metadata"]["name"]))] = obj
                self._listed.add(ref.kind)
            else:
                key = (ref.kind, str(item.object["metadata"]["name"]))
                if item.type == "DELETED":
                    self._objects.pop(key, None)
                else:
                    self._objects[key] = item.object
            self._changed.set()

    async def _apply_loop(self) -> None:
        quarantine = self._live.quarantine
        while True:
            changed = asyncio.ensure_future(self._changed.wait())
            quarantined = asyncio.ensure_future(quarantine.wait())
            try:
                await asyncio.wait({changed, quarantined},
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                quarantined.cancel()
            quarantine.clear()
            self._changed.clear()
            self.apply()
            if self._listed >= REFS.keys():
                self.merged.set()
            await self._write_statuses()

    def apply(self) -> Effective:
        """Lint what changed, merge, swap the catalog when it changed, log the news."""
        objects = [self._hub_definition(key, obj) for key, obj in sorted(self._objects.items())]
        for key in set(self._linted) - set(self._objects):
            del self._linted[key]
        before = self._effective
        last_good = before.accepted if before is not None else {}
        effective = merge(self._live.builtin, self._live.base, objects,
                          last_good=last_good,
                          quarantined=self._quarantined(objects, last_good))
        self._effective = effective
        self._report(before, effective)
        current = self._live.current
        if {id(d) for d in current.definitions} != {id(d) for d in
                                                    effective.catalog.definitions}:
            self._live.swap(effective.catalog)
        return effective

    def _hub_definition(self, key: Key, obj: Mapping[str, Any]) -> HubDefinition:
        meta = obj.get("metadata") or {}
        uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
        cached = self._linted.get(key)
        if cached is not None and cached[:2] == (uid, generation):
            return cached[2]
        linted = lint(obj)
        found = HubDefinition(format=key[0], name=key[1], generation=generation,
                              definition=None if isinstance(linted, str) else linted,
                              problem=linted if isinstance(linted, str) else "")
        self._linted[key] = (uid, generation, found)
        return found

    def _quarantined(self, objects: list[HubDefinition],
                     last_good: Mapping[Key, Definition]) -> dict[str, str]:
        """Quarantine reasons by definition name, for these very definitions only (an
        updated object is a new definition, evaluated afresh)."""
        candidates = [o.definition for o in objects if o.definition is not None]
        current = {o.key for o in objects if o.definition is not None}
        candidates += [d for k, d in last_good.items() if k not in current]
        out: dict[str, str] = {}
        for definition in candidates:
            reason = self._live.evaluator.quarantine_of(definition)
            if reason is not None:
                out[definition.name] = reason
        return out

    def _report(self, before: Effective | None, after: Effective) -> None:
        old = before.verdicts if before is not None else {}
        for key, verdict in after.verdicts.items():
            previous = old.get(key)
            if previous == verdict:
                continue
            fields = {"object": f"{key[0]}/{key[1]}", "generation": verdict.observed_generation,
                      "reason": verdict.reason, "message": verdict.message[:500]}
            if verdict.serves is not None:
                fields["kind"] = f"{verdict.serves.api_version} {verdict.serves.kind}"
            if verdict.accepted:
                log.info("definition.applied", overrides=verdict.overrides or None, **fields)
            else:
                log.warning("definition.rejected", **fields)
        kept = before.accepted if before is not None else {}
        for key in old.keys() - after.verdicts.keys():
            serves = old[key].serves
            if serves is None and key in kept:  # broken last, but its last good served one
                serves = kept[key].gvk
            kind = f"{serves.api_version} {serves.kind}" if serves is not None else None
            source = after.sources.get(serves) if serves is not None else None
            log.info("definition.removed", object=f"{key[0]}/{key[1]}", kind=kind,
                     now=source or "not dispatched")

    async def _write_statuses(self) -> None:
        effective = self._effective
        if effective is None or not self.reporting:
            return
        for key in list(self._written):
            if key not in effective.verdicts:
                del self._written[key]
        for key, verdict in effective.verdicts.items():
            body = verdict.status()
            obj = self._objects.get(key)
            if obj is None or self._written.get(key) == body:
                continue
            if _status_says(obj.get("status"), body):
                self._written[key] = body
                continue
            await self._write(key, verdict, body)

    async def _write(self, key: Key, verdict: Acceptance, body: dict[str, Any]) -> None:
        status = dict(body)
        condition = dict(status["conditions"][0])
        condition["lastTransitionTime"] = records.format_time(self._clock())
        status["conditions"] = [condition]
        with contextlib.suppress(KubeError):  # gone, or not ours to write: next change
            await self._hub.request("PATCH", REFS[key[0]].item(key[1], None, "status"),
                                    body={"status": status}, content_type=JSON_MERGE_PATCH)
            self._written[key] = body


def _status_says(status: Any, body: Mapping[str, Any]) -> bool:
    """Whether the object's status already says ``body`` (a restart writes nothing)."""
    if not isinstance(status, Mapping):
        return False
    for name, value in body.items():
        if name == "conditions":
            have = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                    for c in status.get("conditions") or () if isinstance(c, Mapping)]
            if have != value:
                return False
        elif status.get(name) != value:
            return False
    return True
