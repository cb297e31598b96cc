"""Definition objects on the hub: linted, merged with the built-in and config-file ones.

The live catalog (``control/catalog.LiveCatalog``) is swapped to the result of ``merge``.

Pure: plain data in (the built-in catalog, the config files' catalog, the definition
objects read on the hub, already linted), plain data out (the effective ``Catalog`` and
one ``Acceptance`` per hub object, which the controller writes as the object's status).

Precedence, one definition per kind: a hub object > a config file > the built-in catalog.
Why this order: the hub object is what the operator changes at run time (``kubectl
apply``), the config file what they chose at start, the built-in catalog the default.
A hub object that fails the lint, breaks the evaluation bounds (quarantined) or clashes
with another hub object for the same kind never replaces a working definition: the kind
keeps the object's last accepted version if it had one, else the next source in the order.
Two hub objects for one kind are ambiguous, so both are refused and both say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import DefinitionError
from dispatcher.workloads.model import Definition
from dispatcher.workloads.reader import DocReader

__all__ = ["FORMATS", "Acceptance", "Effective", "HubDefinition", "lint", "merge"]

FORMATS = {"ResourceInterface": "optimization.nvidia.com/v1alpha1", "Karta": "run.ai/v1alpha1"}
"""The hub definition kinds and their apiVersions (the two upstream formats)."""

_SHORT = {"ResourceInterface": "ri", "Karta": "karta"}

Key = tuple[str, str]  # (object kind: ResourceInterface or Karta, object name)


@dataclass(frozen=True)
class HubDefinition:
    """One definition object on the hub, linted: its definition, or why it has none."""

    format: str  # ResourceInterface or Karta
    name: str
    generation: int
    definition: Definition | None
    problem: str = ""  # the lint message when ``definition`` is None

    @property
    def key(self) -> Key:
        return (self.format, self.name)


@dataclass(frozen=True)
class Acceptance:
    """Whether one hub definition object is accepted, and why (its status)."""

    accepted: bool
    reason: str  # Accepted, Invalid, Conflict or Quarantined
    message: str
    observed_generation: int
    serves: GroupVersionKind | None  # the kind it describes (None when it cannot be read)
    overrides: str  # "built-in", "config" or "" (what it replaces for its kind)

    def status(self) -> dict[str, Any]:
        """The object's ``status`` (conditions without times: the shell adds them)."""
        serves = ({"apiVersion": self.serves.api_version, "kind": self.serves.kind}
                  if self.serves is not None else None)
        return {"observedGeneration": self.observed_generation, "serves": serves,
                "servesKind": serves["kind"] if serves else None,
                "overrides": self.overrides or None,
                "conditions": [{"type": "Accepted", "status": "True" if self.accepted
                                else "False", "reason": self.reason,
                                "message": self.message[:1000],
                                "observedGeneration": self.observed_generation}]}


@dataclass(frozen=True)
class Effective:
    """The merge's result: the catalog to use now, and what to tell each hub object."""

    catalog: Catalog
    verdicts: dict[Key, Acceptance]
    accepted: dict[Key, Definition] = field(default_factory=dict)
    """Each hub object's accepted definition: the next merge's last good version."""
    sources: dict[GroupVersionKind, str] = field(default_factory=dict)
    """Where each kind's definition comes from: "built-in", "config" or "<Kind>/<name>"."""


def lint(manifest: Mapping[str, Any]) -> Definition | str:
    """The definition of a hub object, or the lint message (as ``definitions lint``).

    Hub definitions are named ``karta/<name>`` or ``ri/<name>``: never the name of a
    built-in or config definition, so one can neither evict another by name nor be
    mistaken for it in a Dispatch's ``status.definition``."""
    kind = str(manifest.get("kind") or "")
    name = str((manifest.get("metadata") or {}).get("name") or "")
    reader = DocReader(source=f"hub {kind}/{name}", document=dict(manifest), index=0)
    try:
        definition = reader.build()
    except DefinitionError as error:
        return "; ".join(_issue(i) for i in error.issues)
    if reader.issues or definition is None:
        return "; ".join(_issue(i) for i in reader.issues) or "not a definition"
    return replace(definition, name=f"{_SHORT.get(kind, kind)}/{name}")


