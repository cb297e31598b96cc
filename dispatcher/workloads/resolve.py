"""Resolve a workload object through its definition: pods, GPUs, gangs, status.

``resolve(obj, catalog=...)`` finds the definition by apiVersion/kind; ``resolve_with``
takes one. The object is serialized once (sorted keys, bounded size) and every path of the
definition runs in one batched jq call (``jqrun.Batch``). Alignment, count and null rules
are upstream's (reference §2.5, §2.7); pod counts and gangs are the dispatcher's
(docs/definitions.md §2, §3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.workloads.batchvalues import BatchValues, Fail, Text
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import ObjectError, TemplateError
from dispatcher.workloads.gangs import Member, build_gangs
from dispatcher.workloads.instances import (
    MAPPINGS,
    SPEC_IN,
    builds_containers,
    instance_ids,
    pod_specs,
)
from dispatcher.workloads.jqrun import DEFAULT_LIMITS, JqFailure, Limits, ObjectInput
from dispatcher.workloads.model import Component, Definition, Expr, GenericStatus, Scale
from dispatcher.workloads.podfields import PodField, scheduling_fields
from dispatcher.workloads.podspec import pod_needs
from dispatcher.workloads.status import StatusReading, read_status
from dispatcher.workloads.template import TemplateProblem

if TYPE_CHECKING:
    from dispatcher.workloads.catalog import Catalog

__all__ = ["ComponentView", "Instance", "Resolution", "Text", "demand_from", "demand_of",
           "input_text", "object_input", "object_text", "resolution_from", "resolve",
           "resolve_with", "status_from", "status_of"]

Results = Sequence[list[Any] | JqFailure]


@dataclass(frozen=True, kw_only=True)
class Instance(Member):
    """One instance of a pod-creating component at its desired scale (a gang member).

    ``stage`` is when its operator creates its pods (``scaleDefinition.creationStagePath``;
    ``""``: with the workload) and ``waves`` whether they come in waves
    (``podWavesPath``): what a member gang may hold together (``control.core.gangsched``)."""

    stage: str = ""
    waves: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The DESIGN.md ``components[].instances[]`` entry (``stage`` and ``waves`` only
        when the definition says so)."""
        out: dict[str, Any] = {"id": self.id, "replicas": self.replicas, "pods": self.pods,
                               "gpusPerPod": self.needs.gpus}
        if self.stage:
            out["stage"] = self.stage
        if self.waves:
            out["waves"] = True
        return out


@dataclass(frozen=True, kw_only=True)
class ComponentView:
    """A pod-creating component and its instances."""

    name: str
    instances: tuple[Instance, ...]


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """What one workload object needs and how it is doing, through its definition."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    definition_name: str
    components: tuple[ComponentView, ...]
    demand: Demand
    reading: StatusReading
    scheduling: tuple[PodField, ...] = ()
    """The scheduling fields its pod templates set themselves (``podfields``), each with
    its JSON path: the operator's policy judges them (``control.core.podpolicy``)."""
    built: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """(component, pod spec) per instance of a component whose containers list the
    definition builds (KServe's model container): no location holds that list, so the
    admission dry-run takes it from here (``mutate.pod_templates``)."""

    @property
    def status(self) -> GenericStatus:
        """The generic status (first matched by precedence, else ``unknown``)."""
        return self.reading.status

    @property
    def statuses(self) -> tuple[GenericStatus, ...]:
        """Every matched generic status, in precedence order."""
        return self.reading.statuses

    def to_dict(self) -> dict[str, Any]:
        """The ``dispatcher inspect -o json`` shape of DESIGN.md; ``upstreamDiffers`` when
        the definition says why its reading of this state deliberately differs from
        upstream's."""
        out = {
            "apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace,
            "name": self.name, "definition": self.definition_name, "status": self.status,
            "statuses": list(self.statuses), "pods": self.demand.pods,
            "gpus": self.demand.gpus,
            "gangs": [{"name": g.name, "pods": g.pods, "minPods": g.min_pods, "gpus": g.gpus,
                       "independent": g.independent,
                       "podShapes": [{"count": s.count, "gpus": s.gpus,
                                      "gpuProduct": s.gpu_product, "cpu": s.cpu,
                                      "memory": s.memory} for s in g.pod_shapes]}
                      for g in self.demand.gangs],
            "components": [{"name": c.name, "instances": [i.to_dict() for i in c.instances]}
                           for c in self.components],
        }
        if self.reading.upstream_differs:
            out["upstreamDiffers"] = self.reading.upstream_differs
        return out


