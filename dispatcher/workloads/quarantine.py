"""Who answers for a broken evaluation bound: the object first, the definition only later.

An untrusted definition's evaluation that breaks a bound (time, CPU, memory, result size, a
dead worker) may be the object's doing as much as the definition's: an expression whose
cost grows with the object's size is fine on every ordinary object and explodes on one
tenant's 4 KB annotation. Quarantining the *definition* on that one hit let one tenant stop
every other tenant's workloads of the kind. So (pure: plain data and times in, no clock):

1. **the object is quarantined**: a bound hit on an object records it (``QuarantineBook.hit``)
   with the object's version (its ``resourceVersion``; generation or content when there is
   none); every later evaluation of that object *at that version* by that definition fails
   at once without running (``QuarantineBook.of_object``). Any change of the object (spec,
   labels, annotations: a new resourceVersion) evaluates it again, once.
2. **the definition is quarantined** only when it broke bounds on at least
   ``QuarantineRule.objects`` distinct objects from at least ``QuarantineRule.namespaces``
   namespaces within ``QuarantineRule.window_seconds`` (``definition_breaks``). Defaults:
   3 objects, 2 namespaces, 1 hour. Why: one namespace is one tenant, and a tenant must not
   be able to switch a shared definition off for everyone by writing objects of their own,
   however many; a definition that is hostile in itself (a bomb independent of the data)
   breaks on everybody's objects, so it still goes after three bounded evaluations, and each
   of those costs one bound's worth, once per object. The same object hit again after a
   change is one object, not several. The window keeps two rare unlucky objects a week
   apart from adding up to a verdict on the definition.

Objects are counted by (namespace, name): a hub object and its copy on a member are one
object. A definition is identified by the caller (its identity in the catalog): an updated
definition object is a new definition and starts with a clean record.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_RULE", "Hit", "QuarantineBook", "QuarantineRule", "Strike", "Subject",
           "definition_breaks"]

_MAX_OBJECTS = 10_000  # quarantined objects remembered; the oldest beyond are evaluated again
_MAX_STRIKES = 64  # strikes kept per definition (the rule needs a handful)


@dataclass(frozen=True, kw_only=True)
class QuarantineRule:
    """When bound hits on objects add up to quarantining their definition."""

    objects: int = 3
    namespaces: int = 2
    window_seconds: float = 3600.0


DEFAULT_RULE = QuarantineRule()


@dataclass(frozen=True, kw_only=True)
class Subject:
    """The object an evaluation runs on: who it is and which version of it."""

    namespace: str
    name: str
    uid: str
    version: str

    @classmethod
    def of(cls, obj: Any) -> Subject:
        """From a Kubernetes object; its version is the resourceVersion, else the
        generation, else a hash of its content (objects read from files)."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}
        version = str(meta.get("resourceVersion") or "")
        if not version and meta.get("generation"):
            version = f"generation {meta.get('generation')}"
        if not version:
            version = content_version(json.dumps(obj, sort_keys=True, default=str))
        return cls(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   uid=str(meta.get("uid") or ""), version=version)

    @classmethod
    def of_text(cls, text: str, *, namespace: str = "") -> Subject:
        """An object known only by its JSON text (commands reading local files)."""
        return cls(namespace=namespace, name="", uid="", version=content_version(text))

    @property
    def object(self) -> tuple[str, str]:
        """What counts as one object towards the definition's quarantine."""
        return (self.namespace, self.name or self.version)

    def describe(self) -> str:
        if not self.name:
            return "this object"
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def content_version(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Hit:
    """A bound broken: which, and the detail (``more than 2 s of CPU``)."""

    bound: str
    detail: str

    def __str__(self) -> str:
        return f"{self.bound}: {self.detail}"


@dataclass(frozen=True, kw_only=True)
class Strike:
    """One object on which a definition broke a bound, and when."""

    namespace: str
    object: tuple[str, str]
    at: float
    hit: Hit


def definition_breaks(strikes: Iterable[Strike], *, rule: QuarantineRule, now: float
                      ) -> bool:
    """Whether ``strikes`` quarantine their definition under ``rule`` at ``now``."""
    recent = [s for s in strikes if now - s.at <= rule.window_seconds]
    return (len({s.object for s in recent}) >= rule.objects
            and len({s.namespace for s in recent}) >= rule.namespaces)


class QuarantineBook:
    """Quarantined objects and definitions, by definition key (see the module docstring)."""

    def __init__(self, rule: QuarantineRule = DEFAULT_RULE) -> None:
        self.rule = rule
        self._objects: OrderedDict[tuple[Any, str, str, str], tuple[str, Hit]] = OrderedDict()
        self._strikes: dict[Any, list[Strike]] = {}
        self._definitions: dict[Any, Hit] = {}

    def of_definition(self, definition: Any) -> Hit | None:
        """The hit that quarantined ``definition``, if it is."""
        return self._definitions.get(definition)

    def definitions(self) -> dict[Any, Hit]:
        """Every quarantined definition key and the hit that did it."""
        return dict(self._definitions)

    def of_object(self, definition: Any, subject: Subject) -> Hit | None:
        """The hit that quarantined ``subject`` (at this very version) under ``definition``."""
        found = self._objects.get(self._key(definition, subject))
        if found is None or found[0] != subject.version:
            return None
        return found[1]

    def hit(self, definition: Any, subject: Subject, hit: Hit, *, now: float) -> bool:
        """Record that ``definition`` broke a bound on ``subject``: the object is
        quarantined at its version; True when this makes the definition quarantined."""
        key = self._key(definition, subject)
        self._objects[key] = (subject.version, hit)
        self._objects.move_to_end(key)
        while len(self._objects) > _MAX_OBJECTS:
            self._objects.popitem(last=False)
        strikes = [s for s in self._strikes.get(definition, ())
                   if now - s.at <= self.rule.window_seconds and s.object != subject.object]
        strikes.append(Strike(namespace=subject.namespace, object=subject.object, at=now,
                              hit=hit))
        self._strikes[definition] = strikes[-_MAX_STRIKES:]
        if definition in self._definitions:
            return False
        if definition_breaks(strikes, rule=self.rule, now=now):
            self._definitions[definition] = hit
            return True
        return False

    def cleared(self, definition: Any, subject: Subject) -> None:
        """``subject`` evaluated within the bounds: it is no longer quarantined."""
        self._objects.pop(self._key(definition, subject), None)

    def strikes(self, definition: Any) -> list[Strike]:
        """The recent strikes against ``definition`` (for messages and tests)."""
        return list(self._strikes.get(definition, ()))

    @staticmethod
    def _key(definition: Any, subject: Subject) -> tuple[Any, str, str, str]:
        return (definition, subject.namespace, subject.name, subject.uid)