def _issue(issue: Any) -> str:
    field_ = f"{issue.field}: " if issue.field else ""
    return f"{field_}{issue.message}"


def merge(builtin: Catalog, config: Catalog, objects: Sequence[HubDefinition], *,
          last_good: Mapping[Key, Definition] = {},
          quarantined: Mapping[str, str] = {}) -> Effective:
    """The effective catalog and a verdict per hub object (see the module docstring).

    ``config`` is the catalog the controller started with (built-in definitions in it are
    recognised by identity and count as built-in); ``quarantined`` maps definition names
    to the bound they broke (``Evaluator.quarantined()``)."""
    builtin_ids = {id(d) for d in builtin.definitions}
    base: dict[GroupVersionKind, tuple[Definition, str]] = {}
    for definition in (*builtin.definitions, *config.definitions):
        source = "built-in" if id(definition) in builtin_ids else "config"
        base[definition.gvk] = (definition, source)

    claims: dict[GroupVersionKind, list[HubDefinition]] = {}
    for obj in objects:
        if obj.definition is not None:
            claims.setdefault(_kind(obj.definition), []).append(obj)

    verdicts: dict[Key, Acceptance] = {}
    accepted: dict[Key, Definition] = {}
    for obj in sorted(objects, key=lambda o: o.key):
        verdicts[obj.key] = _judge(obj, base=base, claims=claims, last_good=last_good,
                                   quarantined=quarantined)
        if verdicts[obj.key].accepted and obj.definition is not None:
            accepted[obj.key] = obj.definition

    effective = {k: d for k, (d, _) in base.items()}
    sources = {k: s for k, (_, s) in base.items()}
    present = {o.key for o in objects}
    for key in sorted(present):
        candidate = accepted.get(key) or last_good.get(key)
        if candidate is None or (key not in accepted
                                 and quarantined.get(candidate.name) is not None):
            continue
        kind = _kind(candidate)
        if key not in accepted and any(_kind(d) == kind for d in accepted.values()):
            continue  # a last good version never beats an accepted one
        if key not in accepted and len(claims.get(kind, ())) > 1:
            continue  # ambiguous now: the base definition (or none) until resolved
        effective[kind] = candidate
        sources[kind] = f"{key[0]}/{key[1]}"
    held = {k: d for k, d in last_good.items() if k in present and k not in accepted}
    return Effective(catalog=Catalog(effective.values()), verdicts=verdicts,
                     accepted={**held, **accepted}, sources=sources)


def _judge(obj: HubDefinition, *, base: Mapping[GroupVersionKind, tuple[Definition, str]],
           claims: Mapping[GroupVersionKind, Sequence[HubDefinition]],
           last_good: Mapping[Key, Definition], quarantined: Mapping[str, str]
           ) -> Acceptance:
    """One hub object's verdict: invalid, in conflict, quarantined or accepted."""
    definition = obj.definition
    if definition is None:
        kept = "; its last accepted version stays in use" if obj.key in last_good else ""
        return Acceptance(False, "Invalid", f"{obj.problem}{kept}", obj.generation, None, "")
    kind = _kind(definition)
    overrides = base[kind][1] if kind in base else ""
    rivals = [o for o in claims[kind] if o.key != obj.key]
    if rivals:
        names = ", ".join(f"{o.format}/{o.name}" for o in rivals)
        return Acceptance(
            False, "Conflict", f"{kind.api_version} {kind.kind} is also described by "
            f"{names}; one definition per kind: delete all but one", obj.generation, kind,
            overrides)
    bound = quarantined.get(definition.name)
    if bound is not None:
        return Acceptance(
            False, "Quarantined", f"evaluation broke its bounds ({bound}); not used "
            f"until the object changes", obj.generation, kind, overrides)
    replaced = f"; overrides the {overrides} definition {base[kind][0].name}" \
        if overrides else ""
    return Acceptance(True, "Accepted", f"serves {kind.api_version} {kind.kind}{replaced}",
                      obj.generation, kind, overrides)


def _kind(definition: Definition) -> GroupVersionKind:
    return definition.gvk