def resolve(obj: Any, *, catalog: Catalog, limits: Limits = DEFAULT_LIMITS) -> Resolution:
    """Resolve ``obj`` through the catalog's definition for its apiVersion/kind.

    Raises NoDefinitionError (not defined), ObjectError/EvaluationError (broken).
    """
    return resolve_with(catalog.require(obj), obj, limits=limits)


def demand_of(obj: Any, *, catalog: Catalog, limits: Limits = DEFAULT_LIMITS) -> Demand:
    """Only the demand (no status paths evaluated): the fast path for placement."""
    definition = catalog.require(obj)
    given = object_input(obj, limits=limits)
    return demand_from(definition, obj, definition.demand_batch.evaluate(given),
                       text=lambda: given.text)


def status_of(obj: Any, *, catalog: Catalog, limits: Limits = DEFAULT_LIMITS) -> StatusReading:
    """Only the status (no pod paths evaluated): the fast path for status mirroring."""
    definition = catalog.require(obj)
    given = object_input(obj, limits=limits)
    return status_from(definition, obj, definition.status_batch.evaluate(given))


def resolve_with(definition: Definition, obj: Any, *,
                 limits: Limits = DEFAULT_LIMITS) -> Resolution:
    """Resolve ``obj`` through ``definition`` (its kind is not checked)."""
    identity = _identity(obj)
    given = _checked(obj, identity[0], limits)
    return _resolution(definition, obj, definition.full_batch.evaluate(given),
                       text=lambda: given.text, identity=identity)


# -- evaluation split from interpretation: ``bounded.Evaluator`` runs the jq batch of an
# untrusted definition in a worker process and interprets its results here -------------


