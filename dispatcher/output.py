"""Printing results like kubectl: ``-o table|wide|json|yaml``.

Commands build plain rows (dicts) and full objects; this module only renders them, so every
command formats the same way and scripts can rely on ``-o json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Literal, TextIO

import yaml
from rich.console import Console
from rich.table import Table

__all__ = ["FORMATS", "Format", "age", "emit", "table"]

Format = Literal["table", "wide", "json", "yaml"]
FORMATS: tuple[str, ...] = ("table", "wide", "json", "yaml")


def table(
    *, columns: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None
) -> None:
    """Print rows under upper-case headers, kubectl style (no borders, two-space gaps)."""
    grid = Table(box=None, show_edge=False, pad_edge=False,
                 padding=(0, 2, 0, 0), header_style="bold")
    for column in columns:
        grid.add_column(column.upper(), no_wrap=True, overflow="ignore")
    for row in rows:
        grid.add_row(*("<none>" if cell is None else str(cell) for cell in row))
    Console(file=out or sys.stdout, width=10_000, highlight=False,
            soft_wrap=True).print(grid)


def emit(data: Any, *, fmt: Format, out: TextIO | None = None) -> None:
    """Print ``data`` as JSON (indented, stable key order as given) or YAML."""
    sink = out or sys.stdout
    if fmt == "json":
        json.dump(data, sink, indent=2)
        sink.write("\n")
    elif fmt == "yaml":
        yaml.safe_dump(data, sink, sort_keys=False)
    else:
        raise ValueError(f"emit() renders json or yaml, not {fmt!r}")


def age(seconds: float | None) -> str:
    """An age as kubectl prints one, roughly: 45s, 12m, 5h, 3d ("-" when unknown)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    if seconds < 172800:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"
