"""Directories of the dispatcher source tree (``deploy/...``) that the package reads.

The Go wrapper modules, the CRDs and the member manifests are not shipped in the wheel;
commands that need them find them next to the package (a source checkout or an editable
install) or under the current directory. A module of its own, below every layer, so the
fleet (member manifests) and the dev fleet (Go modules, CRDs) share it without importing
each other.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SourceMissing", "source_path"]


class SourceMissing(RuntimeError):
    """The directory is not there (a wheel install): the message says what to do."""


def source_path(*parts: str) -> Path:
    """``parts`` under the source tree: next to the package, else under the current
    directory; SourceMissing when neither has it."""
    for base in (Path(__file__).resolve().parents[1], Path.cwd()):
        candidate = base.joinpath(*parts)
        if candidate.is_dir():
            return candidate
    raise SourceMissing(f"{'/'.join(parts)} not found: run this from a dispatcher source "
                        f"checkout")
