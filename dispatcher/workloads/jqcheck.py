"""What a definition's jq expression may be, checked before it ever runs.

Definitions are loop-free: ``check_safety`` rejects ``def``, ``range``, ``recurse``,
``until``, ``..``, assignments and constant folding that would build huge strings, in every
code token (string interpolation included). ``compile_errors`` asks libjq whether
expressions compile (many at once); ``is_linear`` and ``is_balanced`` say how an
expression may be batched with others (``jqrun.Batch``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jq

__all__ = ["MAX_FOLDED_BYTES", "check_safety", "compile_error", "compile_errors",
           "folded_size", "is_balanced", "is_linear", "jq_message"]

_FORBIDDEN_NAMES = frozenset({
    "del", "range", "paths", "recurse", "walk", "repeat", "until", "while", "def",
    "env", "$ENV", "input", "inputs", "debug", "stderr", "input_filename", "$__loc__",
    "halt", "halt_error", "now", "import", "include", "$__prog_args", "input_line_number",
    "get_search_list", "modulemeta", "get_jq_origin", "get_prog_origin", "combinations",
    "recurse_down", "$__prog_name",
    "keys_unsorted",  # not in gojq (upstream's engine); with sorted input it equals keys
})
_ASSIGNMENTS = ("|=", "+=", "-=", "*=", "/=", "%=", "//=")
_WORD = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")


def check_safety(expression: str) -> list[str]:
    """Problems with ``expression``: forbidden builtins/operators outside string literals.

    Stricter than upstream (which does not look inside parentheses or constructors): every
    code token is checked, including code inside string interpolation ``"\\(...)"``.
    """
    problems: list[str] = []
    folded = folded_size(expression)
    if folded > MAX_FOLDED_BYTES:
        problems.append(f"string repetition by literal counts can build {folded} bytes while "
                        f"compiling (libjq folds constants), more than {MAX_FOLDED_BYTES}")
    for token in _code_tokens(expression):
        if token in _FORBIDDEN_NAMES:
            problems.append(f"{token!r} is not allowed in definitions")
        elif token == "..":
            problems.append("'..' (recursive descent) is not allowed in definitions")
        elif token in _ASSIGNMENTS or token == "=":
            problems.append(f"assignment operator {token!r} is not allowed in definitions")
    return problems


MAX_FOLDED_BYTES = 1 << 20
_COUNT = r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"
_TIMES_LITERAL = re.compile(r"\*[\s(]*" + _COUNT + r"|" + _COUNT + r"[\s)]*\*")


def folded_size(expression: str) -> int:
    """An upper bound of the string libjq may build while *compiling* ``expression``.

    libjq folds constant operations at compile time, so ``"x" * 1000000000`` allocates a
    gigabyte inside ``jq.compile`` (at load, in whatever process loads the definition),
    before any bound on evaluation applies. Only ``string * number`` with both literal
    grows (chained: ``("x" * 1000) * 1000``), so the total length of the string literals
    times every number literal next to a ``*`` bounds what folding can build. Exact for
    the one folding that explodes; it may over-count (a ``.a * 100000`` elsewhere), which
    only matters with a string literal and a product over a million.
    """
    strings = _STRING.findall(expression)
    if not strings or "*" not in expression:
        return 0
    code = _STRING.sub('""', expression)
    size = sum(len(s) - 2 for s in strings) or 1
    for match in _TIMES_LITERAL.finditer(code):
        count = float(match.group(1) or match.group(2))
        size = int(min(size * max(count, 1.0), 2.0**62))
    return size if size > 1 else 0


def _code_tokens(text: str) -> list[str]:
    """Identifiers and operators of ``text``, skipping string literals and comments."""
    tokens: list[str] = []
    stack: list[int] = []  # paren depth at each open string interpolation
    depth = 0
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\" and i + 1 < n and text[i + 1] == "(":
                stack.append(depth)
                depth += 1
                in_string = False
                i += 2
            elif ch == "\\":
                i += 2
            elif ch == '"':
                in_string = False
                i += 1
            else:
                i += 1
            continue
        if ch == '"':
            in_string = True
            i += 1
        elif ch == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif ch == "(":
            depth += 1
            i += 1
        elif ch == ")":
            depth -= 1
            if stack and depth == stack[-1]:
                stack.pop()
                in_string = True
            i += 1
        elif ch == "." and i + 1 < n and text[i + 1] == ".":
            tokens.append("..")
            i += 2
        elif ch == ".":
            # `.name` is a field access, never a builtin call: skip the name.
            match = _WORD.match(text, i + 1)
            i = match.end() if match and not text[i + 1].startswith("$") else i + 1
        elif ch == "$" or ch.isalpha() or ch == "_":
            match = _WORD.match(text, i)
            word = match.group(0) if match else ch
            tokens.append(word)
            i += len(word)
        elif ch in "|+-*/%=<>!":
            op = _operator_at(text, i)
            tokens.append(op)
            i += len(op)
        else:
            i += 1
    return tokens


def _operator_at(text: str, i: int) -> str:
    for op in ("//=", "|=", "+=", "-=", "*=", "/=", "%=", "==", "!=", "<=", ">=", "//"):
        if text.startswith(op, i):
            return op
    return text[i]


_GENERATORS = frozenset({
    "as", "reduce", "foreach", "label", "limit", "first", "last", "nth", "until", "while",
    "repeat", "range", "recurse", "paths", "leaf_paths", "path", "splits", "scan", "match",
    "capture", "tostream", "fromstream", "combinations", "input", "inputs",
    "env", "$ENV", "def",
})
_ITERATOR = re.compile(r"\[\s*\]")


def is_linear(expression: str) -> bool:
    """Whether ``expression`` yields at most one result per item of one collection.

    True for the common path shape: at most one ``[]`` iterator, no ``,`` and no builtin
    that generates or binds. Such an expression cannot multiply results (no cross
    product), so it needs no ``limit`` (which costs about as much as the path itself);
    every other expression is evaluated under ``limit(1000; ...)``.
    """
    if "\\(" in expression or "#" in expression:
        return False
    code = _STRING.sub('""', expression)
    if "," in code or len(_ITERATOR.findall(code)) > 1:
        return False
    return not any(token in _GENERATORS for token in _code_tokens(code))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def is_balanced(expression: str) -> bool:
    """Brackets balanced outside plain string literals, and no comments or interpolation.

    Such an expression parses the same alone and as ``(expression)`` inside a larger
    program, so many can be compile-checked together in one libjq compile.
    """
    if "\\(" in expression or "#" in expression:
        return False
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in _STRING.sub("S", expression):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
        elif ch == '"':
            return False  # an unterminated string
    return not stack


_COMPILED_OK: set[str] = set()


def compile_errors(expressions: Sequence[str]) -> dict[str, str]:
    """libjq compile errors by expression (absent: compiles), checking many at once.

    Balanced expressions are compiled together first (one libjq compile, a few ms); only
    when that fails, or for the others, each is compiled alone to name the culprit.
    """
    todo = [e for e in dict.fromkeys(expressions) if e not in _COMPILED_OK]
    together = [e for e in todo if is_balanced(e)]
    if together:
        try:
            jq.compile("[" + ",".join(f"({e}\n)" for e in together) + "]")
        except ValueError:
            pass
        else:
            _COMPILED_OK.update(together)
            todo = [e for e in todo if e not in _COMPILED_OK]
    errors: dict[str, str] = {}
    for expression in todo:
        error = compile_error(expression)
        if error is None:
            _COMPILED_OK.add(expression)
        else:
            errors[expression] = error
    return errors


def compile_error(expression: str) -> str | None:
    """libjq's compile error for ``expression`` alone, or None when it compiles."""
    try:
        jq.compile(expression)
    except ValueError as error:
        return jq_message(str(error))
    return None


def jq_message(raw: str) -> str:
    """libjq's compile report as one line: each ``jq: error: ...`` joined by ``; ``.

    libjq writes every error on its own line followed by the program echoed with a caret
    under the culprit and a ``jq: N compile errors`` trailer; flattened naively, the errors
    run together and the expression is repeated once per error. The caller already names
    the expression, so only the errors (with their line and column) are kept.
    """
    errors = [line.strip().rstrip(":") for line in raw.splitlines()
              if line.startswith("jq: error")]
    return "; ".join(errors) if errors else " ".join(raw.split())
