"""The workloads a chaos round submits: catalog samples small enough for the chaos fleet.

Samples come from ``tests/unit/workloads/catalog`` (real objects of each framework), keep
their shape, and get a fresh name and namespace. A sample is used when it resolves through
the built-in catalog, needs at most ``MAX_GPUS`` GPUs with pod shapes the chaos fleet has
(no GPU product or one of the fleet's), its kind has a stand-in CRD, and its kind's status
frames include a ``running`` one, so a round can simulate "running" on the member. On the
real fleet (``real=True``) only kinds an operator of the real members runs are used
(``OPERATED``): there the operator, not the round, writes the status.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet.workload_crds import WORKLOAD_KINDS
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import WorkloadError

__all__ = ["MAX_GPUS", "OPERATED", "Sample", "instance", "load_samples", "ref_of"]

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "workloads" / "catalog"
MAX_GPUS = 6
FLEET_PRODUCTS = frozenset({"NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB"})
OPERATED = frozenset({"JobSet", "LeaderWorkerSet", "RayJob", "PyTorchJob", "TFJob", "MPIJob"})
"""Kinds whose operator runs on the real members and brings them to running (RayService
talks to the Ray dashboard, which nothing serves there; RayJob stops at running)."""
REFUSED_BY_REAL = frozenset({"pytorchjob/lowercase-keys.yaml"})
"""Samples the real members' admission refuses, so the dispatcher rightly fails them:
training-operator v1.8.1's validating webhook accepts only ``Master``/``Worker`` replica
keys (its defaulting would camel-case them, but validation runs on the object as sent)."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One usable catalog sample, its GPU count and its kind's "running" status frame."""

    path: str
    body: Mapping[str, Any]
    gpus: int
    pods: int
    running_status: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])


def ref_of(api_version: str, kind: str) -> ResourceRef:
    """The stand-in CRD's resource (no discovery needed: the plurals are known)."""
    for group, version, k, plural in WORKLOAD_KINDS:
        if k == kind and f"{group}/{version}" == api_version:
            return ResourceRef(group=group, version=version, kind=kind, plural=plural,
                               namespaced=True)
    raise KeyError(f"no stand-in CRD for {api_version} {kind}")


def _running_frame(folder: Path) -> Mapping[str, Any] | None:
    frames = folder / "typical.frames.yaml"
    if not frames.exists():
        return None
    for frame in yaml.safe_load(frames.read_text()) or ():
        if frame.get("expect") == "running" and isinstance(frame.get("status"), dict):
            return dict(frame["status"])
    return None


def load_samples(catalog: Catalog | None = None, *, real: bool = False) -> list[Sample]:
    """Every usable sample, sorted by path (the order seeds index into); ``real``: only
    the ``OPERATED`` kinds."""
    catalog = catalog or Catalog.builtin()
    served = {(f"{g}/{v}", k) for g, v, k, _ in WORKLOAD_KINDS}
    out: list[Sample] = []
    for path in sorted(SAMPLES.glob("*/*.yaml")):
        if path.name.endswith(".frames.yaml"):
            continue
        body = next(iter(yaml.safe_load_all(path.read_text())), None)
        if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) not in served:
            continue
        if real and (body.get("kind") not in OPERATED
                     or str(path.relative_to(SAMPLES)) in REFUSED_BY_REAL):
            continue
        running = _running_frame(path.parent)
        if running is None:
            continue
        try:
            demand = catalog.resolve(body).demand
        except WorkloadError:
            continue
        shapes = [s for g in demand.gangs for s in g.pod_shapes]
        if not 0 < demand.gpus <= MAX_GPUS or any(
                s.gpu_product not in (None, *FLEET_PRODUCTS) for s in shapes):
            continue
        out.append(Sample(path=str(path.relative_to(SAMPLES)), body=body, gpus=demand.gpus,
                          pods=demand.pods, running_status=running))
    return out


def instance(sample: Sample, *, name: str, namespace: str,
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The sample as a new hub object: fresh name and namespace, server fields dropped."""
    body = copy.deepcopy(dict(sample.body))
    body.pop("status", None)
    meta = {k: v for k, v in (body.get("metadata") or {}).items()
            if k in ("labels", "annotations")}
    meta.update(name=name, namespace=namespace)
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    body["metadata"] = meta
    return body


def pick(samples: Sequence[Sample], rng: random.Random, *, budget: int) -> list[Sample]:
    """Samples in random order whose GPUs add up to at most ``budget``."""
    chosen: list[Sample] = []
    left = budget
    for sample in rng.sample(list(samples), k=len(samples)):
        if sample.gpus <= left:
            chosen.append(sample)
            left -= sample.gpus
    return chosen