def object_text(obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> str:
    """The JSON text every path of a definition sees (ObjectError if it is not valid)."""
    return input_text(object_input(obj, limits=limits))


def input_text(given: ObjectInput) -> str:
    """The JSON text of an already checked object (ObjectError if it is not JSON data)."""
    try:
        return given.text
    except ValueError as error:
        raise ObjectError(str(error), name=_identity(given.obj)[0]) from None


def object_input(obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> ObjectInput:
    """``obj`` checked against ``limits`` (ObjectError if it is not a valid object)."""
    return _checked(obj, _identity(obj)[0], limits)


def _checked(obj: Any, name: str, limits: Limits) -> ObjectInput:
    try:
        return ObjectInput(obj, limits=limits)
    except (ValueError, RecursionError) as error:
        raise ObjectError(str(error), name=name) from None


def resolution_from(definition: Definition, obj: Any, results: Results, *,
                    text: Text = "") -> Resolution:
    """The Resolution from ``definition.full_batch`` results on ``obj``.

    ``text`` (the object's JSON) lets a TemplateError name the JSON path of the bad value
    by running the spec path through jq ``path()``; leave it empty for an untrusted
    definition, whose expressions must not run outside the bounded worker.
    """
    return _resolution(definition, obj, results, text=text, identity=_identity(obj))


def _resolution(definition: Definition, obj: Any, results: Results, *, text: Text,
                identity: tuple[str, str | None]) -> Resolution:
    name, namespace = identity
    split = len(definition.demand_batch.expressions)
    components, demand, scheduling, built = _demand(definition, results[:split], name=name,
                                             text=text, root=obj)
    reading = read_status(definition.status, results[split:], fail=Fail(definition, name))
    return Resolution(
        api_version=obj["apiVersion"], kind=obj["kind"], namespace=namespace, name=name,
        definition_name=definition.name, components=components, demand=demand,
        reading=reading, scheduling=scheduling, built=built)


def demand_from(definition: Definition, obj: Any, results: Results, *,
                text: Text = "") -> Demand:
    """The Demand from ``definition.demand_batch`` results on ``obj``."""
    name, _ = _identity(obj)
    _, demand, _, _ = _demand(definition, results, name=name, text=text, root=obj)
    return demand


def status_from(definition: Definition, obj: Any, results: Results) -> StatusReading:
    """The StatusReading from ``definition.status_batch`` results on ``obj``."""
    name, _ = _identity(obj)
    return read_status(definition.status, results, fail=Fail(definition, name))


def _identity(obj: Any) -> tuple[str, str | None]:
    if not isinstance(obj, MAPPINGS):
        raise ObjectError(f"a workload must be an object, not {type(obj).__name__}")
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise ObjectError(f"{key} is missing or not a string")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, MAPPINGS):
        raise ObjectError("metadata must be an object")
    meta = meta or {}
    name = meta.get("name") or meta.get("generateName") or ""
    namespace = meta.get("namespace")
    return (name if isinstance(name, str) else str(name),
            namespace if isinstance(namespace, str) else None)


def _demand(definition: Definition, results: Sequence[list[Any] | JqFailure], *, name: str,
            text: Text, root: Any) -> tuple[tuple[ComponentView, ...], Demand,
                                            tuple[PodField, ...],
                                            tuple[tuple[str, Mapping[str, Any]], ...]]:
    values = BatchValues(results, Fail(definition, name), text=text, root=root)
    views = []
    members: list[Member] = []
    scheduling: list[PodField] = []
    built: list[tuple[str, Mapping[str, Any]]] = []
    for comp in definition.components:
        if comp.spec is None:
            continue
        instances = _instances(comp, values, scheduling, built)
        views.append(ComponentView(name=comp.name, instances=instances))
        members.extend(instances)
    gangs = build_gangs(definition, members, default_name=name or definition.root.name,
                        values=values)
    # A field at a location the definition declares server-set is the hub's admission's
    # (a bare Pod's spec.priority): the copy drops it, so there is nothing to judge.
    kept = tuple(f for f in scheduling if f.path not in definition.server_set_fields)
    return tuple(views), Demand(gangs=gangs), kept, tuple(built)


def _instances(comp: Component, values: BatchValues, scheduling: list[PodField],
               built: list[tuple[str, Mapping[str, Any]]]) -> tuple[Instance, ...]:
    """The component's instances; the scheduling fields their pod specs set are appended
    to ``scheduling`` (with their JSON paths), the pod specs of a built containers list
    to ``built``."""
    ids = instance_ids(comp, values)
    count = len(ids)
    specs = pod_specs(comp, values, count=count)
    if builds_containers(comp):
        built.extend((comp.name, spec) for _, spec in specs if spec is not None)
    scale = comp.scale
    exprs = scale.exprs() if scale is not None else ()
    columns = dict(zip(exprs, values.padded(exprs, count), strict=True)) if exprs else {}

    def column(expr: Expr | None, index: int) -> int | None:
        return None if expr is None else values.number(expr, columns[expr][index])

    out = []
    for index, instance_id in enumerate(ids):
        replicas = column(scale.replicas, index) if scale else None
        minimum = column(scale.min_replicas, index) if scale else None
        per = column(scale.pods_per_replica, index) if scale else None
        if per is not None and per < 0 and scale and scale.pods_per_replica:
            raise values.fail(scale.pods_per_replica, f"pods per replica {per} is negative")
        for bound, given in ((scale.replicas, replicas), (scale.min_replicas, minimum)) \
                if scale else ():
            if bound is not None and given is not None and given < 0:
                raise values.template_error(bound, index, f"replica count {given} is negative")
        if replicas is None:
            replicas = max(minimum, 1) if minimum is not None else 1
        per = 1 if per is None else per
        effective = minimum if minimum is not None and minimum > 0 else replicas
        spec_expr, spec = specs[index]
        try:
            needs = pod_needs(spec, required=_REQUIRED[comp.spec.pattern if comp.spec else ""])
        except TemplateProblem as problem:
            inner = ".".join(p for p in (SPEC_IN[comp.spec.pattern if comp.spec else ""],
                                         problem.where) if p)
            if spec_expr.slot < 0 or comp.spec is None or comp.spec.pattern == "fragmented":
                raise TemplateError(problem.reason, path=f"({comp.name} pod spec).{inner}",
                                    field=spec_expr.field, name=values.fail.name,
                                    definition=values.fail.definition.name) from None
            raise values.template_error(spec_expr, index, problem.reason,
                                        inner=inner) from None
        except ValueError as error:
            raise values.fail(spec_expr, str(error)) from None
        scheduling.extend(_scheduling(comp, values, spec_expr, index, spec))
        stage, waves = _creation(scale, values, columns, index)
        out.append(Instance(component=comp.name, id=instance_id, replicas=replicas,
                            pods_per_replica=per, pods=replicas * per,
                            min_pods=min(effective, replicas) * per, needs=needs,
                            stage=stage, waves=waves))
    return tuple(out)


def _creation(scale: Scale | None, values: BatchValues, columns: Mapping[Expr, list[Any]],
              index: int) -> tuple[str, bool]:
    """(stage, waves) of instance ``index``: ``creationStagePath`` gives a string or a
    number (null: with the workload), ``podWavesPath`` a boolean (null: false)."""
    if scale is None:
        return "", False
    stage, waves = "", False
    if scale.creation_stage is not None and scale.creation_stage.slot >= 0:
        value = columns[scale.creation_stage][index]
        if isinstance(value, bool) or not isinstance(value, str | int | float | None):
            raise values.fail(scale.creation_stage, f"a creation stage must be a string or "
                                                    f"a number, not {value!r}")
        stage = "" if value is None else str(value)
    if scale.pod_waves is not None and scale.pod_waves.slot >= 0:
        value = columns[scale.pod_waves][index]
        if value is not None and not isinstance(value, bool):
            raise values.fail(scale.pod_waves, f"podWavesPath must give a boolean, not "
                                               f"{value!r}")
        waves = bool(value)
    return stage, waves


def _scheduling(comp: Component, values: BatchValues, expr: Expr, index: int, spec: Any
                ) -> list[PodField]:
    """The scheduling fields one instance's pod spec sets, each with its JSON path (the
    component's name for a spec assembled from fragments)."""
    found = scheduling_fields(spec)
    if not found:
        return []
    source = comp.spec
    pattern = source.pattern if source else ""
    if source is not None and pattern == "fragmented":
        out = []
        for key, value in found:  # each field from its own fragment path
            fragment = source.fragment(f"{key}Path")
            path = values.location(fragment, index) if fragment is not None \
                and fragment.slot >= 0 else f"({comp.name} pod spec).{key}"
            out.append(PodField(path=path, field=key, value=value))
        return out
    if expr.slot < 0:
        base = f"({comp.name} pod spec)"
    else:
        base = values.location(expr, index, inner=SPEC_IN[pattern])
    return [PodField(path=f"{base}.{key}", field=key, value=value) for key, value in found]


# container fields a pod spec must give, by spec pattern (template.check_pod_spec): a
# PodTemplateSpec becomes Pods as written (name and image, or the apiserver refuses the
# Pod); an inline pod spec (Knative, KServe, Grove) gets names from the framework but
# never an image; a spec assembled from fragments may get both from the framework (KServe
# `.model`: the ServingRuntime's image).
_REQUIRED: dict[str, tuple[str, ...]] = {"template": ("name", "image"),
                                         "podspec": ("image",), "fragmented": (), "": ()}
