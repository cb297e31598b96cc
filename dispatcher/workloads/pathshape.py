"""Whether a jq expression is a path expression, decided from its text alone.

``copyDefinition.serverSetPaths`` entries must be path expressions (``path(EXPR)`` must
give locations, not values). Running ``path()`` at load, even on ``null``, evaluates the
expression in the process that loads it: a hub definition's ``(.a,.b) as $x0 | ... |
(.a,.b) as $x40 | .c`` is 2**41 steps before the first answer, and hub definitions are
written by tenants. So the load-time check reads the expression's shape and never runs it;
the actual locations are computed later, for untrusted definitions in the bounded workers.

The spine must be made of locations: ``.``, ``.a``, ``."a"``, ``[...]``, ``[]``, slices,
``?``, pipes, ``,``, ``//``, ``select(...)``, ``empty``, ``getpath(...)``, ``if ... then P
else P end``, parentheses, and ``SOURCE as $x | P``. What sits in a value position (a
``select`` condition, an index, an ``if`` condition, a binding's source) may be any jq.
"""

from __future__ import annotations

from dispatcher.workloads.jqtokens import Cursor, Unsupported

__all__ = ["path_shape_problem"]

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
_LOCATION_CALLS = frozenset({"select", "getpath"})
_VALUE_OPERATORS = frozenset({"==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%",
                              "and", "or"})


class _NotPath(Exception):
    pass


def path_shape_problem(expression: str) -> str:
    """Why ``expression`` is not a path expression, or ''."""
    try:
        checker = _Shape(expression)
        checker.pipe()
        if checker.peek()[0] != "end":
            raise _NotPath(f"unexpected {checker.peek()[1]!r}")
    except _NotPath as finding:
        return str(finding)
    except Unsupported as error:
        return f"cannot be read as a path expression: {error}"
    return ""


class _Shape(Cursor):
    failure = _NotPath

    def pipe(self) -> None:
        self.comma()
        while self.at_value("|"):
            self.take()
            self.comma()

    def comma(self) -> None:
        self.alternative()
        while self.at_value(","):
            self.take()
            self.alternative()

    def alternative(self) -> None:
        if self.binding():
            return
        self.term()
        self.suffixes()
        if self.at_value(*_VALUE_OPERATORS):
            raise _NotPath(f"{self.peek()[1]!r} gives values, not locations")
        if self.at_value("//"):
            self.take()
            self.alternative()

    def binding(self) -> bool:
        """``SOURCE as $x | PATH`` (any source): consumed when the next depth-0 keyword
        is ``as``."""
        start = self.at
        self.skip({"as", "|", ",", "//", ")", "]", "}", "then", "elif", "else", "end", ";"})
        if not self.at_value("as"):
            self.at = start
            return False
        self.take("as")
        if self.take()[0] != "var":
            # libjq's path() follows a destructuring pattern's own indexing (1.8:
            # `path(.a as [$x] | .b)` is [[0, "b"]]): not a path anyone means
            raise _NotPath("destructuring ('as [$a]', 'as {$a}') is not a path step")
        self.take("|")
        self.pipe()
        return True

    def term(self) -> None:
        kind, value = self.take()
        if kind == "field" or (kind == "op" and value == "."):
            if kind == "op" and self.peek()[0] == "string":
                self.take()
            return
        if kind == "op" and value == "(":
            self.pipe()
            self.take(")")
            return
        if kind == "ident" and value == "empty":
            return
        if kind == "ident" and value == "if":
            self.conditional()
            return
        if kind == "ident" and value in _LOCATION_CALLS and self.at_value("("):
            self.skip_group()
            return
        raise _NotPath(f"{value!r} gives values, not locations (e.g. `.a // 1` is not a "
                       "path; `.a // .b` is)")

    def conditional(self) -> None:
        self.skip({"then"})
        self.take("then")
        self.pipe()
        while self.at_value("elif"):
            self.take()
            self.skip({"then"})
            self.take("then")
            self.pipe()
        if self.at_value("else"):
            self.take()
            self.pipe()
        self.take("end")

    def suffixes(self) -> None:
        while True:
            kind, value = self.peek()
            if kind == "field" or (value == "?" and kind == "op"):
                self.take()
            elif value == "." and self.peek(1)[0] == "string":
                self.at += 2
            elif value == "." and self.peek(1)[1] == "[":
                self.take()
            elif value == "[" and kind == "op":
                self.skip_group()
            else:
                return

    def skip_group(self) -> None:
        """Past one bracketed group, whatever it holds."""
        close = _OPEN[self.take()[1]]
        self.skip({close})
        self.take(close)

    def skip(self, stops: set[str]) -> None:
        """Past any jq up to a depth-0 token in ``stops`` (not consumed). ``reduce`` and
        ``foreach`` own the next ``as``; ``if`` ... ``end`` nest."""
        depth = 0
        owned_as = 0
        while True:
            kind, value = self.peek()
            if kind == "end":
                return
            word = kind in ("op", "ident")
            if depth == 0 and word and value in stops and not (value == "as" and owned_as):
                return
            if word and value in ("reduce", "foreach"):
                owned_as += 1
            elif word and value == "as" and owned_as:
                owned_as -= 1
            elif value in _OPEN if kind == "op" else (word and value == "if"):
                depth += 1
            elif value in _CLOSE if kind == "op" else (word and value == "end"):
                depth -= 1
                if depth < 0:
                    return
            self.at += 1
