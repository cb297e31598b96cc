"""The results of one definition's jq batch on one object, read as typed values.

Every accessor raises the ``EvaluationError`` that names the expression, its definition
field and the object (``Fail``): a failed expression, a count that does not match the
instance ids (upstream's alignment rule, reference §2.5), a number that is not a whole
int32. ``location`` gives the JSON path of a result for errors about the object's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dispatcher.workloads.errors import EvaluationError, TemplateError
from dispatcher.workloads.jqrun import JqFailure
from dispatcher.workloads.location import json_location
from dispatcher.workloads.model import Definition, Expr

__all__ = ["BatchValues", "Fail", "Text"]

INT32 = 2**31 - 1
Text = str | Callable[[], str]
"""The object's JSON text, or how to make it (only an error's location needs it)."""


class Fail:
    """Builds the EvaluationError for an expression of one definition and object."""

    def __init__(self, definition: Definition, name: str) -> None:
        self.definition = definition
        self.name = name

    def __call__(self, expr: Expr, message: str) -> EvaluationError:
        return EvaluationError(message, expression=expr.text, field=expr.field,
                               name=self.name, definition=self.definition.name)


class BatchValues:
    """Typed access to one batch's results, raising EvaluationError on bad shapes."""

    def __init__(self, results: Sequence[list[Any] | JqFailure], fail: Fail, *,
                 text: Text = "", root: Any = None) -> None:
        self.results = results
        self.fail = fail
        self.text = text
        self.root = root

    def location(self, expr: Expr, index: int, *, inner: str = "") -> str:
        """The JSON path of ``expr``'s ``index``-th result (``inner`` below it); the
        definition's field when the expression is not a path or may not run here (an
        untrusted definition: no text). A field chain is walked on the object itself,
        anything else runs jq ``path()`` on its text (``location.json_location``)."""
        where = json_location(expr.text, self.text, index, root=self.root)
        if where is None:
            where = f"({expr.field} result {index})"
        return ".".join(p for p in (where, inner) if p).replace(".[", "[")

    def template_error(self, expr: Expr, index: int, reason: str, *, inner: str = ""
                       ) -> TemplateError:
        """The object's value at ``expr``'s ``index``-th result (``inner`` below it) is
        invalid: a TemplateError with its JSON path (``location``)."""
        return TemplateError(reason, path=self.location(expr, index, inner=inner),
                             field=expr.field, name=self.fail.name,
                             definition=self.fail.definition.name)

    def all(self, expr: Expr) -> list[Any]:
        value = self.results[expr.slot]
        if isinstance(value, JqFailure):
            raise self.fail(expr, value.message)
        return value

    def aligned(self, expr: Expr, count: int) -> list[Any]:
        values = self.all(expr)
        if len(values) != count:
            raise self.fail(expr, f"instance ids count ({count}) does not match results "
                                  f"count ({len(values)})")
        return values

    def padded(self, exprs: Sequence[Expr], count: int) -> list[list[Any]]:
        """Upstream's fragmented/scale rule: max count over sub-paths, shorter padded."""
        lists = [self.all(e) for e in exprs]
        longest = max((len(v) for v in lists), default=count)
        if longest != count:
            worst = next(e for e, v in zip(exprs, lists, strict=True) if len(v) == longest)
            raise self.fail(worst, f"instance ids count ({count}) does not match results "
                                   f"count ({longest})")
        return [v + [None] * (count - len(v)) for v in lists]

    def number(self, expr: Expr, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            hint = " (use | tonumber)" if isinstance(value, str) else ""
            raise self.fail(expr, f"must be a number, not {type(value).__name__} "
                                  f"{value!r}{hint}")
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(expr, f"must be a whole number, not {value!r}")
        if abs(value) > INT32:
            raise self.fail(expr, f"{value!r} is out of range")
        return int(value)
