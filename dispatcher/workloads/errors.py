"""Why a workload could not be resolved, as a small typed hierarchy.

Three outcomes stay distinct for callers: *not defined* (``NoDefinitionError``: no definition
for the object's kind), *broken* (``EvaluationError``/``ObjectError``: the definition or the
object is wrong), and *defined but empty* (not an error: a ``Resolution`` with zero pods).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DefinitionError",
    "EvaluationError",
    "Issue",
    "MutationError",
    "NoDefinitionError",
    "ObjectError",
    "TemplateError",
    "WorkloadError",
]


class WorkloadError(Exception):
    """Base of every error this package raises on purpose."""


@dataclass(frozen=True, kw_only=True)
class Issue:
    """One problem in a definition file: where it is and what is wrong."""

    source: str
    definition: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"definition {self.definition}: " if self.definition else ""
        field = f"{self.field}: " if self.field else ""
        return f"{self.source}: {where}{field}{self.message}"


class DefinitionError(WorkloadError):
    """A definition file or document is invalid; ``issues`` lists every problem found."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


class NoDefinitionError(WorkloadError):
    """No loaded definition describes the object's apiVersion/kind."""

    def __init__(self, *, api_version: str, kind: str, known: Sequence[str]) -> None:
        self.api_version = api_version
        self.kind = kind
        self.known = tuple(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(
            f"no definition for apiVersion {api_version!r} kind {kind!r} "
            f"(loaded definitions: {listed})")


class ObjectError(WorkloadError):
    """The workload object itself cannot be evaluated (not a mapping, too large, too deep)."""

    def __init__(self, message: str, *, name: str = "") -> None:
        self.name = name
        super().__init__(f"{name}: {message}" if name else message)


class TemplateError(ObjectError):
    """The workload's pod template (or replica count) cannot make valid Pods.

    The object is at fault, not the definition: a controller reports it on the workload
    (``Resolved=False``) and never submits it; the definition stays accepted. ``path`` is
    the JSON path of the bad value in the object
    (``spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command[1]``).
    """

    def __init__(self, reason: str, *, path: str, field: str, name: str,
                 definition: str) -> None:
        self.path = path
        self.field = field
        self.reason = reason
        self.definition = definition
        super().__init__(f"invalid pod template: {path}: {reason}", name=name)


class EvaluationError(WorkloadError):
    """A definition path failed on an object, or returned something of the wrong shape."""

    def __init__(self, message: str, *, expression: str, field: str, name: str,
                 definition: str) -> None:
        self.expression = expression
        self.field = field
        self.name = name
        self.definition = definition
        self.reason = message
        super().__init__(
            f"{name}: definition {definition}: {field} ({expression!r}): {message}")


class MutationError(WorkloadError):
    """A pod field could not be written through the definition's paths."""
