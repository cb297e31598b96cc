"""Status traces: a sequence of recorded frames of one object, read one by one.

``dispatcher inspect --status-trace FILE`` (issue 41) replays what an operator really wrote
through a definition, so anyone can check a definition against it. This module is the
pure part: it turns a trace file's text into frames and a frame's resolution into the row
printed; the command does the reading and the (bounded) evaluation.

Accepted traces, the object's own frames in order:

* a Workload Map e2e recording (``test/e2e/recorded_data/**.yaml``: ``events`` of ``kind:
  STATE`` with the ``object`` and upstream's reading, ``phases`` and ``state``, and
  ``kind: ACTION`` lines such as a resume): upstream's reading is kept to compare with;
* YAML documents, a list or a ``List`` of objects (``kubectl get -w -o yaml``);
* a stream of JSON objects (``kubectl get -w -o json``);
* the catalog's ``*.frames.yaml`` (status subtrees with ``name``/``expect``), with the
  manifest they apply to given as ``base``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["Frame", "TraceError", "agrees", "frames_of", "row_of"]


class TraceError(ValueError):
    """The trace cannot be read as frames of one object (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class Frame:
    """One recorded frame: the object as the operator left it, or an action between
    frames (``action`` set, ``obj`` None). ``upstream`` is the recording's reading
    (upstream's matched statuses, lower-cased, ``undefined`` as ``unknown``), ``expect``
    what a catalog frame says it must read as."""

    label: str
    obj: Mapping[str, Any] | None = None
    action: str | None = None
    upstream: tuple[str, ...] = ()
    expect: str | None = None


def frames_of(text: str, *, base: Mapping[str, Any] | None = None) -> list[Frame]:
    """The frames of a trace file's ``text`` (formats in the module docstring); raises
    TraceError when it holds none or frames of more than one object."""
    docs = _documents(text)
    if len(docs) == 1 and isinstance(docs[0], Mapping) and "events" in docs[0]:
        frames = _recorded(docs[0])
    elif base is not None:
        frames = _catalog_frames(docs, base)
    else:
        frames = [Frame(label=f"#{i}", obj=obj) for i, obj in enumerate(_objects(docs))]
    states = [f for f in frames if f.obj is not None]
    if not states:
        raise TraceError("no frames: want objects, a Workload Map recording or, with a "
                         "base manifest, catalog frames")
    kinds = {_identity(f.obj) for f in states if f.obj is not None}
    if len(kinds) > 1:
        raise TraceError("frames of more than one object: "
                         + ", ".join("/".join(k) for k in sorted(kinds)))
    return frames


def _documents(text: str) -> list[Any]:
    """YAML documents; else a stream of JSON objects (``kubectl get -w -o json``)."""
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as yaml_error:
        decoder, out, at = json.JSONDecoder(), [], 0
        try:
            while at < len(text):
                while at < len(text) and text[at].isspace():
                    at += 1
                if at < len(text):
                    value, at = decoder.raw_decode(text, at)
                    out.append(value)
        except json.JSONDecodeError:
            raise TraceError(f"neither YAML nor a JSON stream: "
                             f"{' '.join(str(yaml_error).split())}") from None
        return out


def _objects(docs: Sequence[Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(_objects(doc))
        elif isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") \
                and isinstance(doc.get("items"), list):
            out.extend(_objects(doc["items"]))
        elif isinstance(doc, Mapping):
            out.append(doc)
        else:
            raise TraceError(f"a frame is not an object: {type(doc).__name__}")
    return out


def _reading(value: Any) -> str:
    text = str(value).lower()
    return "unknown" if text == "undefined" else text


def _recorded(doc: Mapping[str, Any]) -> list[Frame]:
    """A Workload Map recording: STATE events (object + upstream's reading), ACTIONs."""
    events = doc.get("events")
    if not isinstance(events, list):
        raise TraceError("a recording's events must be a list")
    frames: list[Frame] = []
    for i, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise TraceError(f"events[{i}] is not an object")
        if event.get("kind") == "ACTION":
            action = event.get("action") or {}
            name = action.get("name") if isinstance(action, Mapping) else None
            frames.append(Frame(label=f"#{i}", action=str(name or "action")))
            continue
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise TraceError(f"events[{i}] has no object")
        phases = event.get("phases") or ([event["state"]] if event.get("state") else [])
        frames.append(Frame(label=f"#{i}", obj=obj,
                            upstream=tuple(_reading(p) for p in phases)))
    return frames


def _catalog_frames(docs: Sequence[Any], base: Mapping[str, Any]) -> list[Frame]:
    """The catalog's frames: status subtrees (null: no status) applied to ``base``."""
    items = docs[0] if len(docs) == 1 and isinstance(docs[0], list) else docs
    frames: list[Frame] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "status" not in item:
            raise TraceError(f"frame {i}: want a mapping with status (a catalog frame)")
        obj = dict(base)
        if item["status"] is None:
            obj.pop("status", None)
        else:
            obj["status"] = item["status"]
        upstream = (_reading(item["upstream"]),) if item.get("upstream") else ()
        frames.append(Frame(label=str(item.get("name") or f"#{i}"), obj=obj,
                            upstream=upstream, expect=item.get("expect")))
    return frames


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return (str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
            str(meta.get("name", "")))


def agrees(status: str, upstream: Sequence[str]) -> bool | None:
    """Whether a reading agrees with a recording's (upstream lists every matched status;
    any of them counts), None when the recording has no reading of the frame (none
    recorded, or upstream's ``Undefined``: no mapping of its definition matched)."""
    if not upstream or tuple(upstream) == ("unknown",):
        return None
    return status in upstream


def row_of(frame: Frame, status: str | None, statuses: Sequence[str],
           note: str | None) -> dict[str, Any]:
    """The printed row of one frame (``-o json`` keys; the table shows a subset)."""
    if frame.action is not None:
        return {"frame": frame.label, "action": frame.action}
    row: dict[str, Any] = {"frame": frame.label, "status": status,
                           "statuses": list(statuses)}
    if frame.expect is not None:
        row["expect"] = frame.expect
    if frame.upstream:
        row["upstream"] = list(frame.upstream)
        row["agrees"] = agrees(status or "", frame.upstream)
    if note:
        row["upstreamDiffers"] = note
    return row
